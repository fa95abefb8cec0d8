"""``quantize_model``: a model transform, model -> quantized model (torchao style).

>>> qmodel, qinfo = quantize_model(model, info, QuantizeConfig(scheme="int8", embeddings="int8"))  # doctest: +SKIP
>>> qmodel.quantization.bits["layers.0.query"]                                                     # doctest: +SKIP
8

The result is a copy of the model whose linears (and word embeddings, when
asked) hold torchao quantized tensors: it runs eagerly as the exact reference
of the lowered kernels (dynamic per-token int8 activations, per-channel int8
or group-wise int4 weights), and ``torch.export`` lowers it to XNNPACK's
quantized kernels. With ``trim_vocab`` the word table first keeps only the
tokens of the task's training data.

What was done travels with the model as ``model.quantization``
(:class:`Quantization`: resolved per-layer bits, fallbacks, kept token ids,
the fp32 source) and in ``info.recipe`` as a ``quantize`` step. This package
knows nothing of lowering: :func:`edgenlp.export.api.export_bundle` lowers
whatever model it is given and reads ``model.quantization`` for what the
bundle must record; the accuracy guard, which lowers and evaluates, is
:func:`edgenlp.compress.guard.quantize_bundle`.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import dataclass
from typing import Any

from edgenlp.errors import EdgeNLPError
from edgenlp.quantize.config import QuantizeConfig

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Quantization:
    """What :func:`quantize_model` did, attached to the quantized model as ``model.quantization``."""

    config: QuantizeConfig  # every linear listed in layer_bits
    bits: dict[str, int]
    fallbacks: tuple[str, ...]
    remap: Any  # edgenlp.models.vocab.IdRemap of a trimmed vocabulary, else None
    weight_bytes: int
    source: Any = dataclasses.field(repr=False)  # the fp32 model (trimmed when asked): ONNX lowering and fp32 parity
    seconds: float = 0.0  # wall time of quantize_model (trimming, bits, quantized tensors), for the export's stage timings


def trimmed(model, config: QuantizeConfig, *, tokenizer=None, task=None):
    """``(model, IdRemap | None)``: ``model`` with its word table trimmed to ``task``'s tokens when ``config.trim_vocab``."""
    if not config.trim_vocab:
        return model, None
    from edgenlp.models.vocab import IdRemap, kept_token_ids
    from edgenlp.quantize.vocab import trim_model

    if task is None or tokenizer is None:
        raise EdgeNLPError("--trim-vocab needs --task: the training data decides which tokens are kept")
    if model.shape.vocab_size != len(tokenizer):
        raise EdgeNLPError(f"cannot trim: the model has {model.shape.vocab_size} token rows, its vocabulary {len(tokenizer)}")
    kept = kept_token_ids(tokenizer, task.train.texts)
    log.info("vocabulary trimmed to the %d tokens of %s's training data (+ specials)", len(kept), task.name)
    return trim_model(model, kept), IdRemap(kept, source_vocab_size=len(tokenizer), unk_old_id=tokenizer.unk_token_id)


def quantize_model(model, info, config: QuantizeConfig, *, task=None, tokenizer=None):
    """``(quantized model, info)``: ``model`` quantized as ``config`` says, ``info.recipe`` extended.

    ``task`` (training texts) and ``tokenizer`` are needed for ``trim_vocab``;
    ``tokenizer`` defaults to the one ``info`` names. ``model`` is not changed.
    Raises :class:`EdgeNLPError` for ``layer_bits`` naming a linear the model
    lacks and for trimming without a task.
    """
    from edgenlp.quantize.schemes import fake_quantize, resolve_bits, weight_bytes
    from edgenlp.recipe import Step

    start = time.perf_counter()
    if config.trim_vocab and tokenizer is None:
        from edgenlp.models.tokenizer import build_tokenizer

        tokenizer = build_tokenizer(info.vocab_file, info.tokenizer)
    source, remap = trimmed(model.eval(), config, tokenizer=tokenizer, task=task)
    try:
        bits, fallbacks = resolve_bits(source, config)
    except ValueError as exc:
        raise EdgeNLPError(str(exc)) from None
    for f in fallbacks:
        log.warning("quantization fallback: %s", f)
    resolved = dataclasses.replace(config, layer_bits=tuple(bits.items()))
    nbytes = weight_bytes(source, bits, group_size=config.group_size, embeddings=config.embeddings)
    result: dict = {"fallbacks": list(fallbacks), "predicted_weight_bytes": nbytes}
    if remap is not None:
        result["kept_tokens"] = len(remap)
    quantized = fake_quantize(source, resolved)
    quantized.quantization = Quantization(resolved, dict(bits), tuple(fallbacks), remap, nbytes, source,
                                          seconds=time.perf_counter() - start)
    new_info = dataclasses.replace(info, shape=quantized.shape, recipe=(*info.recipe, Step("quantize", resolved, result)))
    return quantized, new_info


def quantization_of(model) -> Quantization | None:
    """The :class:`Quantization` a model carries, or None for a model :func:`quantize_model` did not make."""
    return getattr(model, "quantization", None)
