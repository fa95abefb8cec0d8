"""``edgenlp profile``: per-component parameters, FLOPs, memory and latency."""

from __future__ import annotations

import contextlib

import click

from edgenlp.cli.options import (Spelling, build_config, config_options, emit_json, given, json_options, json_request,
                                 task_options)
from edgenlp.cli.types import ChoiceList
from edgenlp.errors import EdgeNLPError
from edgenlp.profile.api import ProfileConfig
from edgenlp.profile.dynamic import DynamicProfileConfig


# Flags whose name is not the field's; --runtime's default depends on MODEL_OR_BUNDLE.
SPELLINGS = {
    "seq_lens": Spelling(name="seq-len"),
    "runtimes": Spelling(name="runtime", type=ChoiceList(), default=None,
                         help="Runtimes, comma-separated: eager, executorch, onnx, native "
                              "(default: eager for a model, the bundle's formats for a bundle)."),
}


@click.command("profile")
@click.argument("model_or_bundle")
@task_options(required=False, help="Task whose labels size the classifier head (model only).")
@config_options(ProfileConfig, spellings=SPELLINGS)
@json_options(legacy_file=True, help="Print the profile document(s) as JSON on stdout (instead of the tables).")
@click.option("--plot", "plot_file", default=None, type=click.Path(dir_okay=False), help="Write a PNG of the shares here.")
@config_options(DynamicProfileConfig, group="dyn")
@click.option("--curve-plot", "curve_file", default=None, type=click.Path(dir_okay=False),
              help="With --data: write a PNG of latency against accuracy as the exit threshold moves here.")
@click.option("--workdir", default=None, type=click.Path(file_okay=False),
              help="Keep lowered .pte/.onnx here and reuse them while model, weights and lengths match "
                   "(default: a temporary dir).")
@click.option("--on", "board_uri", default=None, metavar="URI", help="Profile the bundle on a board: ssh://user@host[:port], "
              "adb[:serial] or qemu:CPU. Its runtime is native@URI; --runtime adds host runtimes beside it.")  # fmt: skip
@click.option("--cores", type=click.Choice(["all", "big", "little"]), default="all", show_default=True,
              help="With --on: pin to this CPU cluster (taskset).")  # fmt: skip
@click.pass_context
def profile_cmd(ctx, model_or_bundle, task, data_dir, as_json, json_out, plot_file, curve_file, workdir, board_uri, cores, **_):
    """Profile MODEL_OR_BUNDLE per component: embedding, QKV, attention core, output projection, FFN, other.

    \b
    Analytic columns (params, FLOPs, weight and activation bytes) come from the
    module shapes; latency is measured on each runtime and attributed per
    component (median over --runs, p90 in the JSON).

    \b
    Examples:
      edgenlp profile bert-base --seq-len 32,128,512
      edgenlp profile minilm-l6 --runtime eager,executorch,onnx --threads 1,2 --plot minilm.png --json-out minilm.json
      edgenlp profile out/minilm-sst2 --per-layer
      edgenlp profile out/minilm-sst2 --on ssh://pi@raspberrypi.local --threads 1,4 --cores big --json-out pi.json
      edgenlp profile out/minilm-sst2 --on qemu:cortex-a53 --seq-len 32 --runs 5 --runtime native
      edgenlp profile out/sst2-dyn-bundle --data sst2 --runtime executorch --curve-plot sst2-dyn.png --json-out sst2-dyn.json
    """
    from edgenlp.profile.api import default_runtimes, profile
    from edgenlp.profile.report import plot, print_tables

    labels = None
    if task is not None:
        from edgenlp.data.tasks import load_task

        labels = load_task(task, data_dir=data_dir).labels
    fields = given(ctx)
    asked = fields.pop("runtimes", None)
    rts = tuple(asked) if asked else default_runtimes(model_or_bundle)
    if board_uri is None and cores != "all":
        raise EdgeNLPError("--cores needs --on URI (a board)")
    dynamic = build_config(DynamicProfileConfig, given(ctx, "dyn"))
    if curve_file is not None and not dynamic.active:
        raise EdgeNLPError("--curve-plot needs --data TASK_OR_TSV (and a dynamic bundle)")
    if dynamic.active:
        if board_uri is not None:
            raise EdgeNLPError("--data profiles a dynamic bundle on the host runtimes, not with --on")
        from edgenlp.profile.dynamic import check_dynamic

        check_dynamic(model_or_bundle, dynamic, rts)
    stdout, json_file = json_request(as_json, json_out)
    with contextlib.ExitStack() as stack:
        if board_uri is not None:
            from edgenlp.boards.base import open_board
            from edgenlp.boards.measure import board_runtime

            board = stack.enter_context(open_board(board_uri))
            rts = (stack.enter_context(board_runtime(board, cores=cores)), *(asked or ()))
        config = build_config(ProfileConfig, {**fields, "runtimes": rts})
        docs = profile(model_or_bundle, config, labels=labels, workdir=workdir, dynamic=dynamic, data_dir=data_dir)
    doc = docs[0] if len(docs) == 1 else docs
    if not stdout:
        print_tables(docs, per_layer=config.per_layer)
    emit_json(doc, stdout=stdout, out_file=json_file)
    if json_file:
        click.echo(f"wrote {json_file}", err=stdout)
    if plot_file:
        plot(docs, plot_file)
        click.echo(f"wrote {plot_file}", err=stdout)
    if curve_file:
        from edgenlp.profile.report import plot_curve

        plot_curve(docs[0], curve_file)
        click.echo(f"wrote {curve_file}", err=stdout)
