"""Lowering defects and stand-in programs for the parity gate's tests.

A defect is applied to a copy of a quantized model the way a broken lowering
would present it (the weights a kernel reads differ from the reference's);
lowering that copy, or running it eagerly as a stand-in program, must fail the
gate against the intact reference. :class:`EagerProgram` runs any model as a
parity runner, so another ISA's activation rounding
(:func:`edgenlp.quantize.rounding.with_kernel_rounding`) can stand in for a
program this host cannot run.
"""

from __future__ import annotations

import copy

import numpy as np
import torch

from edgenlp.quantize.rounding import quantized_linears


def with_biases(model, *, std: float = 0.2, seed: int = 0):
    """``model`` (in place) with random biases in every linear: init_weights zeroes them, a trained model has them."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.Linear) and m.bias is not None:
                m.bias.normal_(0.0, std, generator=gen)
    return model


def _scale_x2(linear):
    linear.weight.scale.mul_(2.0)


def _swap_rows(linear):
    w = linear.weight
    perm = torch.roll(torch.arange(w.qdata.shape[0]), 1)  # output channel i reads channel i-1's weights
    for t in (w.qdata, w.scale, w.zero_point):
        t.copy_(t[perm])


def _transpose(linear):
    w = linear.weight
    assert w.qdata.shape[0] == w.qdata.shape[1] and w.scale.shape[1] == 1, "transpose a square per-channel linear"
    w.qdata.copy_(w.qdata.t().contiguous())


def _drop_bias(linear):
    linear.bias.zero_()


def _group_size_x2(linear):
    w = linear.weight
    groups = w.scale.shape[1]
    assert groups > 1, "wrong group size needs a group-wise (int4) linear"
    idx = torch.arange(groups) // 2  # the kernel reads each scale for twice the in-features it covers
    w.scale.copy_(w.scale[:, idx])


DEFECTS = {
    "scale-x2": _scale_x2,
    "swapped-rows": _swap_rows,
    "transposed": _transpose,
    "dropped-bias": _drop_bias,
    "wrong-group-size": _group_size_x2,
}


def with_defect(model, defect: str, *, where: str | None = None):
    """A copy of quantized ``model`` with ``defect`` (a :data:`DEFECTS` key) in linear ``where`` (default: every one it applies to)."""
    out = copy.deepcopy(model)
    out.quantization = model.quantization
    hit = 0
    with torch.no_grad():
        for name, linear in quantized_linears(out).items():
            if where is not None and name != where:
                continue
            try:
                DEFECTS[defect](linear)
                hit += 1
            except AssertionError:
                if where is not None:
                    raise
    assert hit, f"{defect} applied to no linear"
    return out


class EagerProgram:
    """A parity runner (``runner_factory``) that runs ``model`` eagerly instead of a lowered program."""

    def __init__(self, model, tokenizer, *, max_len: int, id_map=None):
        self.model, self.tokenizer, self.max_len, self.id_map = model, tokenizer, max_len, id_map

    def factory(self, path, *, runtime):
        return self

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def predict_logits(self, texts) -> np.ndarray:
        from edgenlp.export.api import _eager_reference

        return _eager_reference(self.model, self.tokenizer, texts, self.max_len, id_map=self.id_map)
