"""``edgenlp run`` and ``edgenlp eval``."""

from __future__ import annotations

import json

import click

from edgenlp.run.base import RUNTIMES

RUNTIME_OPTION = click.option(
    "--runtime", type=click.Choice(RUNTIMES), default="executorch", show_default=True,
    help="executorch/onnx/native run the bundle; eager runs a model directory in PyTorch.",
)


@click.command("run")
@click.argument("bundle", type=click.Path())
@click.argument("texts", nargs=-1, required=True)
@RUNTIME_OPTION
@click.option("--threads", type=int, default=None, help="Threads for the runtime (default: its own choice).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (label and probabilities per text).")
def run_cmd(bundle, texts, runtime, threads, as_json):
    """Classify TEXTS with BUNDLE; prints the label and probabilities per text.

    \b
    Examples:
      edgenlp run out/minilm-sst2 "a gripping, funny film" "a dull mess"
      edgenlp run out/minilm-sst2 "not bad at all" --runtime onnx --json
    """
    from edgenlp.run.base import get_runner

    with get_runner(bundle, runtime=runtime, threads=threads) as runner:
        results = runner.predict(texts)
    if as_json:
        click.echo(json.dumps(results, indent=2, ensure_ascii=False))
        return
    for r in results:
        top = sorted(r["probs"].items(), key=lambda kv: -kv[1])[:3]
        probs = "  ".join(f"{l}={p:.3f}" for l, p in top)
        click.echo(f"{r['label']}\t{probs}\t{r['text']}")


@click.command("eval")
@click.argument("bundle", type=click.Path())
@click.option("--task", default=None, help="Built-in task or task folder.")
@click.option("--split", type=click.Choice(["dev", "train"]), default="dev", show_default=True)
@click.option("--data", type=click.Path(), default=None, help="Any TSV with text and label columns (instead of --task).")
@click.option("--data-dir", type=click.Path(file_okay=False), default=None, help="Folder holding the built-in task folders.")
@RUNTIME_OPTION
@click.option("--threads", type=int, default=None)
@click.option("--limit", type=int, default=None, help="Evaluate only the first N rows.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def eval_cmd(bundle, task, split, data, data_dir, runtime, threads, limit, as_json):
    """Measure BUNDLE's accuracy (and macro-F1 with more than 2 labels) through its runtime.

    \b
    Examples:
      edgenlp eval out/minilm-sst2 --task sst2 --json
      edgenlp eval out/minilm-sst2 --task sst2 --runtime onnx --threads 2
      edgenlp eval out/minilm-sst2 --data my_reviews.tsv
      edgenlp eval out/ft-sst2 --task sst2 --runtime eager
    """
    from edgenlp.run.evaluate import evaluate

    report = evaluate(bundle, runtime=runtime, task=task, split=split, data=data, data_dir=data_dir, threads=threads, limit=limit)
    if as_json:
        click.echo(json.dumps(report, indent=2))
        return
    extra = f"  macro-F1 {report['macro_f1']:.4f}" if "macro_f1" in report else ""
    click.echo(f"{report['runtime']}: accuracy {report['accuracy']:.4f}{extra} on {report['n']} rows "
               f"({report['ms_per_text']:.2f} ms/text)")
