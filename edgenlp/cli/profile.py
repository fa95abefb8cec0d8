"""``edgenlp profile``: per-component parameters, FLOPs, memory and latency."""

from __future__ import annotations

import contextlib

import click

from edgenlp.cli.types import IntList
from edgenlp.errors import EdgeNLPError


@click.command("profile")
@click.argument("model_or_bundle")
@click.option("--task", default=None, help="Task whose labels size the classifier head (model only).")
@click.option("--seq-len", type=IntList(), default="128", show_default=True, help="Sequence lengths, comma-separated (e.g. 32,128,512).")
@click.option("--batch", default=1, show_default=True, type=int, help="Batch size.")
@click.option("--runtime", "runtimes", default=None, help="Runtimes, comma-separated: eager, executorch, onnx, native. "
              "Default: eager for a model, the bundle's formats for a bundle.")  # fmt: skip
@click.option("--threads", type=IntList(), default="1", show_default=True, help="Thread counts, comma-separated (e.g. 1,2).")
@click.option("--runs", default=30, show_default=True, type=int, help="Timed runs per measurement (median and p90 over these).")
@click.option("--warmup", default=3, show_default=True, type=int, help="Untimed warm-up runs per measurement.")
@click.option("--json", "json_file", default=None, type=click.Path(dir_okay=False), help="Write the profile document(s) here.")
@click.option("--plot", "plot_file", default=None, type=click.Path(dir_okay=False), help="Write a PNG of the shares here.")
@click.option("--per-layer", is_flag=True, help="Also show and record rows per encoder layer.")
@click.option("--workdir", default=None, type=click.Path(file_okay=False), help="Keep lowered .pte/.onnx here and reuse them while model, weights and lengths match (default: a temporary dir).")
@click.option("--on", "board_uri", default=None, metavar="URI", help="Profile the bundle on a board: ssh://user@host[:port], "
              "adb[:serial] or qemu:CPU. Its runtime is native@URI; --runtime adds host runtimes beside it.")  # fmt: skip
@click.option("--cores", type=click.Choice(["all", "big", "little"]), default="all", show_default=True,
              help="With --on: pin to this CPU cluster (taskset).")  # fmt: skip
def profile_cmd(model_or_bundle, task, seq_len, batch, runtimes, threads, runs, warmup, json_file, plot_file, per_layer, workdir,
                board_uri, cores):  # fmt: skip
    """Profile MODEL_OR_BUNDLE per component: embedding, QKV, attention core, output projection, FFN, other.

    \b
    Analytic columns (params, FLOPs, weight and activation bytes) come from the
    module shapes; latency is measured on each runtime and attributed per
    component (median over --runs, p90 in the JSON).

    \b
    Examples:
      edgenlp profile bert-base --seq-len 32,128,512
      edgenlp profile minilm-l6 --runtime eager,executorch,onnx --threads 1,2 --plot minilm.png --json minilm.json
      edgenlp profile out/minilm-sst2 --per-layer
      edgenlp profile out/minilm-sst2 --on ssh://pi@raspberrypi.local --threads 1,4 --cores big --json pi.json
      edgenlp profile out/minilm-sst2 --on qemu:cortex-a53 --seq-len 32 --runs 5 --runtime native
    """
    from edgenlp.profile.api import ProfileConfig, default_runtimes, profile
    from edgenlp.profile.report import plot, print_tables
    from edgenlp.utils import atomic_write_json

    labels = None
    if task is not None:
        from edgenlp.data.tasks import load_task

        labels = load_task(task).labels
    rts = tuple(r.strip() for r in runtimes.split(",") if r.strip()) if runtimes else default_runtimes(model_or_bundle)
    if board_uri is None and cores != "all":
        raise EdgeNLPError("--cores needs --on URI (a board)")
    with contextlib.ExitStack() as stack:
        if board_uri is not None:
            from edgenlp.boards.base import open_board
            from edgenlp.boards.measure import board_runtime

            board = stack.enter_context(open_board(board_uri))
            rts = (stack.enter_context(board_runtime(board, cores=cores)), *(rts if runtimes else ()))
        try:
            config = ProfileConfig(
                seq_lens=seq_len, batch=batch, runtimes=rts, threads=threads,
                runs=runs, warmup=warmup, per_layer=per_layer,
            )  # fmt: skip
        except ValueError as exc:
            raise EdgeNLPError(str(exc)) from None
        docs = profile(model_or_bundle, config, labels=labels, workdir=workdir)
    print_tables(docs, per_layer=per_layer)
    if json_file:
        atomic_write_json(json_file, docs[0] if len(docs) == 1 else docs)
        click.echo(f"wrote {json_file}")
    if plot_file:
        plot(docs, plot_file)
        click.echo(f"wrote {plot_file}")
