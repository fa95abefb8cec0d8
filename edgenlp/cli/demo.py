"""``edgenlp demo``: a tour of the runtimes (fine-tune, export, evaluate everywhere; no compression)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import click

log = logging.getLogger(__name__)


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
    from edgenlp.compress.demo import run_demo

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
