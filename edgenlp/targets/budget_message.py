"""What the planner says when no candidate fits: the closest point per budget and where accuracy and latency pull apart."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from edgenlp.targets.prior import AccuracyModel
    from edgenlp.targets.planner import Considered
    from edgenlp.targets.target import Budgets, Target


def tradeoff(budgets: Budgets, considered: list[Considered]) -> list[str]:
    """Where accuracy and the latency budget pull apart: the best of each side among candidates that meet everything else."""
    out = []
    if budgets.latency_ms is not None:
        # meets the accuracy bound and the memory/size budgets, misses only latency
        accurate = [c for c in considered if set(c.violations) <= {"latency"}]
        if accurate:
            fastest = min(accurate, key=lambda c: c.prediction.latency_ms)
            out.append(f"within the accuracy bound and the other budgets the fastest is {fastest.candidate.label} at "
                       f"{fastest.prediction.latency_ms:.3g} ms ({fastest.prediction.latency_ms / budgets.latency_ms:.2g}x the latency budget)")
        else:
            out.append("no candidate meets the accuracy bound and the memory and size budgets together, at any latency")
    frugal = [c for c in considered if set(c.violations) <= {"accuracy"}]
    if frugal:
        best = min(frugal, key=lambda c: c.drop)
        out.append(f"within the latency, memory and size budgets the smallest predicted drop is {best.drop:.2f} points "
                   f"({best.candidate.label})")
    return out


def closest_message(target: Target, budgets: Budgets, considered: list[Considered], acc: AccuracyModel,
                     max_drop: float | None) -> str:  # fmt: skip
    parts = []
    est = any(c.prediction.estimated for c in considered)
    for name, unit, budget, get in (
        ("latency", "ms", budgets.latency_ms, lambda c: c.prediction.latency_ms),
        ("memory", "MB", budgets.memory_mb, lambda c: c.prediction.peak_memory_mb),
        ("size", "MB", budgets.size_mb, lambda c: c.prediction.size_mb),
    ):
        if budget is None:
            continue
        best = min(considered, key=get)
        verdict = "meets" if get(best) <= budget else "misses"
        parts.append(f"{name} budget {budget:g} {unit}: lowest predicted {get(best):.3g} {unit} ({best.candidate.label}; {verdict} it)")
    if max_drop is not None:
        best = max(considered, key=lambda c: c.accuracy)
        parts.append(f"accuracy drop ≤ {max_drop:g}: smallest predicted drop {acc.baseline - best.accuracy:.2f} ({best.candidate.label})")
        parts += tradeoff(budgets, considered)
    # the candidate closest to fitting overall: smallest worst relative excess
    def excess(c: Considered) -> float:
        r = [c.prediction.latency_ms / budgets.latency_ms if budgets.latency_ms else 0.0,
             c.prediction.peak_memory_mb / budgets.memory_mb if budgets.memory_mb else 0.0,
             c.prediction.size_mb / budgets.size_mb if budgets.size_mb else 0.0]  # fmt: skip
        return max(r)

    near = min(considered, key=excess)
    p = near.prediction
    tail = (f"closest overall: {near.candidate.label} at {p.latency_ms:.3g} ms, {p.peak_memory_mb:.3g} MB peak, {p.size_mb:.3g} MB"
            f"{' (estimated)' if est else ''}")  # fmt: skip
    return (f"no candidate meets the budgets on {target.name} at seq {budgets.seq_len}, {budgets.threads} thread(s) "
            f"({len(considered)} considered): " + "; ".join(parts) + f"; {tail}. Relax a budget or widen the search space.")
