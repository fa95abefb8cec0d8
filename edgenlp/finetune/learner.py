"""Learners: a trainable low-rank pair beside a frozen linear layer.

For a linear layer with weight ``W`` (out x in) a Learner adds ``P1`` (in x r)
and ``P2`` (r x out) with no activation between them, so
``y = x (W^T + P1 P2) + b`` (Vucetic et al., 2022). ``P2`` starts at zero, so
the initial change is exactly zero. :class:`LearnerLinear` follows the PEFT
layer contract: the original layer is ``base_layer``, ``get_delta_weight()``
is ``(P1 P2)^T``, ``merge(safe=True)`` folds the delta into ``W`` after
checking it is finite, ``unmerge()`` takes it out again, and
:func:`merge_and_unload` returns a model made only of plain ``nn.Linear``
layers, so export never sees a Learner.
"""

from __future__ import annotations

import fnmatch
import math
from typing import Iterator

import torch
from torch import nn

from edgenlp.finetune.config import RANK_DIVISOR, LearnerConfig


class LearnerLinear(nn.Module):
    """``base_layer(x) + (x @ P1) @ P2`` with ``base_layer`` frozen."""

    def __init__(self, base_layer: nn.Linear, rank: int, *, generator: torch.Generator | None = None) -> None:
        super().__init__()
        if rank < 1:
            raise ValueError(f"rank must be >= 1, got {rank}")
        self.base_layer = base_layer
        self.rank = int(rank)
        self.merged = False
        dev, dtype = base_layer.weight.device, base_layer.weight.dtype
        self.learner_p1 = nn.Parameter(torch.empty(base_layer.in_features, self.rank, device=dev, dtype=dtype))
        self.learner_p2 = nn.Parameter(torch.zeros(self.rank, base_layer.out_features, device=dev, dtype=dtype))
        # LoRA's choice: uniform like nn.Linear's default for the factor that is not zero. Drawn on the CPU (where
        # ``generator`` lives) and copied over, so a seed gives the same Learners on every device.
        bound = 1.0 / math.sqrt(base_layer.in_features)
        with torch.no_grad():
            init = torch.empty(base_layer.in_features, self.rank, dtype=dtype).uniform_(-bound, bound, generator=generator)
            self.learner_p1.copy_(init)
        for p in base_layer.parameters():
            p.requires_grad_(False)

    @property
    def in_features(self) -> int:
        return self.base_layer.in_features

    @property
    def out_features(self) -> int:
        return self.base_layer.out_features

    @property
    def weight(self) -> torch.Tensor:  # lets code that reads ``.weight`` keep working
        return self.base_layer.weight

    @property
    def bias(self) -> torch.Tensor | None:
        return self.base_layer.bias

    def learner_parameters(self) -> Iterator[nn.Parameter]:
        yield self.learner_p1
        yield self.learner_p2

    def get_delta_weight(self) -> torch.Tensor:
        """The change this Learner makes to ``base_layer.weight`` (out x in)."""
        return (self.learner_p1 @ self.learner_p2).t()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.base_layer(x)
        if self.merged:
            return y
        return y + (x @ self.learner_p1) @ self.learner_p2

    @torch.no_grad()
    def merge(self, *, safe: bool = True) -> None:
        """Fold the delta into ``base_layer.weight``; ``safe`` checks the result is finite first."""
        if self.merged:
            return
        merged = self.base_layer.weight + self.get_delta_weight()
        if safe and not torch.isfinite(merged).all():
            raise ValueError(f"merging a Learner of rank {self.rank} would put NaN/Inf into the weight")
        self.base_layer.weight.copy_(merged)
        self.merged = True

    @torch.no_grad()
    def unmerge(self) -> None:
        """Take the delta back out of ``base_layer.weight``."""
        if not self.merged:
            return
        self.base_layer.weight.sub_(self.get_delta_weight())
        self.merged = False

    def extra_repr(self) -> str:
        return f"in={self.in_features}, out={self.out_features}, rank={self.rank}, merged={self.merged}"


# --------------------------------------------------------------------------- model-level helpers


def target_names(model: nn.Module, targets: tuple[str, ...]) -> list[str]:
    """Module paths (``layers.<i>.<part>``, ``pooler``) of the targeted linears, in model order."""
    names = []
    for i, _ in enumerate(model.layers):
        names += [f"layers.{i}.{part}" for part in targets if part != "pooler"]
    if "pooler" in targets:
        names.append("pooler")
    return names


def set_module(model: nn.Module, path: str, module: nn.Module) -> None:
    parent, _, attr = path.rpartition(".")
    setattr(model.get_submodule(parent) if parent else model, attr, module)


def default_rank(hidden: int, divisor: int = RANK_DIVISOR) -> int:
    """``hidden // divisor`` (64 for hidden 768, 32 for MiniLM's 384 at the default divisor), at least 1.

    The Learner schedule picks the divisor (``LearnerSchedule.rank_divisor``: 8 on a very short budget)."""
    return max(1, hidden // divisor)


def rank_for(path: str, config: LearnerConfig, hidden: int, divisor: int = RANK_DIVISOR) -> int:
    """The fixed rank ``config`` gives the module at ``path`` (first matching pattern wins; unset: ``hidden // divisor``)."""
    for pattern, r in config.ranks:
        if fnmatch.fnmatchcase(path, pattern):
            return r
    if isinstance(config.rank, int):
        return config.rank
    return default_rank(hidden, divisor)


def learner_param_cost(module: nn.Linear, rank: int) -> int:
    return rank * (module.in_features + module.out_features)


def add_learners(
    model: nn.Module, ranks: dict[str, int], *, seed: int = 0, init: dict[str, tuple[torch.Tensor, torch.Tensor]] | None = None
) -> dict[str, LearnerLinear]:
    """Wrap each module in ``ranks`` (path -> rank) with a :class:`LearnerLinear`, in place.

    ``init`` optionally gives ``(P1, P2)`` for a path instead of the zero-delta start.
    Ranks are capped at ``min(in, out)``; a zero-width linear (a pruned-away
    FFN or attention block) has nothing to learn and is left as it is.
    Returns path -> Learner.
    """
    gen = torch.Generator().manual_seed(seed)
    out = {}
    for path, r in ranks.items():
        base = model.get_submodule(path)
        if not isinstance(base, nn.Linear):
            raise TypeError(f"{path} is a {type(base).__name__}, not nn.Linear")
        r = min(r, base.in_features, base.out_features)
        if r == 0:
            continue
        layer = LearnerLinear(base, r, generator=gen)
        if init and path in init:
            p1, p2 = init[path]
            with torch.no_grad():
                layer.learner_p1.copy_(p1)
                layer.learner_p2.copy_(p2)
        set_module(model, path, layer)
        out[path] = layer
    return out


def learners(model: nn.Module) -> dict[str, LearnerLinear]:
    return {name: m for name, m in model.named_modules() if isinstance(m, LearnerLinear)}


def merge_and_unload(model: nn.Module, *, safe: bool = True) -> nn.Module:
    """Merge every Learner and put its ``base_layer`` back in its place (in place; returns ``model``)."""
    for path, layer in learners(model).items():
        layer.merge(safe=safe)
        set_module(model, path, layer.base_layer)
    return model
