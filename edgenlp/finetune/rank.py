"""Learner ranks from priming: the smallest rank that explains most of a weight change.

While priming trains a targeted weight directly, its change ``dW = W - W0``
shows how many directions fine-tuning actually uses. :func:`choose_ranks`
picks, per layer, the smallest ``r`` whose top singular values hold
``energy`` of ``||dW||_F^2``; when the sum of Learner parameters
(``r * (in + out)`` per layer) exceeds ``budget`` the share is lowered for
all layers together until it fits. :func:`svd_factors` turns the top-``r``
part of ``dW`` into the two Learner factors.
"""

from __future__ import annotations

import logging

import torch

log = logging.getLogger(__name__)


def energy_curve(delta: torch.Tensor) -> torch.Tensor:
    """Cumulative share of ``||delta||^2`` held by the top 1, 2, ... singular values."""
    s = torch.linalg.svdvals(delta.double())
    energy = s * s
    total = energy.sum()
    if total <= 0:
        return torch.ones_like(energy)
    return torch.cumsum(energy, 0) / total


def rank_for_share(curve: torch.Tensor, share: float) -> int:
    """Smallest ``r`` with ``curve[r-1] >= share`` (a relative 1e-9 slack absorbs rounding)."""
    hits = torch.nonzero(curve >= share - 1e-9)
    return int(hits[0].item()) + 1 if len(hits) else len(curve)


def choose_ranks(
    deltas: dict[str, torch.Tensor], *, energy: float = 0.9, budget: int | None = None
) -> tuple[dict[str, int], dict]:
    """Per-layer ranks for the weight changes ``deltas`` (path -> out x in tensor).

    Returns ``(ranks, info)``; ``info`` records the share actually used and the
    parameter cost. A zero-width weight (a pruned-away block) gets no rank and
    no entry. Raises ``ValueError`` for an empty ``deltas`` or a bad share.

    >>> d = {"a": torch.randn(8, 2) @ torch.randn(2, 8)}
    >>> choose_ranks(d, energy=0.999)[0]["a"]
    2
    """
    if not deltas:
        raise ValueError("choose_ranks needs at least one weight change")
    if not 0.0 < energy <= 1.0:
        raise ValueError(f"energy must be in (0, 1], got {energy}")
    deltas = {path: d for path, d in deltas.items() if d.numel()}
    curves = {path: energy_curve(d) for path, d in deltas.items()}
    cost_per_rank = {path: d.shape[0] + d.shape[1] for path, d in deltas.items()}

    def ranks_at(share: float) -> dict[str, int]:
        return {path: rank_for_share(c, share) for path, c in curves.items()}

    def cost(ranks: dict[str, int]) -> int:
        return sum(r * cost_per_rank[p] for p, r in ranks.items())

    share = energy
    ranks = ranks_at(share)
    if budget is not None and cost(ranks) > budget:
        lo, hi = 0.0, energy  # cost(ranks_at(lo)) is the all-ones floor
        for _ in range(40):
            mid = (lo + hi) / 2
            if cost(ranks_at(mid)) <= budget:
                lo = mid
            else:
                hi = mid
        share = lo
        ranks = ranks_at(share)
        if cost(ranks) > budget:
            log.warning("rank budget %d is below one rank per layer (%d); using rank 1 everywhere", budget, cost(ranks))
    captured = {p: float(curves[p][r - 1]) for p, r in ranks.items()}
    info = {"energy_target": energy, "energy_used": share, "budget": budget, "params": cost(ranks), "captured": captured}
    return ranks, info


def svd_factors(delta: torch.Tensor, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(P1, P2)`` (in x r, r x out) with ``(P1 @ P2).T`` the best rank-``rank`` approximation of ``delta``."""
    u, s, vh = torch.linalg.svd(delta.double(), full_matrices=False)
    root = s[:rank].sqrt()
    p1 = vh[:rank].t() * root  # in x r
    p2 = root[:, None] * u[:, :rank].t()  # r x out
    return p1.to(delta.dtype), p2.to(delta.dtype)
