"""``edgenlp run`` and ``edgenlp eval``."""

from __future__ import annotations


import click

from edgenlp.cli.dynamic import dynamic_kwargs, dynamic_options  # dynamic bundles: --static, --exit-threshold, --keep
from edgenlp.cli.options import (data_dir_option, emit_json, json_options, json_request, signature_option, task_option,
                                 threads_option)
from edgenlp.run.base import RUNTIMES
from edgenlp.run.evaluate import evaluate as evaluate_api

RUNTIME_THREADS = threads_option("Threads for the runtime (default: its own choice).")
RUNTIME_OPTION = signature_option(
    evaluate_api, "runtime", "--runtime", type=click.Choice(RUNTIMES),
    help="executorch/onnx/native run the bundle; eager runs a model directory in PyTorch.",
)


@click.command("run")
@click.argument("bundle", type=click.Path())
@click.argument("texts", nargs=-1, required=True)
@RUNTIME_OPTION
@RUNTIME_THREADS
@json_options(file=False, help="Print JSON (label and probabilities per text).")
@dynamic_options
def run_cmd(bundle, texts, runtime, threads, as_json, static, exit_threshold, keep):
    """Classify TEXTS with BUNDLE; prints the label and probabilities per text.

    \b
    Examples:
      edgenlp run out/minilm-sst2 "a gripping, funny film" "a dull mess"
      edgenlp run out/minilm-sst2 "not bad at all" --runtime onnx --json
    """
    from edgenlp.run.base import get_runner

    with get_runner(bundle, runtime=runtime, threads=threads, **dynamic_kwargs(static, exit_threshold, keep)) as runner:
        results = runner.predict(texts)
    if as_json:
        emit_json(results, stdout=True, out_file=None)
        return
    for r in results:
        top = sorted(r["probs"].items(), key=lambda kv: -kv[1])[:3]
        probs = "  ".join(f"{l}={p:.3f}" for l, p in top)
        where = f"\texit layer {r['exit_layer']}, tokens {r['tokens_kept']}" if "exit_layer" in r else ""
        click.echo(f"{r['label']}\t{probs}\t{r['text']}{where}")


@click.command("eval")
@click.argument("bundle", type=click.Path())
@task_option(required=False)
@signature_option(evaluate_api, "split", "--split", type=click.Choice(["dev", "train"]), help="The split of --task.")
@click.option("--data", type=click.Path(), default=None, help="Any TSV with text and label columns (instead of --task).")
@data_dir_option
@RUNTIME_OPTION
@RUNTIME_THREADS
@click.option("--limit", type=int, default=None, help="Evaluate only the first N rows.")
@json_options(help="Print the report as JSON.")
@click.option("--on", "board_uri", default=None, metavar="URI", help="Run on a board: ssh://user@host[:port], adb[:serial] "
              "or qemu:CPU; --runtime then picks the host runtime the predictions are compared with (default native).")  # fmt: skip
@click.option("--cores", type=click.Choice(["all", "big", "little"]), default="all", show_default=True,
              help="With --on: pin to this CPU cluster (taskset).")  # fmt: skip
@dynamic_options
@click.pass_context
def eval_cmd(ctx, bundle, task, split, data, data_dir, runtime, threads, limit, as_json, json_out, board_uri, cores, static,
             exit_threshold, keep):
    """Measure BUNDLE's accuracy (and macro-F1 with more than 2 labels) through its runtime.

    \b
    Examples:
      edgenlp eval out/minilm-sst2 --task sst2 --json
      edgenlp eval out/minilm-sst2 --task sst2 --runtime onnx --threads 2
      edgenlp eval out/minilm-sst2 --data my_reviews.tsv
      edgenlp eval out/ft-sst2 --task sst2 --runtime eager
      edgenlp eval out/minilm-sst2 --task sst2 --on ssh://pi@raspberrypi.local --threads 4 --cores big
      edgenlp eval out/minilm-sst2 --task sst2 --on qemu:cortex-a76 --limit 50 --json
    """
    stdout, json_file = json_request(as_json, json_out)
    dynamic = dynamic_kwargs(static, exit_threshold, keep)
    if board_uri is not None:
        if dynamic:
            from edgenlp.errors import EdgeNLPError

            raise EdgeNLPError("--static, --exit-threshold and --keep run on the host runtimes, not with --on")
        _eval_on_board(ctx, bundle, board_uri, task=task, split=split, data=data, data_dir=data_dir, runtime=runtime,
                       threads=threads, cores=cores, limit=limit, stdout=stdout, json_file=json_file)  # fmt: skip
        return
    if cores != "all":
        from edgenlp.errors import EdgeNLPError

        raise EdgeNLPError("--cores needs --on URI (a board)")
    from edgenlp.run.evaluate import evaluate

    report = evaluate(bundle, runtime=runtime, task=task, split=split, data=data, data_dir=data_dir, threads=threads, limit=limit,
                      **dynamic)
    emit_json(report, stdout=stdout, out_file=json_file)
    if stdout:
        return
    extra = f"  macro-F1 {report['macro_f1']:.4f}" if "macro_f1" in report else ""
    click.echo(f"{report['runtime']}: accuracy {report['accuracy']:.4f}{extra} on {report['n']} rows "
               f"({report['ms_per_text']:.2f} ms/text)")
    if "exit_layers" in report:
        lat = report["latency_ms"]
        click.echo(f"  exits {report['exit_layers']} (mean layer {report['mean_exit_layer']:.2f}); tokens per layer "
                   f"{report['tokens_kept']}; latency mean {lat['mean']:.2f} / p50 {lat['p50']:.2f} / p90 {lat['p90']:.2f} "
                   f"/ max {lat['max']:.2f} ms")


def _eval_on_board(ctx, bundle, uri, *, runtime, stdout, json_file, **kw):
    from edgenlp.boards.base import open_board
    from edgenlp.boards.evaluate import evaluate_on_board

    if ctx.get_parameter_source("runtime") is click.core.ParameterSource.DEFAULT:
        from edgenlp.run.native import library_path

        runtime = "native" if library_path().is_file() else "executorch"
    with open_board(uri) as board:
        report = evaluate_on_board(board, bundle, host_runtime=runtime, **kw)
    emit_json(report, stdout=stdout, out_file=json_file)
    if stdout:
        return
    lat, host = report["latency_ms"], report["host"]
    extra = f"  macro-F1 {report['macro_f1']:.4f}" if "macro_f1" in report else ""
    click.echo(f"{report['runtime']}: accuracy {report['accuracy']:.4f}{extra} on {report['n']} rows; per sentence "
               f"median {lat['median']:.2f} ms, p90 {lat['p90']:.2f} ms ({report['device']['cpu_model']})")
    click.echo(f"host ({host['runtime']}): same prediction on {host['same_prediction']}/{host['n']} rows, "
               f"max |Δprobability| {host['max_abs_prob_diff']:.2e}, accuracy {host['accuracy']:.4f}")
