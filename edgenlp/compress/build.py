"""Build a planned candidate's bundle: quantize (as the plan says) and lower to .pte and .onnx."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Mapping

log = logging.getLogger(__name__)


def quantize_config(candidate: Mapping[str, Any]):
    """The ``QuantizeConfig`` of a candidate, or ``None`` when it stays fp32 everywhere."""
    bits = candidate.get("bits", "fp32")
    emb = candidate.get("embeddings")
    trim = bool(candidate.get("trim_vocab", False))
    if bits == "fp32" and emb is None and not trim:
        return None
    from edgenlp.quantize import QuantizeConfig

    kwargs: dict[str, Any] = {"embeddings": emb, "trim_vocab": trim}
    if isinstance(bits, (list, tuple)):  # per-layer bits from a mixed-precision plan
        kwargs.update(scheme="mixed", layer_bits=tuple((str(n), str(b)) for n, b in bits))
    elif bits == "fp32":
        kwargs.update(scheme="none")
    else:
        kwargs.update(scheme=bits)
    return QuantizeConfig(**kwargs)


def build_bundle(model, info, out: Path, *, candidate: Mapping[str, Any], task, max_seq_len: int,
                 annotations: Mapping[str, Any] | None = None):
    """Quantize ``model`` as ``candidate`` says and export a verified bundle (both formats) to ``out``."""
    from edgenlp.export.api import ExportConfig, export_bundle
    from edgenlp.recipe import Step

    qcfg = quantize_config(candidate)
    config = ExportConfig(max_seq_len=max_seq_len)
    if qcfg is None:
        return export_bundle(model, info, out, config=config, task=task, annotations=annotations)
    from edgenlp.quantize import quantize_for_export

    qmodel, qinfo = quantize_for_export(model, info, qcfg, task=task)
    return export_bundle(qmodel, qinfo, out, config=config, task=task, recipe=(), annotations=annotations)


