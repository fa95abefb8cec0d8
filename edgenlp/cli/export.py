"""``edgenlp export`` and ``edgenlp inspect``."""

from __future__ import annotations

import json
import logging
import time

import click

from edgenlp.cli.types import IntList

log = logging.getLogger(__name__)


def _quant_options(f):
    from edgenlp.cli.quantize import quant_options

    return quant_options(prefix="quant-")(f)


@click.command("export")
@click.argument("model")
@_quant_options
@click.option("--task", default=None, help="Built-in task (sst2, banking77) or a folder with train.tsv/dev.tsv; sets the labels and parity sentences.")
@click.option("--data-dir", type=click.Path(file_okay=False), default=None, help="Folder holding the built-in task folders.")
@click.option("--format", "fmt", type=click.Choice(["pte", "onnx", "both"]), default="both", show_default=True)
@click.option("--seq-len", type=int, default=128, show_default=True, help="Maximum sequence length the bundle accepts.")
@click.option("--buckets", type=IntList(), default=None, help="ExecuTorch sequence buckets, e.g. 16,32,64,128 (default: powers of two up to --seq-len).")
@click.option("--tolerance", type=float, default=None,
              help="Max |logit diff| vs the parity reference; export fails above it (default: the model's parity policy, 1e-4 for fp32).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed for weights a checkpoint lacks (e.g. a new classifier head).")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), required=True, help="Bundle directory to write.")
def export_cmd(model, task, data_dir, fmt, seq_len, buckets, tolerance, seed, out_dir, scheme, embeddings, group_size,
               trim_vocab, size_mb, max_drop):
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
    from edgenlp.export.api import ExportConfig, export_bundle
    from edgenlp.errors import EdgeNLPError
    from edgenlp.models.registry import load_model

    try:
        config = ExportConfig(
            formats=("pte", "onnx") if fmt == "both" else (fmt,),
            max_seq_len=seq_len,
            buckets=buckets,
            parity_tolerance=tolerance,
        )
    except ValueError as exc:
        raise EdgeNLPError(str(exc)) from None
    if scheme is None and (embeddings or trim_vocab or size_mb is not None or max_drop is not None):
        raise EdgeNLPError("--quant-embeddings, --trim-vocab, --size-mb and --max-drop need --quant int8|int4|mixed")
    if scheme is not None:
        from edgenlp.cli.quantize import build_config, run_quantize

        if not task:
            raise EdgeNLPError("--quant needs --task (calibration, vocabulary trimming and the accuracy guard use it)")
        qcfg = build_config(scheme=scheme, embeddings=embeddings, group_size=group_size, trim_vocab=trim_vocab,
                            size_mb=size_mb, max_drop=max_drop)
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
@click.option("--json", "as_json", is_flag=True, help="Print the whole manifest as JSON.")
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
