"""Calibrate the cost model: profile a grid of encoder shapes through the real runtimes.

Every shape is a MiniLM-sized encoder (hidden 384, head_dim 32) with seeded
random weights — latency does not depend on the values — with uneven heads
and FFN widths per layer, and 2 to 6 layers, so the fit sees each feature of
:data:`edgenlp.targets.costmodel.COMPONENT_FEATURES` vary on its own. Each is
lowered the way a bundle is (ExecuTorch ``.pte`` with one method per length;
ONNX with a dynamic sequence axis) and profiled with the profiler's measurers
(:mod:`edgenlp.profile`); one profile document per (shape, runtime,
precision, seq_len, threads) becomes one :class:`Observation`.

Precisions measured (:data:`RUNTIME_PRECISIONS`): fp32, int8 and int4 through
ExecuTorch (the quantize step's own flows, lowered to XNNPACK: dynamic
per-token int8 activations × per-channel int8 weights, or × int4 groupwise
weights, on every linear) and fp32 and int8 through ONNX Runtime (its dynamic
per-channel flow, ``onnxruntime.quantization.quantize_dynamic`` on the
linears). int4 gets rows of its own because XNNPACK's int4 kernels are not
int8's speed with half the bytes: on an AVX-512 VNNI host a MiniLM ran 35%
slower in int4 than in int8. A precision left out (``runtime_precisions``) is
derived by the cost model from the others, labelled as such.

:func:`merge_tables` adds a calibration of some precisions to an existing
table of the same machine, rescaled to that table's reference speed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import tempfile
import time
from pathlib import Path
from typing import Callable, Sequence

from edgenlp.models.encoder import EncoderShape
from edgenlp.targets.costmodel import CostTable, Observation, cpu_key
from edgenlp.utils import progress_display

log = logging.getLogger(__name__)

MINILM = dict(family="bert", vocab_size=30522, hidden=384, head_dim=32, max_positions=512)
# (heads per layer, FFN width per layer): full, uniform cuts, uneven pruned-looking shapes, shallow stacks
GRID: tuple[tuple[tuple[int, ...], tuple[int, ...]], ...] = (
    ((12,) * 6, (1536,) * 6),
    ((6,) * 6, (768,) * 6),
    ((12, 10, 8, 6, 4, 2), (1536, 1200, 900, 600, 300, 100)),
    ((2, 4, 12, 12, 4, 0), (256, 1536, 512, 1024, 0, 1536)),
    ((12,) * 3, (384,) * 3),
    ((3,) * 4, (1536,) * 4),
)
RUNTIME_PRECISIONS = (("executorch", "fp32"), ("executorch", "int8"), ("executorch", "int4"), ("onnx", "fp32"), ("onnx", "int8"))
EMBEDDING_SCHEMES = ("int8", "int4")  # word-table precisions measured beside int8/int4 linears (first shape only)
# Re-measured before every step on a shared machine: observations are scaled by (first / current) reference time.
REFERENCE = ((12, 12), (1536, 1536))


def grid_shapes(grid=GRID) -> list[EncoderShape]:
    return [EncoderShape(heads=h, ffn=f, **MINILM) for h, f in grid]


def quantize_onnx_int8(src: Path, dst: Path) -> Path:
    """ONNX Runtime dynamic int8, per-channel weights, linears only (the peer flow of the benchmarks).

    The dynamo exporter's value_info trips ONNX shape inference inside
    ``quantize_dynamic`` ("Inferred shape and existing shape differ"); it is
    dropped first (ORT re-infers shapes at load).
    """
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    model = onnx.load(str(src))
    del model.graph.value_info[:]
    stripped = dst.with_name(dst.stem + ".stripped.onnx")
    onnx.save(model, str(stripped))
    tmp = dst.with_name(f".{dst.name}.tmp")
    quantize_dynamic(str(stripped), str(tmp), weight_type=QuantType.QInt8, per_channel=True, op_types_to_quantize=["MatMul"],
                     extra_options={"MatMulConstBOnly": True})  # fmt: skip
    stripped.unlink()
    tmp.replace(dst)
    return dst


def measure_shape(shape: EncoderShape, *, runtime: str, precision: str, seq_lens: Sequence[int], threads: Sequence[int],
                  runs: int, warmup: int, workdir: Path, measurer_factory: Callable | None = None, runtime_key: str | None = None,
                  seed: int = 0, docs: list | None = None, embeddings: str | None = None) -> list[Observation]:  # fmt: skip
    """Profile one shape on one runtime/precision; one observation per (seq_len, threads).

    ``embeddings`` (``"int8"``/``"int4"``, ExecuTorch int8/int4 only) stores
    the word table at that precision too (the observation records it). The
    profile documents are appended to ``docs`` when given.
    """
    if embeddings and not (runtime == "executorch" and precision in ("int8", "int4")):
        raise ValueError(f"a quantized word table is calibrated with executorch int8/int4 linears, not {runtime}/{precision}")
    import torch

    from edgenlp.models.encoder import EncoderClassifier
    from edgenlp.profile.analytic import analyze
    from edgenlp.profile.api import MEASURERS, ProfileConfig, build_document
    from edgenlp.profile.components import LinearPlan
    from edgenlp.profile.measure import MeasureSpec, ProfileTarget

    torch.manual_seed(seed)
    model = EncoderClassifier(shape, 2).init_weights(seed=seed).eval()
    key = runtime_key or runtime
    factory = measurer_factory or MEASURERS[runtime]
    measurer = factory()
    workdir.mkdir(parents=True, exist_ok=True)
    target = ProfileTarget(name="calibration", plan=LinearPlan.from_model(model), vocab_size=shape.vocab_size, model=model,
                           analysis_model=model, workdir=workdir, seq_lens=tuple(seq_lens))  # fmt: skip
    if precision in ("int8", "int4") and runtime == "executorch":
        name = f"model.{precision}" + (f"+emb{embeddings}" if embeddings else "") + ".pte"
        target.pte = lower_quantized_pte(model, precision, tuple(seq_lens), workdir / name, embeddings=embeddings)
        target.pte_methods = {s: f"forward_{s}" for s in sorted(set(seq_lens))}
    elif precision == "int8":
        if runtime != "onnx":
            raise ValueError(f"int8 calibration is implemented for executorch and onnx, not {runtime}")
        fp = measurer.model_for(target, MeasureSpec(seq_len=max(seq_lens)))
        q = workdir / "model.int8.onnx"
        reuse = q.is_file() and q.stat().st_mtime >= fp.stat().st_mtime
        target.onnx = q if reuse else quantize_onnx_int8(fp, q)
    elif precision != "fp32":
        raise ValueError(f"cannot calibrate precision {precision!r} yet")
    config = ProfileConfig(seq_lens=tuple(seq_lens), runtimes=(runtime,), threads=tuple(threads), runs=runs, warmup=warmup)
    out = []
    for seq in seq_lens:
        analytic = analyze(model, seq_len=seq)
        for t in threads:
            m = measurer.measure(target, MeasureSpec(seq_len=seq, threads=t, runs=runs, warmup=warmup))
            doc = build_document(target, analytic, {key: m}, config, t)
            if docs is not None:
                docs.append(doc)
            ob = Observation.from_profile(doc, runtime_key=key, runtime=runtime, precision=precision, model_shape=shape)
            out.append(dataclasses.replace(ob, embeddings=embeddings) if embeddings else ob)
    return out


def lower_quantized_pte(model, precision: str, seq_lens: tuple[int, ...], out: Path, *, embeddings: str | None = None) -> Path:
    """``model`` lowered to ExecuTorch with every linear at ``precision`` (int8 per channel or int4 groupwise), as a bundle is.

    ``embeddings`` also stores the word table at that precision. Reused when
    ``out`` was written for the same lengths (the weights are seeded, so the
    same shape gives the same file).
    """
    import json
    import os

    from edgenlp.export.executorch import to_pte
    from edgenlp.quantize.config import QuantizeConfig
    from edgenlp.quantize.schemes import fake_quantize

    key = {"precision": precision, "seq_lens": sorted(set(seq_lens)), "shape": model.shape.to_dict()}
    if embeddings:
        key["embeddings"] = embeddings
    sidecar = out.with_name(out.name + ".key.json")
    if out.is_file() and sidecar.is_file() and json.loads(sidecar.read_text()) == key:
        return out
    cfg = QuantizeConfig(scheme=precision, embeddings=embeddings)
    res = to_pte(fake_quantize(model, cfg), buckets=tuple(key["seq_lens"]))
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    tmp.write_bytes(res.buffer)
    os.replace(tmp, out)
    sidecar.write_text(json.dumps(key))
    return out


def reference_ms(workdir: Path, *, threads: int = 1, runs: int = 15, seq_len: int = 128) -> float:
    """Fastest run of the :data:`REFERENCE` shape through ONNX Runtime fp32: the machine's current speed."""
    shape = EncoderShape(heads=REFERENCE[0], ffn=REFERENCE[1], **MINILM)
    return measure_shape(shape, runtime="onnx", precision="fp32", seq_lens=(seq_len,), threads=(threads,), runs=runs, warmup=2,
                         workdir=workdir / "reference")[0].total_ms  # fmt: skip


def gemm_gflops(n: int = 512, reps: int = 5) -> float:
    """One-thread fp32 GEMM rate right now (torch.mm, best of ``reps``): the speed the table is measured at."""
    import time

    import torch

    old = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        a, b = torch.randn(n, n), torch.randn(n, n)
        torch.mm(a, b)
        best = float("inf")
        for _ in range(reps):
            t0 = time.perf_counter()
            torch.mm(a, b)
            best = min(best, time.perf_counter() - t0)
    finally:
        torch.set_num_threads(old)
    return 2 * n**3 / best / 1e9


def _scaled(ob: Observation, factor: float) -> Observation:
    import dataclasses

    return dataclasses.replace(ob, components={k: v * factor for k, v in ob.components.items()}, total_ms=ob.total_ms * factor)


def calibrate(*, shapes: Sequence[EncoderShape] | None = None, runtime_precisions=RUNTIME_PRECISIONS, seq_lens=(32, 128),
              threads=(1, 2), runs: int = 15, warmup: int = 2, workdir: str | Path | None = None, progress: bool = True,
              measurer_factory: Callable | None = None, runtime_key: str | None = None, key: dict | None = None,
              device: str = "host", normalize: bool = True, embedding_schemes: Sequence[str] = EMBEDDING_SCHEMES,
              grid: str = "full", on_step: Callable[[int, int, str], None] | None = None) -> CostTable:  # fmt: skip
    """Measure ``shapes`` (default :data:`GRID`) and return the cost table (not saved).

    With ``normalize`` (host only), the :data:`REFERENCE` shape is re-measured
    before every step and the step's observations are scaled by
    ``first reference / current reference``: on a machine shared with other
    jobs, the table then describes one consistent machine speed (recorded as
    ``notes["reference_ms"]``). ``embedding_schemes`` are measured on the
    first shape with ExecuTorch int8/int4 linears (the pairs a bundle ships),
    the word table at each scheme. The 1-minute load average is recorded
    before every step (``notes["load_avg"]``); ``grid`` names the grid in the
    notes (``"full"`` or ``"minimal"``). ``on_step(done, total, what)`` is
    called before each step (progress for callers without a terminal bar).
    """
    from rich.progress import Progress

    normalize = normalize and measurer_factory is None

    shapes = list(shapes) if shapes is not None else grid_shapes()
    obs: list[Observation] = []
    steps = [(i, s, rt, p, None) for rt, p in runtime_precisions for i, s in enumerate(shapes)]  # runtime by runtime
    steps += [(0, shapes[0], rt, p, e) for rt, p in runtime_precisions for e in embedding_schemes
              if rt == "executorch" and p in ("int8", "int4") and shapes]  # fmt: skip
    loads: list[float] = []
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    with contextlib.ExitStack() as stack:
        if workdir is None:
            workdir = stack.enter_context(tempfile.TemporaryDirectory(prefix="edgenlp-calibrate-"))
        bar = stack.enter_context(progress_display(True, lambda: Progress(disable=not progress, transient=True))
                                  if progress else Progress(disable=True))
        task = bar.add_task("calibrating", total=len(steps))
        ref_first, gemm = None, None
        factors = []
        for n, (i, shape, rt, prec, emb) in enumerate(steps):
            what = f"shape {i + 1}/{len(shapes)} {rt} {prec}" + (f" + {emb} word table" if emb else "")
            bar.update(task, description=what)
            if on_step is not None:
                on_step(n, len(steps), what)
            with contextlib.suppress(OSError):
                loads.append(round(os.getloadavg()[0], 2))
            log.info("calibrating %s (heads %s, ffn %s)", what, shape.heads, shape.ffn)
            got = measure_shape(shape, runtime=rt, precision=prec, seq_lens=seq_lens, threads=threads, runs=runs, warmup=warmup,
                                workdir=Path(workdir) / f"shape{i}", measurer_factory=measurer_factory, runtime_key=runtime_key,
                                embeddings=emb)  # fmt: skip
            if normalize:
                ref = reference_ms(Path(workdir), runs=runs)
                if ref_first is None:
                    ref_first, gemm = ref, gemm_gflops()
                factors.append(ref_first / ref)
                log.info("reference %.2f ms (first %.2f): scaling by %.3f", ref, ref_first, ref_first / ref)
                got = [_scaled(o, ref_first / ref) for o in got]
            obs += got
            bar.advance(task)
    notes = {"measured": sorted({f"{o.runtime}/{o.precision}" for o in obs}),
             "measured_embeddings": sorted({f"{o.runtime}/{o.precision}+{o.embeddings}" for o in obs if o.embeddings}),
             "assumed": "precisions not in 'measured': derived by throughput ratios",
             "seq_lens": list(seq_lens), "threads": list(threads), "runs": runs, "shapes": len(shapes), "grid": grid,
             "started": started, "load_avg": loads}  # fmt: skip
    if normalize and ref_first:
        notes.update(reference_ms=ref_first, reference_factors=[round(f, 3) for f in factors], fp32_gemm_gflops=round(gemm, 2),
                     reference=f"ONNX Runtime fp32, heads {REFERENCE[0]}, ffn {REFERENCE[1]}, seq 128, 1 thread (fastest run)")
    return CostTable(obs, key if key is not None else cpu_key(), device, notes)


def merge_tables(base: CostTable, new: CostTable) -> CostTable:
    """``base`` with ``new``'s observations added; ``new`` replaces base rows of the runtimes/precisions it measured.

    Both must come from the same machine key (CPU and runtime versions).
    Host calibrations are normalized to the speed their reference shape ran
    at (``notes["reference_ms"]``); ``new``'s rows are rescaled by
    ``base reference / new reference``, so the merged table describes one
    machine speed. Raises :class:`EdgeNLPError` for different keys or devices.
    """
    from edgenlp.errors import EdgeNLPError

    if base.key != new.key or base.device != new.device:
        raise EdgeNLPError(f"cannot merge calibrations of different machines ({base.device} {base.key} vs {new.device} {new.key})")
    measured = {(o.runtime, o.precision) for o in new.observations}
    factor = 1.0
    if base.notes.get("reference_ms") and new.notes.get("reference_ms"):
        factor = float(base.notes["reference_ms"]) / float(new.notes["reference_ms"])
    obs = [o for o in base.observations if (o.runtime, o.precision) not in measured] + [_scaled(o, factor) for o in new.observations]
    notes = {**base.notes, "measured": sorted({f"{o.runtime}/{o.precision}" for o in obs})}
    notes["merged"] = [*base.notes.get("merged", []),
                       {"measured": sorted(f"{r}/{p}" for r, p in measured), "reference_ms": new.notes.get("reference_ms"),
                        "scaled_by": round(factor, 3), "runs": new.notes.get("runs"), "threads": new.notes.get("threads")}]
    return CostTable(obs, base.key, base.device, notes)


# The minimal grid `compress` measures on a host without a calibration: the full shape, an uneven pruned-looking one
# and a shallow stack, so every feature still varies on its own (layers, heads, FFN widths).
MINIMAL_GRID = (GRID[0], GRID[2], GRID[4])


def minimal_precisions(schemes: Sequence[str], runtime: str = "executorch") -> tuple[tuple[str, str], ...]:
    """The (runtime, precision) pairs a plan over ``schemes`` needs (``mixed`` = int8 and int4)."""
    want = {"fp32"}
    for s in schemes:
        want |= {"int8", "int4"} if s == "mixed" else {s}
    return tuple((runtime, p) for p in ("fp32", "int8", "int4") if p in want and (runtime, p) in RUNTIME_PRECISIONS)


def ensure_host_table(*, seq_len: int = 128, threads: int = 1, precisions: Sequence[str] = ("fp32", "int8", "int4"),
                      runtime: str = "executorch", runs: int = 7, progress: bool = True,
                      echo: Callable[[str], None] | None = None, measurer_factory: Callable | None = None,
                      workdir: str | Path | None = None) -> Path:  # fmt: skip
    """This machine's cost table, measured on :data:`MINIMAL_GRID` first when there is none; returns its path.

    The table is cached where ``edgenlp targets calibrate host`` writes
    (:func:`~edgenlp.targets.costmodel.host_table_path`, keyed by CPU and
    runtime versions): the second call, and every later ``compress`` on this
    machine, reads it. It measures ``runtime`` at the weight ``precisions`` a
    plan may choose, at ``seq_len`` (and a quarter of it) on ``threads``
    threads, and says so in its notes (``grid: "minimal"``); a full
    calibration replaces it. Progress goes to ``echo`` step by step.
    """
    from edgenlp.targets.costmodel import host_table_path

    say = echo or (lambda msg: log.info("%s", msg))
    path = host_table_path()
    if path.is_file():
        log.info("cost table of this machine: %s", path)
        return path
    pairs = minimal_precisions(precisions, runtime)
    seqs = tuple(sorted({max(8, seq_len // 4), seq_len}))
    shapes = grid_shapes(MINIMAL_GRID)
    say(f"no cost calibration of this machine: measuring a minimal grid first ({len(shapes)} shapes x "
        f"{', '.join(p for _, p in pairs)} through {runtime}, seq {'/'.join(map(str, seqs))}, {threads} thread(s); "
        f"cached at {path})")  # fmt: skip
    started = time.perf_counter()

    def step(done: int, total: int, what: str) -> None:
        say(f"  calibrating this machine {done + 1}/{total}: {what}")

    table = calibrate(shapes=shapes, runtime_precisions=pairs, seq_lens=seqs, threads=(threads,), runs=runs, warmup=2,
                      workdir=workdir, progress=progress, measurer_factory=measurer_factory, embedding_schemes=(),
                      grid="minimal", on_step=step)  # fmt: skip
    table.save(path)
    say(f"calibrated this machine in {time.perf_counter() - started:.0f} s -> {path}")
    return path
