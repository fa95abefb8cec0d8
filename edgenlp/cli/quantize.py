"""``edgenlp quantize`` (and the quantization options shared with ``edgenlp export``)."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import click

from edgenlp.bundle import FORMATS
from edgenlp.cli.options import (Spelling, build_config, config_options, given, init_seed_option, out_option,
                                 task_options)
from edgenlp.cli.types import ChoiceList
from edgenlp.export.api import ExportConfig
from edgenlp.quantize.config import QuantizeConfig

log = logging.getLogger(__name__)


# `edgenlp quantize` spells ExportConfig's fields as `edgenlp export` does.
EXPORT_SPELLINGS = {
    "formats": Spelling(name="format", type=ChoiceList(FORMATS, all_name="both")),
    "max_seq_len": Spelling(name="seq-len"),
}


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
    from edgenlp.dynamic.calibrate import drop_text

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
    exits = next((s["result"].get("exits") for s in man["applied"] if s["step"] == "quantize"), None)
    if exits and "kept" in exits:
        click.echo(f"  exits: threshold {exits['threshold']:.4g} kept ({exits['kept']})")
    elif exits:
        click.echo(f"  exits: threshold {exits['threshold_before']:.4g} -> {exits['threshold']:.4g}, calibrated again on "
                   f"the quantized model: validation drop {drop_text(exits)} points at "
                   f"{exits['cost']:.2f}x the static "
                   f"FLOPs ({exits['val_rows']} training rows)")
    guard = res.report.get("guard", {})
    if guard.get("final_drop") is not None:
        click.echo(f"  guard: dev accuracy drop {guard['final_drop']:.2f} points (limit {guard['max_drop']}) "
                   f"after {len(guard['attempts'])} build(s)")
    for rt, p in man["parity"].items():
        fp = p.get("fp32", {})
        bound = p.get("bound", {})
        click.echo(f"  parity {rt:<10} vs quantized reference {p['max_abs_diff']:.2e} (tol {p['tolerance']:.2g}, "
                   f"{bound.get('applied', 'policy')} bound"
                   + (f"; RMS {p['rms_diff']:.2e} <= {bound['rms_limit']:.2g}" if "rms_limit" in bound else "") + "); "
                   f"vs fp32 {fp.get('max_abs_diff', float('nan')):.2e}, argmax agreement {fp.get('argmax_agreement', float('nan')):.3f}")
    return res


def bits_summary(linears: dict) -> str:
    from collections import Counter

    c = Counter(linears.values())
    return "linears: " + ", ".join(f"{c[b]} {'fp32' if b == 32 else f'int{b}'}" for b in sorted(c, reverse=True))


@click.command("quantize")
@click.argument("model")
@config_options(QuantizeConfig, exclude=("layer_bits",))
@task_options()
@config_options(ExportConfig, group="export", spellings=EXPORT_SPELLINGS, exclude=("parity_tolerance", "parity_samples"))
@click.option("--guard-limit", type=int, default=None, help="Evaluate the guard on the first N dev sentences (default: all).")
@init_seed_option
@out_option("Bundle directory to write.")
@click.pass_context
def quantize_cmd(ctx, model, task, data_dir, guard_limit, seed, out_dir, **_):
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
    qcfg = build_config(QuantizeConfig, given(ctx))
    ecfg = build_config(ExportConfig, given(ctx, "export"))
    run_quantize(model, task=task, data_dir=data_dir, qcfg=qcfg, export_config=ecfg, seed=seed, out_dir=out_dir,
                 guard_limit=guard_limit)
