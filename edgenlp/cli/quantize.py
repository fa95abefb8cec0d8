"""``edgenlp quantize`` (and the quantization options shared with ``edgenlp export``)."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import click

from edgenlp.cli.types import IntList

log = logging.getLogger(__name__)


def quant_options(*, prefix: str = ""):
    """The quantization options, spelled ``--scheme`` on ``quantize`` and ``--quant`` on ``export``."""
    scheme_flag = "--quant" if prefix else "--scheme"

    def deco(f):
        opts = [
            click.option(scheme_flag, "scheme", type=click.Choice(["int8", "int4", "mixed"]), default=None if prefix else "int8",
                         show_default=not prefix, help="int8 / int4 (groupwise) linears with int8 dynamic activations, or mixed per layer."),
            click.option(f"--{prefix}embeddings", "embeddings", type=click.Choice(["int8", "int4"]), default=None,
                         help="Quantize the word-embedding table per row (default: fp32)."),
            click.option(f"--{prefix}group-size", "group_size", type=int, default=32, show_default=True, help="int4 group size (in-features per scale)."),
            click.option("--trim-vocab", is_flag=True, help="Keep only the tokens of the task's training data (+ specials); others read as [UNK]."),
            click.option("--size-mb", type=float, default=None, help="Weight budget in MB (mixed: bits per layer chosen to meet it)."),
            click.option("--max-drop", type=float, default=None, help="Accuracy guard: max dev-accuracy drop vs fp32 in points (e.g. 1.0)."),
        ]
        for o in reversed(opts):
            f = o(f)
        return f

    return deco


def build_config(*, scheme, embeddings, group_size, trim_vocab, size_mb, max_drop):
    from edgenlp.errors import EdgeNLPError
    from edgenlp.quantize.config import QuantizeConfig

    try:
        return QuantizeConfig(scheme=scheme, embeddings=embeddings, group_size=group_size, trim_vocab=trim_vocab,
                              size_mb=size_mb, max_drop=max_drop)
    except ValueError as exc:
        raise EdgeNLPError(str(exc)) from None


def resolve_model_arg(model: str) -> str:
    """A bundle directory stands for the model it was exported from (``manifest.model.source``)."""
    from edgenlp.bundle import MANIFEST, Bundle
    from edgenlp.errors import EdgeNLPError

    p = Path(model)
    if not (p / MANIFEST).is_file():
        return model
    b = Bundle.open(p)
    if "quantization" in b.manifest:
        raise EdgeNLPError(f"{p} is already quantized; quantize the fp32 model or bundle it came from")
    source = (b.manifest.get("model") or {}).get("source")
    if not source or not Path(source).exists():
        name = (b.manifest.get("model") or {}).get("name")
        if name and not source:
            return name
        raise EdgeNLPError(f"{p}: its fp32 model ({source!r}) is not available; give the model directory instead")
    return source


def run_quantize(model, *, task, data_dir, qcfg, export_config, seed, out_dir, guard_limit=None):
    from edgenlp.data.tasks import load_task
    from edgenlp.models.registry import load_model
    from edgenlp.compress.guard import quantize_bundle

    data = load_task(task, data_dir=data_dir)
    m, info = load_model(resolve_model_arg(model), labels=data.labels, seed=seed)
    t0 = time.perf_counter()
    res = quantize_bundle(m, info, out_dir, qcfg, task=data, export_config=export_config, guard_limit=guard_limit)
    man = res.bundle.manifest
    click.echo(f"wrote {res.bundle.path} in {time.perf_counter() - t0:.1f}s")
    for name, size in man["sizes"].items():
        click.echo(f"  {name:<15} {size / 1e6:9.2f} MB")
    click.echo("  " + bits_summary(man["quantization"]["linears"]) + (f"; embeddings {qcfg.embeddings}" if qcfg.embeddings else ""))
    for f in man["quantization"]["fallbacks"]:
        click.echo(f"  fallback: {f}")
    guard = res.report.get("guard", {})
    if guard.get("final_drop") is not None:
        click.echo(f"  guard: dev accuracy drop {guard['final_drop']:.2f} points (limit {guard['max_drop']}) "
                   f"after {len(guard['attempts'])} build(s)")
    for rt, p in man["parity"].items():
        fp = p.get("fp32", {})
        click.echo(f"  parity {rt:<10} vs quantized reference {p['max_abs_diff']:.2e} (tol {p['tolerance']:.0e}); "
                   f"vs fp32 {fp.get('max_abs_diff', float('nan')):.2e}, argmax agreement {fp.get('argmax_agreement', float('nan')):.3f}")
    return res


def bits_summary(linears: dict) -> str:
    from collections import Counter

    c = Counter(linears.values())
    return "linears: " + ", ".join(f"{c[b]} {'fp32' if b == 32 else f'int{b}'}" for b in sorted(c, reverse=True))


@click.command("quantize")
@click.argument("model")
@quant_options()
@click.option("--task", required=True, help="Built-in task (sst2, banking77) or a folder with train.tsv/dev.tsv.")
@click.option("--data-dir", type=click.Path(file_okay=False), default=None, help="Folder holding the built-in task folders.")
@click.option("--format", "fmt", type=click.Choice(["pte", "onnx", "both"]), default="both", show_default=True)
@click.option("--seq-len", type=int, default=128, show_default=True, help="Maximum sequence length the bundle accepts.")
@click.option("--buckets", type=IntList(), default=None, help="ExecuTorch sequence buckets, e.g. 32,64,128.")
@click.option("--guard-limit", type=int, default=None, help="Evaluate the guard on the first N dev sentences (default: all).")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--out", "out_dir", type=click.Path(file_okay=False), required=True, help="Bundle directory to write.")
def quantize_cmd(model, scheme, embeddings, group_size, trim_vocab, size_mb, max_drop, task, data_dir, fmt, seq_len, buckets,
                 guard_limit, seed, out_dir):
    """Quantize MODEL_OR_BUNDLE into a verified low-bit bundle (ExecuTorch/XNNPACK and ONNX Runtime).

    MODEL is a model name, a model directory (e.g. `edgenlp finetune` output) or
    an fp32 bundle (its source model is used). The bundle records the bits of
    every linear in its manifest and writes quantize.json (sensitivity, guard).

    \b
    Examples:
      edgenlp quantize out/ft-sst2 --scheme int8 --task sst2 --out out/q8
      edgenlp quantize out/ft-sst2 --scheme int4 --embeddings int4 --trim-vocab --task sst2 --out out/q4
      edgenlp quantize out/ft-sst2 --scheme mixed --size-mb 20 --max-drop 1.0 --task sst2 --out out/qmix
    """
    from edgenlp.errors import EdgeNLPError
    from edgenlp.export.api import ExportConfig

    qcfg = build_config(scheme=scheme, embeddings=embeddings, group_size=group_size, trim_vocab=trim_vocab, size_mb=size_mb,
                        max_drop=max_drop)
    try:
        ecfg = ExportConfig(formats=("pte", "onnx") if fmt == "both" else (fmt,), max_seq_len=seq_len,
                            buckets=buckets)
    except ValueError as exc:
        raise EdgeNLPError(str(exc)) from None
    run_quantize(model, task=task, data_dir=data_dir, qcfg=qcfg, export_config=ecfg, seed=seed, out_dir=out_dir,
                 guard_limit=guard_limit)
