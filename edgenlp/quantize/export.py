"""What export does with a ``quantize`` step: trim the vocabulary, resolve per-layer bits, quantize on lowering."""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass

from edgenlp.errors import EdgeNLPError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class QuantizedExport:
    """A resolved quantize step as export applies it."""

    config: object  # QuantizeConfig with every linear in layer_bits
    bits: dict
    fallbacks: tuple[str, ...]
    id_map: object | None  # edgenlp.quantize.vocab.IdMap when the vocabulary was trimmed
    weight_bytes: int

    def transform(self, model):
        """Quantize a prepared export copy in place (the lowering's ``transform``)."""
        from edgenlp.quantize.schemes import fake_quantize

        return fake_quantize(model, self.config, inplace=True)

    def manifest_entry(self) -> dict:
        """The manifest's ``quantization`` key: what the runtimes need without parsing the recipe."""
        c = self.config
        return {
            "scheme": c.scheme,
            "linears": dict(self.bits),
            "group_size": c.group_size,
            "activations": "int8 dynamic per token (asymmetric)",
            "weights": {"8": "int8 symmetric per output channel", "4": f"int4 symmetric per group of {c.group_size}"},
            "embeddings": c.embeddings,
            "vocab_map": "vocab_map.json" if self.id_map is not None else None,
            "kept_tokens": len(self.id_map) if self.id_map is not None else None,
            "fallbacks": list(self.fallbacks),
            "predicted_weight_bytes": self.weight_bytes,
        }


def plan_quantized_export(model, step, *, tokenizer, task):
    """``(model, resolved step, QuantizedExport)`` for a ``quantize`` recipe step."""
    from edgenlp.quantize.schemes import resolve_bits, weight_bytes
    from edgenlp.quantize.vocab import IdMap, kept_token_ids, trim_model
    from edgenlp.recipe import Step

    cfg = step.config
    id_map = None
    if cfg.trim_vocab:
        if task is None:
            raise EdgeNLPError("--trim-vocab needs --task: the training data decides which tokens are kept")
        if model.shape.vocab_size != len(tokenizer):
            raise EdgeNLPError(f"cannot trim: the model has {model.shape.vocab_size} token rows, its vocabulary {len(tokenizer)}")
        kept = kept_token_ids(tokenizer, task.train.texts)
        id_map = IdMap(kept, source_vocab_size=len(tokenizer), unk_old_id=tokenizer.unk_token_id)
        model = trim_model(model, kept)
        log.info("vocabulary trimmed to the %d tokens of %s's training data (+ specials)", len(kept), task.name)
    try:
        bits, fallbacks = resolve_bits(model, cfg)
    except ValueError as exc:
        raise EdgeNLPError(str(exc)) from None
    for f in fallbacks:
        log.warning("int4 fallback: %s", f)
    resolved = dataclasses.replace(cfg, layer_bits=tuple(bits.items()))
    nbytes = weight_bytes(model, bits, group_size=cfg.group_size, embeddings=cfg.embeddings)
    result = {**step.result, "fallbacks": fallbacks, "predicted_weight_bytes": nbytes}
    if id_map is not None:
        result["kept_tokens"] = len(id_map)
    quant = QuantizedExport(resolved, bits, tuple(fallbacks), id_map, nbytes)
    return model, Step("quantize", resolved, result), quant
