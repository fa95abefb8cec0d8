"""``edgenlp targets``: list device targets, show one, calibrate the cost model."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import click

from edgenlp.cli.options import json_options, signature_option
from edgenlp.cli.types import IntList
from edgenlp.errors import EdgeNLPError
from edgenlp.targets.calibrate import calibrate as calibrate_api

log = logging.getLogger(__name__)


def _table_state(target) -> str:
    from edgenlp.targets.costmodel import device_table_file, host_table_file, host_table_path

    if target.name == "host":
        table = host_table_file()
        return "not calibrated" if table is None else "calibrated" if table == host_table_path() else "reference table"
    return "measured" if device_table_file(target) is not None else "estimated"


def _budget_text(b) -> str:
    lat = f"{b.latency_ms:g} ms" if b.latency_ms else "-"
    mem = f"{b.memory_mb:g} MB" if b.memory_mb else "-"
    size = f"{b.size_mb:g} MB" if b.size_mb else "-"
    return f"{lat} @ seq {b.seq_len}/{b.threads}t, {mem}, {size}"


@click.group("targets", invoke_without_command=True)
@json_options(file=False, help="Print JSON instead of a table.")
@click.pass_context
def targets_cmd(ctx: click.Context, as_json: bool) -> None:
    """List device targets (targets/*.toml): cores, ISA, throughput, runtime, default budgets.

    A target's cost-model state is "measured" (a table profiled on the device),
    "estimated" (the host calibration transferred by throughput and bandwidth
    ratios) or, for the host, whether it has been calibrated.

    \b
    Examples:
      edgenlp targets
      edgenlp targets show pixel-7
      edgenlp targets show my-board.toml --json
      edgenlp targets calibrate host
    """
    if ctx.invoked_subcommand is not None:
        return
    from edgenlp.targets.target import load_target, list_targets

    rows = []
    for entry in list_targets():
        t = load_target(entry.name)
        rows.append({**t.summary(), "cost_model": _table_state(t)})
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    click.echo(f"{'name':<17} {'cores (GHz)':<36} {'ISA':<26} {'fp32 GF/core':>12} {'GB/s':>6}  {'default budgets':<38} cost model")
    for r in rows:
        click.echo(f"{r['name']:<17} {r['cores'][:36]:<36} {','.join(r['isa'])[:26]:<26} {r['fp32_gflops_core']:>12g} "
                   f"{r['bandwidth_gbps']:>6g}  {_budget_text(load_target(r['name']).budgets):<38} {r['cost_model']}")  # fmt: skip
    click.echo("\nA TOML file of your own works wherever a target name does (see `edgenlp targets show host` for the fields).")


@targets_cmd.command("show")
@click.argument("target")
@json_options(file=False, help="Print the target as JSON.")
def show_cmd(target: str, as_json: bool) -> None:
    """Print one target: clusters, ISA, memory, runtime, default budgets, cost-model state.

    \b
    Examples:
      edgenlp targets show pixel-7
      edgenlp targets show ./my-board.toml --json
    """
    from edgenlp.targets.target import load_target

    t = load_target(target)
    d = t.to_dict()
    d["cost_model"] = _table_state(t)
    if as_json:
        click.echo(json.dumps(d, indent=2))
        return
    click.echo(f"{t.name}: {t.description}")
    click.echo(f"  file         {t.source}")
    click.echo(f"  arch         {t.arch}   qemu -cpu {t.qemu_cpu or '(native)'}")
    click.echo(f"  ISA          {', '.join(t.isa)}")
    click.echo(f"  memory       {t.memory_mb:g} MB, {t.bandwidth_gbps:g} GB/s")
    kind = "sustained (measured)" if t.throughput_kind == "measured" else "peak"
    for c in t.clusters:
        click.echo(f"  cluster      {c.name:<7} {c.cores} x {c.core} @ {c.freq_ghz:g} GHz: "
                   f"{c.fp32_gflops_per_core:g} GFLOP/s fp32, {c.int8_gops_per_core:g} GOP/s int8 per core ({kind})")  # fmt: skip
    click.echo(f"  runtime      {t.runtime} / {t.backend} (resident base {t.base_memory_mb:g} MB)")
    click.echo(f"  budgets      {_budget_text(t.budgets)}")
    for k, v in t.measured:
        click.echo(f"  measured     {k} = {v:g}")
    click.echo(f"  cost model   {d['cost_model']}")
    for line in _minilm_predictions(t):
        click.echo(f"  {line}")


def _minilm_predictions(target) -> list[str]:
    """MiniLM-L6 at the default budgets' length and threads, per precision (empty without any cost table)."""
    from edgenlp.targets.costmodel import CostModel
    from edgenlp.targets.planner import MINILM_L6

    try:
        cm = CostModel.for_target(target)
    except EdgeNLPError as exc:
        return [f"predictions  unavailable: {exc}"]
    b = target.budgets
    out = []
    for bits in ("fp32", "int8", "int4"):
        p = cm.predict(MINILM_L6, bits=bits, embeddings=None if bits == "fp32" else bits, seq_len=b.seq_len, threads=b.threads)
        out.append(f"minilm-l6    {bits}: {p.latency_ms:.1f} ms at seq {b.seq_len}/{b.threads}t, {p.peak_memory_mb:.0f} MB peak, "
                   f"{p.size_mb:.1f} MB{' (estimated)' if p.estimated else ''}")  # fmt: skip
    return out


@targets_cmd.command("calibrate")
@click.argument("target")
@click.option("--on", "on", metavar="URI", help="Measure on a board (ssh://user@host, adb[:serial], qemu:CPU) instead of the host.")
@click.option("--cores", type=click.Choice(["all", "big", "little"]), default="big", show_default=True,
              help="With --on: the cluster to pin to.")
@signature_option(calibrate_api, "runs", "--runs", type=click.IntRange(3, 1000), help="Timed runs per measurement.")
@signature_option(calibrate_api, "threads", "--threads", type=IntList(), help="Comma-separated thread counts to measure.")
@click.option("--shapes", type=click.IntRange(2, 64), default=None, help="Measure only the first N shapes of the grid (quick checks).")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), help="Also write the table here (e.g. targets/NAME.measured.json).")
@click.option("--workdir", type=click.Path(file_okay=False, path_type=Path), help="Keep lowered calibration models here (default: a temp dir).")
@click.option("--precisions", default=None, metavar="RT/PREC,...",
              help="Host only: the runtime/precision pairs to measure, e.g. executorch/int4 "
                   "(default: executorch/fp32,int8,int4 and onnx/fp32,int8).")
@click.option("--merge", "merge", type=click.Path(dir_okay=False, exists=True, path_type=Path),
              help="Host only: add the measured rows to this table of the same machine (rescaled to its reference speed).")
def calibrate_cmd(target: str, on: str | None, cores: str, runs: int, threads: tuple[int, ...], shapes: int | None, out: Path | None,
                  workdir: Path | None, precisions: str | None, merge: Path | None) -> None:  # fmt: skip
    """Calibrate the cost model by profiling a grid of encoder shapes through the real runtimes.

    Without --on, TARGET must be `host`: the table goes to the user cache
    (keyed by CPU model, ISA and runtime versions; ~10-20 minutes on 2 cores).
    With --on, the grid runs on the board through the native runtime; the table
    goes next to a user's own target file (NAME.measured.json) or, for a
    built-in target, to the user cache; --out writes a copy elsewhere (commit
    targets/NAME.measured.json to share it). A measured table replaces the
    estimated transfer for that target.

    \b
    Examples:
      edgenlp targets calibrate host
      edgenlp targets calibrate raspberry-pi-5 --on ssh://pi@raspberrypi.local --threads 1,4
      edgenlp targets calibrate my-board.toml --on qemu:cortex-a76 --runs 5
      edgenlp targets calibrate host --precisions executorch/int4 --merge targets/host.costs.json --out targets/host.costs.json
    """
    from edgenlp.targets.calibrate import RUNTIME_PRECISIONS, calibrate, grid_shapes, merge_tables
    from edgenlp.targets.costmodel import CostTable, device_table_cache_path, host_table_path
    from edgenlp.targets.target import load_target, targets_dir

    t = load_target(target)
    thread_list = tuple(threads)
    if on is not None and (precisions or merge):
        raise EdgeNLPError("--precisions and --merge apply to host calibration only (a board measures fp32 through the native runtime)")
    pairs = RUNTIME_PRECISIONS
    if precisions:
        pairs = tuple(tuple(x.strip().split("/", 1)) for x in precisions.split(",") if x.strip())
        bad = [f"{'/'.join(p)}" for p in pairs if p not in RUNTIME_PRECISIONS]
        if bad or not pairs:
            raise EdgeNLPError(f"--precisions {precisions!r}: choose from {', '.join('/'.join(p) for p in RUNTIME_PRECISIONS)}")
    base = CostTable.load(merge) if merge is not None else None
    if on is None:
        if t.name != "host":
            raise EdgeNLPError(f"calibrating {t.name} needs --on URI (a board to measure on); without --on only `host` is calibrated")
        import os

        if max(thread_list) > (os.cpu_count() or 1):
            raise EdgeNLPError(f"--threads {max(thread_list)} exceeds this host's {os.cpu_count()} cores")
        if base is not None:
            from edgenlp.targets.costmodel import cpu_key

            if base.key != cpu_key():
                raise EdgeNLPError(f"--merge {merge}: that table was measured on another CPU or runtime versions ({base.key})")
        table = calibrate(shapes=grid_shapes()[:shapes], runtime_precisions=pairs, threads=thread_list, runs=runs, workdir=workdir)
        if base is not None:
            table = merge_tables(base, table)
        dest = host_table_path(table.key)
    else:
        table = _calibrate_on_board(t, on, cores=cores, threads=thread_list, runs=runs, workdir=workdir, shapes=shapes)
        src = Path(t.source)
        builtin = src.parent.resolve() == targets_dir().resolve()
        dest = device_table_cache_path(t.name) if builtin else src.with_name(f"{t.name}.measured.json")
    table.save(dest)
    if out is not None:
        table.save(out)
    click.echo(f"{len(table.observations)} observations ({', '.join(table.notes.get('measured', []))}) -> {dest}")


def _calibrate_on_board(target, uri: str, *, cores: str, threads, runs: int, workdir, shapes: int | None):
    try:
        from edgenlp.boards.base import open_board
        from edgenlp.boards.measure import board_runtime
    except ImportError:
        raise EdgeNLPError("--on needs board support (edgenlp.boards), which this edgenlp does not include yet") from None
    from edgenlp.profile.api import MEASURERS
    from edgenlp.targets.calibrate import calibrate, grid_shapes

    if max(threads) > target.cores:
        raise EdgeNLPError(f"--threads {max(threads)} exceeds {target.name}'s {target.cores} cores")
    with open_board(uri) as board, board_runtime(board, cores=cores) as rt:
        key = {"device": uri, "cores": cores, "target": target.name}
        return calibrate(shapes=grid_shapes()[:shapes], runtime_precisions=(("executorch", "fp32"),), threads=threads, runs=runs, workdir=workdir,
                         measurer_factory=MEASURERS[rt], runtime_key=rt, key=key, device=target.name)  # fmt: skip
