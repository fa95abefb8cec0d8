"""Inference-graph preparation shared by every lowering.

:func:`prepare` returns an eval-mode copy of an :class:`EncoderClassifier`
whose layer norms are decomposed into ops the XNNPACK partitioner accepts
(4-D ``mean`` over the innermost dims, ``sub``/``mul``/``add``/``rsqrt``).
XNNPACK in ExecuTorch 1.5 has no layer-norm kernel: a native layer norm
breaks the graph into one delegate call per norm (13 for MiniLM). With the
decomposition the whole encoder after the embedding gather is one partition.
"""

from __future__ import annotations

import copy

import torch
from torch import nn


class DecomposedLayerNorm(nn.LayerNorm):
    """``nn.LayerNorm`` over the last dim, written as mean/sub/mul/rsqrt on a 4-D view."""

    @classmethod
    def like(cls, norm: nn.LayerNorm) -> "DecomposedLayerNorm":
        """The same norm (its parameters shared, not copied), decomposed."""
        if len(norm.normalized_shape) != 1 or not norm.elementwise_affine:
            raise ValueError(f"only affine layer norms over the last dim are decomposed, got {norm}")
        out = cls(norm.normalized_shape, eps=norm.eps, device="meta")
        out.weight, out.bias = norm.weight, norm.bias
        return out.train(norm.training)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        x4 = x.reshape(-1, 1, shape[-1], 1) if x.dim() != 3 else x.unsqueeze(-1)
        mean = x4.mean(dim=(2, 3), keepdim=True)
        centered = x4 - mean
        var = (centered * centered).mean(dim=(2, 3), keepdim=True)
        y = (centered * torch.rsqrt(var + self.eps)).reshape(shape)
        return y * self.weight + self.bias


def decompose_layer_norms(model: nn.Module) -> nn.Module:
    """Replace every ``nn.LayerNorm`` in ``model`` (in place) by a :class:`DecomposedLayerNorm` sharing its parameters."""
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, nn.LayerNorm) and not isinstance(child, DecomposedLayerNorm):
                setattr(parent, name, DecomposedLayerNorm.like(child))
    return model


def prepare(model: nn.Module, *, decompose_norms: bool = True) -> nn.Module:
    """An eval-mode deep copy of ``model`` ready for ``torch.export``."""
    m = copy.deepcopy(model).eval()
    for p in m.parameters():
        p.requires_grad_(False)
    if decompose_norms:
        decompose_layer_norms(m)
    return m


def example_inputs(seq_len: int, *, batch: int = 1, vocab_size: int = 1000, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Random int64 ids (with [CLS]=101-like first token) and a mask with trailing padding."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, vocab_size, (batch, seq_len), generator=g, dtype=torch.int64)
    mask = torch.ones(batch, seq_len, dtype=torch.int64)
    if seq_len > 2:
        mask[:, -(seq_len // 4 or 1) :] = 0
    return ids, mask
