"""Which linears exist, how many bits each gets, and the fake-quantized eager model.

The schemes use torchao's quantized tensor subclasses, which both run eagerly
(the reference the lowered program is checked against) and lower to XNNPACK:

- int8 linear: ``Int8DynamicActivationIntxWeightConfig(int8, PerAxis(0))``:
  dynamic per-token asymmetric int8 activations x per-channel symmetric int8
  weights (XNNPACK ``Fully Connected (NC, QD8, F32, QC8W)``);
- int4 linear: the same with ``int4`` weights in groups of ``group_size``
  input features (XNNPACK blockwise ``QB4W``); a layer whose in-features the
  group does not divide falls back to int8 and the fallback is recorded; a
  linear with a single input feature (pruned to one FFN neuron) stays fp32;
- word embeddings: ``IntxWeightOnlyConfig`` per row (one scale per token),
  which ExecuTorch's quant-fusion pass turns into
  ``quantized_decomposed::embedding_byte`` / ``embedding_4bit``.

Linear names come from the family tables (:data:`LAYER_LINEARS`, the head keys).
"""

from __future__ import annotations

import copy
import logging

import torch
from torch import nn

from edgenlp.models import arithmetic
from edgenlp.models.families import LAYER_LINEARS

log = logging.getLogger(__name__)

WORD_EMBEDDING = "embeddings.word"
# torchao's per-channel weight quantization fails on a linear with one input feature (its scale reshape); structured
# pruning can leave one FFN neuron in a layer (ffn_out: [hidden, 1])
MIN_QUANT_IN_FEATURES = 2


def linear_names(model) -> tuple[str, ...]:
    """Module names of every non-empty linear: encoder layers in :data:`LAYER_LINEARS` order, then the head."""
    names = [f"layers.{i}.{part}" for i in range(model.shape.num_layers) for part in LAYER_LINEARS]
    names += list(model.family.head)
    modules = dict(model.named_modules())
    return tuple(n for n in names if isinstance(modules.get(n), nn.Linear) and modules[n].weight.numel() > 0)


def resolve_bits(model, config) -> tuple[dict[str, int], list[str]]:
    """Bits per linear for ``config`` on ``model`` and the group-size fallbacks (one sentence each).

    Raises ``ValueError`` when ``config.layer_bits`` names a linear the model does not have.
    """
    names = linear_names(model)
    unknown = sorted(set(dict(config.layer_bits)) - set(names))
    if unknown:
        raise ValueError(f"layer_bits names {unknown[0]!r}, which is not a linear of this model (have e.g. {names[0]!r})")
    modules = dict(model.named_modules())
    bits, fallbacks = {}, []
    for name in names:
        b = config.bits_of(name)
        if b != 32 and modules[name].in_features < MIN_QUANT_IN_FEATURES:
            fallbacks.append(f"{name}: in_features {modules[name].in_features} (a layer pruned to one FFN neuron), "
                             "kept fp32: torchao cannot quantize a single input feature per channel")
            bits[name] = 32
            continue
        if b == 4 and modules[name].in_features % config.group_size:
            fallbacks.append(f"{name}: in_features {modules[name].in_features} not divisible by group {config.group_size}, kept int8")
            b = 8
        bits[name] = b
    return bits, fallbacks


def resolved(model, config):
    """``config`` with every linear listed in ``layer_bits`` (what a bundle records)."""
    import dataclasses

    bits, _ = resolve_bits(model, config)
    return dataclasses.replace(config, layer_bits=tuple(bits.items()))


def _linear_config(bits: int, group_size: int):
    from torchao.quantization.granularity import PerAxis, PerGroup
    from torchao.quantization.quant_api import Int8DynamicActivationIntxWeightConfig

    if bits == 8:
        return Int8DynamicActivationIntxWeightConfig(weight_dtype=torch.int8, weight_granularity=PerAxis(0))
    return Int8DynamicActivationIntxWeightConfig(weight_dtype=torch.int4, weight_granularity=PerGroup(group_size))


def _embedding_config(kind: str):
    from torchao.quantization.granularity import PerAxis
    from torchao.quantization.quant_api import IntxWeightOnlyConfig

    return IntxWeightOnlyConfig(weight_dtype=torch.int8 if kind == "int8" else torch.int4, granularity=PerAxis(0))


def fake_quantize(model, config, *, inplace: bool = False):
    """``model`` with its linears and word embeddings quantized as ``config`` says (eval mode).

    The result runs eagerly (dequantize + fp32 op, activations quantized per
    token on the fly) and is what ``torch.export`` lowers to XNNPACK. A copy
    unless ``inplace``.
    """
    from torchao.quantization import quantize_

    m = model if inplace else copy.deepcopy(model)
    m.eval()
    bits, _ = resolve_bits(m, config)
    for width in (8, 4):
        chosen = {n for n, b in bits.items() if b == width}
        if chosen:
            quantize_(m, _linear_config(width, config.group_size), filter_fn=lambda mod, fqn, c=chosen: fqn in c)
    modules = dict(m.named_modules())
    with torch.no_grad():
        for name, b in bits.items():
            if b == 4:  # XNNPACK's blockwise int4 kernels keep group scales in bf16: make the reference do the same
                scale = modules[name].weight.scale
                scale.copy_(scale.to(torch.bfloat16).to(scale.dtype))
    if config.embeddings:
        quantize_(m, _embedding_config(config.embeddings), filter_fn=lambda mod, fqn: fqn == WORD_EMBEDDING)
    return m


def quantize_exit_heads(heads: nn.Module) -> nn.Module:
    """A copy of a dynamic model's exit heads (any module of plain linears) with every linear int8 as
    :func:`fake_quantize` makes an int8 layer: per-channel int8 weights, int8 dynamic activations.

    A linear already quantized, or with fewer than :data:`MIN_QUANT_IN_FEATURES` inputs, is left as it is.
    """
    from torchao.quantization import quantize_

    m = copy.deepcopy(heads).eval()
    quantize_(m, _linear_config(8, 32), filter_fn=lambda mod, fqn: isinstance(mod, nn.Linear)
              and type(mod.weight) in (torch.Tensor, nn.Parameter) and mod.in_features >= MIN_QUANT_IN_FEATURES)
    return m


def linear_bytes(out_features: int, in_features: int, bits: int, group_size: int) -> int:
    """Stored bytes of one linear's weight + bias at ``bits`` (fp32 scales per channel or group).

    :func:`edgenlp.models.arithmetic.linear_bytes` with this module's argument order.
    """
    return arithmetic.linear_bytes(in_features, out_features, bits, group_size=group_size)


def weight_bytes(model, bits: dict[str, int], *, group_size: int, embeddings: str | None) -> int:
    """Predicted weight bytes of ``model`` with linears at ``bits`` and the word table at ``embeddings``.

    Word embeddings quantize per row (one scale per token); every parameter
    not listed stays at its own dtype.
    """
    modules = dict(model.named_modules())
    total = 0
    counted = set()
    for name, b in bits.items():
        lin = modules[name]
        total += linear_bytes(lin.out_features, lin.in_features, b, group_size)
        counted.update((f"{name}.weight", f"{name}.bias"))
    word = modules[WORD_EMBEDDING].weight
    if embeddings:
        total += arithmetic.weight_bytes(word.shape[0], word.shape[1], int(embeddings[3:]))
        counted.add(f"{WORD_EMBEDDING}.weight")
    for pname, p in model.named_parameters():
        if pname not in counted:
            total += p.numel() * p.element_size()
    return total
