"""FAR (Freeze-And-Reconfigure): train only the FFN neurons that move most.

After a short priming of the whole model, :func:`neuron_scores` ranks each
layer's FFN neurons by how far their weights moved (L1 of the change of their
``ffn_in`` row plus their ``ffn_out`` column) and :func:`select_neurons` keeps
the top fraction. :func:`reconfigure` then splits every FFN into a small
trainable pair of linears for the kept neurons and a frozen pair for the rest
(no masks: the frozen pair has no gradient buffers and its weights are never
updated or moved by the optimizer). The pair replaces the layer's ``ffn_in`` and
``ffn_out`` modules in place, so any layer with those canonical linears works,
of any width. :func:`fold_back` rebuilds the standard ``ffn_in``/``ffn_out``
linears with the original neuron order.

Deciding (scores, selection) is kept apart from doing (reconfigure, fold back).
"""

from __future__ import annotations

import torch
from torch import nn



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


class SplitIn(nn.Module):
    """Stands in for ``ffn_in``: a trainable linear for the kept neurons and a frozen one for the rest.

    The output holds the trainable neurons first, then the frozen ones; the
    matching :class:`SplitOut` reads them in that order, so the layer's own
    ``feed_forward`` (``ffn_out(act(ffn_in(x)))``) is unchanged.
    """

    def __init__(self, ffn_in: nn.Linear, keep: torch.Tensor, frozen: torch.Tensor) -> None:
        super().__init__()
        w, b = ffn_in.weight.detach(), ffn_in.bias.detach()
        h = ffn_in.in_features
        self.in_features, self.out_features = h, ffn_in.out_features
        self.train_part = _linear(h, len(keep), w[keep], b[keep], trainable=True)
        self.frozen_part = _linear(h, len(frozen), w[frozen], b[frozen], trainable=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.train_part(x), self.frozen_part(x)], dim=-1)


class SplitOut(nn.Module):
    """Stands in for ``ffn_out``: column blocks matching :class:`SplitIn`, the bias trainable."""

    def __init__(self, ffn_out: nn.Linear, keep: torch.Tensor, frozen: torch.Tensor) -> None:
        super().__init__()
        w = ffn_out.weight.detach()
        h = ffn_out.out_features
        self.in_features, self.out_features = ffn_out.in_features, h
        self.kept = len(keep)
        self.train_part = _linear(len(keep), h, w[:, keep], None, trainable=True)
        self.frozen_part = _linear(len(frozen), h, w[:, frozen], None, trainable=False)
        self.bias = nn.Parameter(ffn_out.bias.detach().clone())

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        k = self.kept
        return self.train_part(z[..., :k]) + self.frozen_part(z[..., k:]) + self.bias


def reconfigure(layer: nn.Module, keep: torch.Tensor) -> tuple[SplitIn, SplitOut]:
    """Split ``layer``'s FFN (its ``ffn_in``/``ffn_out`` linears) so the neurons ``keep`` train on their own, in place.

    Works on any layer that has the canonical ``ffn_in``/``ffn_out`` linears,
    whatever its width (an empty ``keep`` or a zero-width FFN leaves parts empty).
    """
    ffn_in, ffn_out = layer.ffn_in, layer.ffn_out
    if not isinstance(ffn_in, nn.Linear) or not isinstance(ffn_out, nn.Linear):
        raise TypeError(f"expected nn.Linear ffn_in/ffn_out, got {type(ffn_in).__name__}/{type(ffn_out).__name__}")
    n = ffn_in.out_features
    keep = torch.as_tensor(keep, dtype=torch.long).cpu()
    frozen_mask = torch.ones(n, dtype=torch.bool)
    frozen_mask[keep] = False
    # the index sets are worked out on the CPU and live beside the weights (CUDA ones under --device cuda)
    keep, frozen = keep.to(ffn_in.weight.device), torch.nonzero(frozen_mask).flatten().to(ffn_in.weight.device)
    split_in, split_out = SplitIn(ffn_in, keep, frozen), SplitOut(ffn_out, keep, frozen)
    split_in.register_buffer("order", torch.cat([keep, frozen]), persistent=False)
    layer.ffn_in, layer.ffn_out = split_in, split_out  # same _modules slots: state_dict order is kept
    return split_in, split_out


def fold_back(layer: nn.Module) -> None:
    """Undo :func:`reconfigure`: standard ``ffn_in``/``ffn_out`` linears in the original neuron order (in place)."""
    split_in, split_out = layer.ffn_in, layer.ffn_out
    if not isinstance(split_in, SplitIn):
        return
    inverse = torch.argsort(split_in.order)
    parts_in = (split_in.train_part, split_in.frozen_part)
    w_in = torch.cat([p.weight.detach() for p in parts_in], 0)[inverse]
    b_in = torch.cat([p.bias.detach() for p in parts_in], 0)[inverse]
    w_out = torch.cat([split_out.train_part.weight.detach(), split_out.frozen_part.weight.detach()], 1)[:, inverse]
    h, n = w_in.shape[1], w_in.shape[0]
    layer.ffn_in = _linear(h, n, w_in, b_in, trainable=True)
    layer.ffn_out = _linear(n, h, w_out, split_out.bias.detach(), trainable=True)
