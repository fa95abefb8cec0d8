"""FAR (Freeze-And-Reconfigure): train only the FFN neurons that move most.

After a short priming of the whole model, :func:`neuron_scores` ranks each
layer's FFN neurons by how far their weights moved (L1 of the change of their
``ffn_in`` row plus their ``ffn_out`` column) and :func:`select_neurons` keeps
the top fraction. :func:`reconfigure` then splits every FFN into a small
trainable pair of linears for the kept neurons and a frozen pair for the rest
(no masks: the frozen pair has no gradient buffers and its weights are never
updated or moved by the optimizer). :func:`fold_back` rebuilds the standard
``ffn_in``/``ffn_out`` linears with the original neuron order.

Deciding (scores, selection) is kept apart from doing (reconfigure, fold back).
"""

from __future__ import annotations

import torch
from torch import nn

from edgenlp.models.encoder import EncoderLayer


def neuron_scores(ffn_in_before: torch.Tensor, ffn_in_after: torch.Tensor,
                  ffn_out_before: torch.Tensor, ffn_out_after: torch.Tensor) -> torch.Tensor:
    """Per-neuron L1 change: ``|dW_in[j, :]|_1 + |dW_out[:, j]|_1`` (``[ffn]``)."""
    return (ffn_in_after - ffn_in_before).abs().sum(1) + (ffn_out_after - ffn_out_before).abs().sum(0)


def select_neurons(scores: torch.Tensor, keep: float) -> torch.Tensor:
    """Indices (sorted) of the ``ceil(keep * n)`` highest-scoring neurons (at least one when n > 0)."""
    n = scores.numel()
    if n == 0:
        return torch.zeros(0, dtype=torch.long)
    k = min(n, max(1, int(-(-keep * n // 1))))
    top = torch.topk(scores, k, sorted=False).indices  # ties: lowest index first is not guaranteed; sort below
    return torch.sort(top).values


def _linear(in_f: int, out_f: int, weight: torch.Tensor, bias: torch.Tensor | None, *, trainable: bool) -> nn.Linear:
    layer = nn.Linear(in_f, out_f, bias=bias is not None, device=weight.device, dtype=weight.dtype)
    with torch.no_grad():
        layer.weight.copy_(weight)
        if bias is not None:
            layer.bias.copy_(bias)
    layer.requires_grad_(trainable)
    return layer


class SplitFFN(nn.Module):
    """An FFN whose neurons live in a trainable pair (``*_train``) and a frozen pair (``*_frozen``).

    ``order`` lists the original neuron index of each position: trainable
    neurons first, then frozen ones. ``out_bias`` is the output bias (trainable).
    """

    def __init__(self, ffn_in: nn.Linear, ffn_out: nn.Linear, keep: torch.Tensor, act) -> None:
        super().__init__()
        n = ffn_in.out_features
        frozen_mask = torch.ones(n, dtype=torch.bool)
        frozen_mask[keep] = False
        frozen = torch.nonzero(frozen_mask).flatten()
        self.register_buffer("order", torch.cat([keep, frozen]), persistent=False)
        self.act = act
        w_in, b_in, w_out = ffn_in.weight.detach(), ffn_in.bias.detach(), ffn_out.weight.detach()
        h = ffn_in.in_features
        k, f = len(keep), len(frozen)
        self.in_train = _linear(h, k, w_in[keep], b_in[keep], trainable=True)
        self.out_train = _linear(k, h, w_out[:, keep], None, trainable=True)
        self.in_frozen = _linear(h, f, w_in[frozen], b_in[frozen], trainable=False) if f else None
        self.out_frozen = _linear(f, h, w_out[:, frozen], None, trainable=False) if f else None
        self.out_bias = nn.Parameter(ffn_out.bias.detach().clone())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.out_train(self.act(self.in_train(x))) + self.out_bias
        if self.in_frozen is not None:
            y = y + self.out_frozen(self.act(self.in_frozen(x)))
        return y

    def fold(self) -> tuple[nn.Linear, nn.Linear]:
        """Standard ``(ffn_in, ffn_out)`` with the original neuron order."""
        parts_in = [self.in_train] + ([self.in_frozen] if self.in_frozen is not None else [])
        parts_out = [self.out_train] + ([self.out_frozen] if self.out_frozen is not None else [])
        inverse = torch.argsort(self.order)
        w_in = torch.cat([p.weight.detach() for p in parts_in], 0)[inverse]
        b_in = torch.cat([p.bias.detach() for p in parts_in], 0)[inverse]
        w_out = torch.cat([p.weight.detach() for p in parts_out], 1)[:, inverse]
        h, n = w_in.shape[1], w_in.shape[0]
        return (_linear(h, n, w_in, b_in, trainable=True),
                _linear(n, h, w_out, self.out_bias.detach(), trainable=True))


class ReconfiguredLayer(EncoderLayer):
    """An :class:`EncoderLayer` whose FFN is a :class:`SplitFFN` at ``self.ffn``."""

    def feed_forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.ffn(x)


def reconfigure(layer: EncoderLayer, keep: torch.Tensor) -> SplitFFN:
    """Split ``layer``'s FFN so the neurons ``keep`` train on their own (in place)."""
    if type(layer) is not EncoderLayer:
        raise TypeError(f"expected an EncoderLayer, got {type(layer).__name__}")
    split = SplitFFN(layer.ffn_in, layer.ffn_out, keep, layer.act)
    split.module_order = list(layer._modules)  # fold_back restores it, so state_dict order is unchanged
    del layer.ffn_in, layer.ffn_out
    layer.ffn = split
    layer.__class__ = ReconfiguredLayer
    return split


def fold_back(layer: EncoderLayer) -> None:
    """Undo :func:`reconfigure`: standard ``ffn_in``/``ffn_out`` with the original order (in place)."""
    if type(layer) is not ReconfiguredLayer:
        return
    ffn_in, ffn_out = layer.ffn.fold()
    order = layer.ffn.module_order
    del layer.ffn
    layer.ffn_in, layer.ffn_out = ffn_in, ffn_out
    layer._modules = {name: layer._modules[name] for name in order}
    layer.__class__ = EncoderLayer
