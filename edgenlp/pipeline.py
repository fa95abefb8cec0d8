"""The main job on the built-in default: fine-tune, export, evaluate through every runtime.

``edgenlp demo`` (the README's first command) fine-tunes ``minilm-l6`` on
SST-2 for a bounded number of steps, exports a bundle to ExecuTorch and ONNX,
evaluates it on the full dev set through ExecuTorch, ONNX Runtime, eager
PyTorch (and the native runtime when it is built), and writes ``summary.json``.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import click

log = logging.getLogger(__name__)


def run_demo(
    *,
    model: str = "minilm-l6",
    task: str = "sst2",
    out: str | Path = "out/demo",
    steps: int = 250,
    train_limit: int = 8000,
    max_seq_len: int = 64,
    seed: int = 0,
    threads: int | None = None,
    data_dir: str | None = None,
    device: str = "auto",
    progress: bool = True,
) -> dict:
    from edgenlp.data.tasks import load_task
    from edgenlp.export.api import ExportConfig, export_bundle
    from edgenlp.finetune import FinetuneConfig, finetune
    from edgenlp.models.registry import load_model
    from edgenlp.run.base import get_runner
    from edgenlp.run.evaluate import evaluate_split
    from edgenlp.run.eager import EagerRunner
    from edgenlp.utils import atomic_write_json, environment

    from edgenlp.errors import EdgeNLPError

    out = Path(out)
    timings: dict[str, float] = {}
    try:  # every option checked before any work
        # The library's defaults (body 5e-5, head 2e-3, best-dev weights kept), one bounded pass.
        config = FinetuneConfig(method="full", epochs=1, max_steps=steps, train_limit=train_limit, batch_size=32,
                                seed=seed, max_seq_len=max_seq_len, threads=threads)
        export_config = ExportConfig(max_seq_len=128)
    except ValueError as exc:
        raise EdgeNLPError(f"invalid option: {exc}") from None
    data = load_task(task, data_dir=data_dir)
    m, info = load_model(model, labels=data.labels, seed=seed)

    t0 = time.perf_counter()
    result = finetune(m, info, data, config, device=device, show_progress=progress)
    model_dir = result.save(out / "model", info)
    timings["finetune_s"] = time.perf_counter() - t0
    ft_model, ft_info = load_model(model_dir, labels=data.labels)

    t0 = time.perf_counter()
    bundle = export_bundle(ft_model, ft_info, out / "bundle", task=data, config=export_config)
    timings["export_s"] = time.perf_counter() - t0

    results = {}
    runners = [("eager", lambda: EagerRunner(ft_model, info=ft_info, threads=threads, max_seq_len=128)),
               ("executorch", lambda: get_runner(bundle.path, runtime="executorch", threads=threads)),
               ("onnx", lambda: get_runner(bundle.path, runtime="onnx", threads=threads))]
    if native_available():
        runners.append(("native", lambda: get_runner(bundle.path, runtime="native", threads=threads)))
    for name, make in runners:
        with make() as runner:
            results[name] = evaluate_split(runner, data.dev)
        log.info("%s: accuracy %.4f", name, results[name]["accuracy"])
    summary = {
        "model": model,
        "task": data.name,
        "finetune": {k: result.report.get(k) for k in ("method", "steps", "lr", "trainable_params", "dev", "examples_per_s", "device")
                     if k in result.report},
        "bundle": str(bundle.path),
        "sizes_mb": {k: round(v / 1e6, 2) for k, v in bundle.manifest["sizes"].items()},
        "parity": bundle.manifest["parity"],
        "eval": results,
        "timings_s": {k: round(v, 1) for k, v in timings.items()},
        "environment": environment(),
    }
    atomic_write_json(out / "summary.json", summary)
    return summary


def native_available() -> bool:
    try:
        from edgenlp.run.native import library_path

        return library_path().is_file()
    except Exception:  # no native build: the demo runs the Python runtimes only
        return False


@click.command("demo")
@click.option("--model", default="minilm-l6", show_default=True)
@click.option("--task", default="sst2", show_default=True)
@click.option("--out", "out_dir", default="out/demo", show_default=True, type=click.Path(file_okay=False))
@click.option("--steps", type=int, default=250, show_default=True, help="Fine-tuning steps (batch 32).")
@click.option("--train-limit", type=int, default=8000, show_default=True, help="Seeded subset of the training set.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--threads", type=int, default=None)
@click.option("--data-dir", type=click.Path(file_okay=False), default=None)
@click.option("--device", default="auto", show_default=True, help="Fine-tuning device: auto | cpu | cuda (export and evaluation use the CPU).")
@click.option("--quiet", is_flag=True, help="No progress bar.")
def demo_cmd(model, task, out_dir, steps, train_limit, seed, threads, data_dir, device, quiet):
    """Fine-tune MODEL on TASK, export to ExecuTorch + ONNX, evaluate through every runtime.

    \b
    Examples:
      edgenlp demo                       # MiniLM + SST-2, a few minutes on 2 cores
      edgenlp demo --task banking77 --steps 800 --out out/demo-b77
    """
    s = run_demo(model=model, task=task, out=out_dir, steps=steps, train_limit=train_limit, seed=seed,
                 threads=threads, data_dir=data_dir, device=device, progress=not quiet)
    ft = s["finetune"]
    click.echo(f"\n{s['model']} fine-tuned on {s['task']} ({ft['steps']} steps, lr {ft.get('lr')}, "
               f"dev accuracy {ft['dev']['accuracy']:.4f}) -> {s['bundle']}")
    click.echo(f"  fine-tune {s['timings_s']['finetune_s']:.0f}s, export {s['timings_s']['export_s']:.0f}s; "
               f"sizes: " + ", ".join(f"{k} {v} MB" for k, v in s["sizes_mb"].items() if k.startswith("model")))
    click.echo(f"  {'runtime':<11} {'accuracy':>8} {'macro-F1':>8} {'ms/text':>8}")
    for name, r in s["eval"].items():
        f1 = f"{r['macro_f1']:.4f}" if "macro_f1" in r else "-"
        click.echo(f"  {name:<11} {r['accuracy']:>8.4f} {f1:>8} {r['ms_per_text']:>8.2f}")
    click.echo(f"  summary: {Path(out_dir) / 'summary.json'}")
    log.debug(json.dumps(s))
