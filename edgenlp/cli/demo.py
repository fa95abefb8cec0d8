"""``edgenlp demo``: a tour of the runtimes (fine-tune, export, evaluate everywhere; no compression)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import click

from edgenlp.cli.options import TASK_HELP, data_dir_option, device_option, quiet_option, signature_option, threads_option
from edgenlp.compress.demo import run_demo

log = logging.getLogger(__name__)


@click.command("demo")
@signature_option(run_demo, "model", "--model", help="Registered model name or model directory.")
@signature_option(run_demo, "task", "--task", help=TASK_HELP)
@signature_option(run_demo, "out", "--out", "out_dir", type=click.Path(file_okay=False), help="Output folder.")
@signature_option(run_demo, "steps", "--steps", type=int, help="Fine-tuning steps.")
@signature_option(run_demo, "train_limit", "--train-limit", type=int, help="Seeded subset of the training set.")
@signature_option(run_demo, "seed", "--seed", type=int, help="Seed of fine-tuning.")
@threads_option("torch intra-op threads (default: torch's choice).")
@data_dir_option
@device_option()
@quiet_option
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
