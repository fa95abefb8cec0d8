"""``edgenlp export`` and ``edgenlp inspect``."""

from __future__ import annotations

import json
import logging
import time

import click

from edgenlp.cli.options import (Spelling, build_config, config_options, flags_of, given, init_seed_option, json_options,
                                 out_option, task_options)
from edgenlp.cli.quantize import EXPORT_SPELLINGS as QUANTIZE_EXPORT_SPELLINGS
from edgenlp.export.api import ExportConfig
from edgenlp.quantize.config import QuantizeConfig

log = logging.getLogger(__name__)


# `edgenlp export --quant ...` quantizes first, with QuantizeConfig's fields spelled as below.
QUANT_SPELLINGS = {
    "scheme": Spelling(name="quant", default=None, help="Quantize the linears first: int8 / int4 (groupwise) with int8 "
                                                        "dynamic activations, or mixed per layer (default: an fp32 bundle)."),
    "embeddings": Spelling(name="quant-embeddings"),
    "group_size": Spelling(name="quant-group-size"),
}
EXPORT_SPELLINGS = {**QUANTIZE_EXPORT_SPELLINGS, "parity_tolerance": Spelling(name="tolerance")}


@click.command("export")
@click.argument("model")
@config_options(QuantizeConfig, group="quant", spellings=QUANT_SPELLINGS, exclude=("layer_bits",))
@task_options(required=False, help="Built-in task or a folder with train.tsv/dev.tsv; sets the labels and parity "
                                   "sentences.")
@config_options(ExportConfig, spellings=EXPORT_SPELLINGS)
@init_seed_option
@out_option("Bundle directory to write.")
@click.pass_context
def export_cmd(ctx, model, task, data_dir, seed, out_dir, **_):
    """Lower MODEL to an ExecuTorch and/or ONNX bundle, with parity checked against eager PyTorch.

    MODEL is a name from `edgenlp models` or a Hugging Face model directory
    (e.g. `edgenlp finetune` output). The bundle is written to a temporary
    directory and renamed into place only when parity passes.

    \b
    Examples:
      edgenlp export minilm-l6 --task sst2 --format both --out out/minilm-sst2
      edgenlp export out/ft-sst2 --task sst2 --format pte --seq-len 64 --out out/b64
      edgenlp export bert-mini --format onnx --out out/bert-mini
      edgenlp export out/ft-sst2 --task sst2 --quant int8 --quant-embeddings int8 --out out/q8
    """
    from edgenlp.data.tasks import load_task
    from edgenlp.export.api import export_bundle
    from edgenlp.errors import EdgeNLPError
    from edgenlp.models.registry import load_model

    config = build_config(ExportConfig, given(ctx))
    quant = given(ctx, "quant")
    if quant and "scheme" not in quant:
        raise EdgeNLPError(f"{', '.join(flags_of(ctx, quant, 'quant'))} need --quant int8|int4|mixed")
    if quant:
        from edgenlp.cli.quantize import run_quantize

        if not task:
            raise EdgeNLPError("--quant needs --task (calibration, vocabulary trimming and the accuracy guard use it)")
        qcfg = build_config(QuantizeConfig, quant)
        run_quantize(model, task=task, data_dir=data_dir, qcfg=qcfg, export_config=config, seed=seed, out_dir=out_dir)
        return
    data = load_task(task, data_dir=data_dir) if task else None
    m, info = load_model(model, labels=data.labels if data else None, seed=seed)
    if data is not None and not any(s.type == "finetune" for s in info.recipe):
        log.warning("%s has no fine-tuning recorded: its classification head for %s is untrained", model, data.name)
    t0 = time.perf_counter()
    bundle = export_bundle(m, info, out_dir, config=config, task=data)
    man = bundle.manifest
    click.echo(f"wrote {bundle.path} in {time.perf_counter() - t0:.1f}s")
    for name, size in man["sizes"].items():
        click.echo(f"  {name:<12} {size / 1e6:9.2f} MB")
    if "pte" in man["artifacts"]:
        pte = man["artifacts"]["pte"]
        outside = sorted({op for m_ in pte["methods"] for op in m_["non_delegated_ops"]})
        click.echo(f"  ExecuTorch: {len(pte['methods'])} bucket method(s) {[m_['seq_len'] for m_ in pte['methods']]}, "
                   f"{pte['delegate_calls_per_method']} XNNPACK delegate call(s) per method; outside XNNPACK: {', '.join(outside) or 'none'}")
    for rt, p in man["parity"].items():
        click.echo(f"  parity {rt:<10} max|diff| {p['max_abs_diff']:.2e} (tol {p['tolerance']:.0e}) on {p['samples']} sentences")


@click.command("inspect")
@click.argument("bundle", type=click.Path())
@json_options(file=False, help="Print the whole manifest as JSON.")
def inspect_cmd(bundle, as_json):
    """Verify BUNDLE (files and sha256) and summarize its manifest.

    \b
    Examples:
      edgenlp inspect out/minilm-sst2
      edgenlp inspect out/minilm-sst2 --json
    """
    from edgenlp.bundle import Bundle

    b = Bundle.open(bundle)
    m = b.manifest
    if as_json:
        click.echo(json.dumps(m, indent=2))
        return
    shape = m["model"].get("shape", {})
    click.echo(f"{b.path}: verified ({len(m['files'])} files)")
    click.echo(f"  model    {m['model']['name']} ({shape.get('family')}, {shape.get('num_layers')} layers, hidden {shape.get('hidden')})")
    click.echo(f"  labels   {len(b.labels)}: {', '.join(b.labels[:8])}{' …' if len(b.labels) > 8 else ''}")
    click.echo(f"  max_seq  {b.max_seq_len}; formats: {', '.join(b.formats)}")
    click.echo(f"  applied  {' -> '.join(step.get('step', '?') for step in m.get('applied', []))}")
    q = m.get("quantization")
    if q:
        from edgenlp.cli.quantize import bits_summary

        click.echo(f"  quant    {q['scheme']}: {bits_summary(q['linears'])}; int4 group {q['group_size']}; "
                   f"embeddings {q.get('embeddings') or 'fp32'}" + (f"; vocabulary trimmed to {q['kept_tokens']} tokens" if q.get("kept_tokens") else ""))
        rows: dict[str, list[str]] = {}
        for name, bits in q["linears"].items():
            block, _, part = name.rpartition(".")
            rows.setdefault(block or "head", []).append(f"{part}={'fp32' if bits == 32 else f'int{bits}'}")
        for block, parts in rows.items():
            click.echo(f"    {block:<10} {' '.join(parts)}")
        for f in q.get("fallbacks", []):
            click.echo(f"    fallback: {f}")
