"""Per-linear sensitivity and bits under a size budget (Q-BERT style, measured rather than Hessian-estimated).

Sensitivity of a linear at ``b`` bits = the KL divergence of the model's output
distribution from fp32 on calibration sentences when only that linear is
quantized to ``b`` bits (a measured loss increase; no second-order estimate).
:func:`allocate_bits` starts every linear at 4 bits and buys precision
greedily where it removes the most predicted loss per extra byte, while the
predicted weight bytes stay within the budget.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Sequence

import torch

from edgenlp.errors import EdgeNLPError

log = logging.getLogger(__name__)

STEPS = {4: 8, 8: 32}  # one precision up


class QuantizeError(EdgeNLPError):
    """A size budget or accuracy limit that quantization cannot meet (nothing is written)."""


def _logits(model, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(ids, mask).float()


def _kl(ref: torch.Tensor, got: torch.Tensor) -> float:
    p = torch.log_softmax(ref, -1)
    q = torch.log_softmax(got, -1)
    return float((p.exp() * (p - q)).sum(-1).mean())


def calibration_batch(tokenizer, texts: Sequence[str], *, max_len: int, id_map=None) -> tuple[torch.Tensor, torch.Tensor]:
    from edgenlp.models.tokenizer import pad_batch, token_ids

    ids = token_ids(tokenizer, texts, max_len=max_len)
    if id_map is not None:
        ids = [id_map.apply(x) for x in ids]
    x, m = pad_batch(ids, pad_id=0)
    return torch.from_numpy(x), torch.from_numpy(m)


def layer_sensitivity(model, config, batch, *, bits: Sequence[int] = (4, 8), progress=None) -> dict[str, dict[int, float]]:
    """``{linear: {bits: KL vs fp32}}`` with only that linear quantized (``config``'s group size, no embeddings)."""
    from edgenlp.quantize.schemes import fake_quantize, linear_names

    ids, mask = batch
    ref = _logits(model, ids, mask)
    out: dict[str, dict[int, float]] = {}
    names = linear_names(model)
    modules = dict(model.named_modules())
    for name in names:
        out[name] = {}
        for b in bits:
            if b == 4 and modules[name].in_features % config.group_size:
                continue
            single = dataclasses.replace(config, scheme="mixed", embeddings=None, layer_bits=tuple((n, b if n == name else 32) for n in names))
            out[name][b] = _kl(ref, _logits(fake_quantize(model, single), ids, mask))
        out[name][32] = 0.0
        if progress is not None:
            progress()
    return out


def allocate_bits(model, config, sensitivity: dict[str, dict[int, float]], *, budget_bytes: int) -> dict[str, int]:
    """Bits per linear minimising summed sensitivity with predicted weight bytes <= ``budget_bytes``.

    Raises :class:`EdgeNLPError` when even the lowest precision exceeds the budget.
    """
    from edgenlp.quantize.schemes import weight_bytes

    bits = {n: min(s) for n, s in sensitivity.items()}
    size = weight_bytes(model, bits, group_size=config.group_size, embeddings=config.embeddings)
    if size > budget_bytes:
        raise QuantizeError(
            f"--size-mb {budget_bytes / 1e6:.2f} cannot be met: the smallest this model gets "
            f"(int4 linears{', ' + config.embeddings + ' embeddings' if config.embeddings else ''}) is {size / 1e6:.2f} MB"
        )
    modules = dict(model.named_modules())
    while True:
        best = None
        for n, b in bits.items():
            up = STEPS.get(b)
            if up is None or up not in sensitivity[n]:
                continue
            lin = modules[n]
            from edgenlp.quantize.schemes import linear_bytes

            extra = linear_bytes(lin.out_features, lin.in_features, up, config.group_size) - linear_bytes(
                lin.out_features, lin.in_features, b, config.group_size)
            gain = sensitivity[n][b] - sensitivity[n][up]
            if size + extra > budget_bytes or gain <= 0:
                continue
            score = gain / max(extra, 1)
            if best is None or score > best[0]:
                best = (score, n, up, extra)
        if best is None:
            return bits
        _, n, up, extra = best
        bits[n] = up
        size += extra
