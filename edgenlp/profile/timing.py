"""The timing core: interleaved rounds of named callables, medians, p10–p90 and same-round ratios.

Shared by the profiler's measurers, ``compress``'s verify stage and every
script in ``tools/bench/``. On a machine shared with other jobs the load moves
while a benchmark runs; timing candidates one after the other would charge a
load change to whichever candidate ran then. Interleaving puts every candidate
in every round, in the same stretch of time, and a ratio against a baseline
is taken round by round::

    t = interleave({"fp32": run_fp32, "int8": run_int8}, rounds=5, iters=10, warmup=3)
    t.summary("int8")            # {"median": ms, "p10": ms, "p90": ms, "mean": ms, "std": ms, "n": 50, ...}
    t.ratio_summary("int8", "fp32")   # median and p10–p90 of the 5 per-round ratios int8 / fp32

A round runs each candidate ``iters`` times in a row (``iters`` timed calls);
with ``alternate`` (the default) every other round runs the candidates in
reverse order, so no candidate always follows the same neighbour. The median
of a candidate is the median over rounds of each round's median (the median of
all samples when ``iters`` is 1); p10 and p90 are over all samples. Where the
callable times itself (a fresh process reporting its own numbers, a runtime's
own event clock), :func:`run_rounds` interleaves the calls and
:meth:`Timings.from_rounds` builds the same statistics from what they return.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence, TypeVar

import numpy as np

T = TypeVar("T")
Clock = Callable[[], float]


# --------------------------------------------------------------------------- statistics


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0-100) with linear interpolation between order statistics; NaN when empty."""
    values = list(values)
    return float(np.percentile(np.asarray(values, dtype=float), q)) if values else float("nan")


def median(values: Sequence[float]) -> float:
    return percentile(values, 50)


def p90(values: Sequence[float]) -> float:
    return percentile(values, 90)


def summarize(values: Sequence[float]) -> dict:
    """``{"median", "p10", "p90", "mean", "std", "n"}`` of ``values`` (std: sample std, 0 for one value)."""
    xs = [float(v) for v in values]
    n = len(xs)
    mean = float(np.mean(xs)) if n else float("nan")
    std = float(np.std(xs, ddof=1)) if n > 1 else 0.0
    return {"median": median(xs), "p10": percentile(xs, 10), "p90": percentile(xs, 90), "mean": mean, "std": std, "n": n}


# --------------------------------------------------------------------------- running


def timed(fn: Callable[[], object], *, iters: int = 1, clock: Clock = time.perf_counter, sync: Callable[[], None] | None = None,
          scale: float = 1e3) -> Callable[[], list[float]]:
    """A callable that runs ``fn`` ``iters`` times and returns each call's time (``clock`` units x ``scale``; ms by default).

    ``sync`` (for instance ``torch.cuda.synchronize``) runs before the clock
    starts and before it stops, so asynchronous work is inside the sample.
    """
    if iters < 1:
        raise ValueError(f"iters must be >= 1, got {iters}")

    def run() -> list[float]:
        out = []
        for _ in range(iters):
            if sync is not None:
                sync()
            t0 = clock()
            fn()
            if sync is not None:
                sync()
            out.append((clock() - t0) * scale)
        return out

    return run


def round_order(names: Sequence[str], r: int, *, alternate: bool = True) -> list[str]:
    """The order of round ``r``: as given, or reversed on odd rounds with ``alternate``."""
    names = list(names)
    return names[::-1] if alternate and r % 2 == 1 else names


def run_rounds(candidates: Mapping[str, Callable[[], T]], *, rounds: int, alternate: bool = True,
               before_round: Callable[[int], None] | None = None) -> dict[str, list[T]]:
    """Call every candidate once per round, ``rounds`` rounds; per name, what each round's call returned.

    ``before_round(r)`` runs before round ``r`` (to hand every candidate the
    same new input, for instance). Use it with callables that time themselves;
    :func:`interleave` times plain callables.
    """
    if rounds < 1:
        raise ValueError(f"rounds must be >= 1, got {rounds}")
    if not candidates:
        raise ValueError("no candidates to time")
    out: dict[str, list[T]] = {name: [] for name in candidates}
    for r in range(rounds):
        if before_round is not None:
            before_round(r)
        for name in round_order(list(candidates), r, alternate=alternate):
            out[name].append(candidates[name]())
    return out


def interleave(calls: Mapping[str, Callable[[], object]], *, rounds: int, iters: int = 1, warmup: int = 0,
               alternate: bool = True, clock: Clock = time.perf_counter, sync: Callable[[], None] | None = None,
               scale: float = 1e3, unit: str = "ms", before_round: Callable[[int], None] | None = None) -> "Timings":
    """Time ``calls`` in interleaved rounds after ``warmup`` untimed calls of each (interleaved too).

    Each round runs each call ``iters`` times in a row; see the module
    docstring for the order and the statistics.
    """
    if warmup < 0:
        raise ValueError(f"warmup must be >= 0, got {warmup}")
    for _ in range(warmup):
        for fn in calls.values():
            fn()
    per = run_rounds({name: timed(fn, iters=iters, clock=clock, sync=sync, scale=scale) for name, fn in calls.items()},
                     rounds=rounds, alternate=alternate, before_round=before_round)
    return Timings(per, unit=unit)


# --------------------------------------------------------------------------- results


@dataclass
class Timings:
    """Samples per candidate and round: ``samples[name][round]`` is the list of that round's timed calls."""

    samples: dict[str, list[list[float]]]
    unit: str = "ms"
    names: list[str] = field(init=False)

    def __post_init__(self) -> None:
        self.samples = {n: [[float(x) for x in r] for r in rs] for n, rs in self.samples.items()}
        self.names = list(self.samples)
        counts = {len(rs) for rs in self.samples.values()}
        if len(counts) > 1:
            raise ValueError(f"candidates have different numbers of rounds: {counts}")

    @classmethod
    def from_rounds(cls, per_round: Mapping[str, Sequence[float | Sequence[float]]], *, unit: str = "ms") -> "Timings":
        """From :func:`run_rounds` output whose values are a number or a list of numbers per round."""
        return cls({n: [list(v) if isinstance(v, (list, tuple)) else [v] for v in rs] for n, rs in per_round.items()}, unit=unit)

    @property
    def rounds(self) -> int:
        return len(next(iter(self.samples.values()), []))

    def values(self, name: str) -> list[float]:
        """Every sample of ``name``, round after round."""
        return [x for r in self.samples[name] for x in r]

    def round_medians(self, name: str) -> list[float]:
        return [median(r) for r in self.samples[name]]

    def summary(self, name: str) -> dict:
        """:func:`summarize` over all samples, with ``median`` = median of the round medians, and the rounds' medians."""
        rm = self.round_medians(name)
        return {**summarize(self.values(name)), "median": median(rm), "rounds": len(rm), "round_medians": rm}

    def ratios(self, name: str, baseline: str) -> list[float]:
        """Per round: ``name``'s round median / ``baseline``'s round median (the same round)."""
        return [a / b for a, b in zip(self.round_medians(name), self.round_medians(baseline))]

    def ratio_summary(self, name: str, baseline: str) -> dict:
        r = self.ratios(name, baseline)
        return {"median": median(r), "p10": percentile(r, 10), "p90": percentile(r, 90), "rounds": len(r)}

    def report(self, baseline: str | None = None) -> dict:
        """Per candidate: its summary (keys suffixed with the unit) and ``vs_<baseline>`` ratios."""
        out = {}
        for name in self.names:
            s = self.summary(name)
            row = {f"{k}_{self.unit}" if k in ("median", "p10", "p90", "mean", "std") else k: v for k, v in s.items()}
            row[f"round_medians_{self.unit}"] = row.pop("round_medians")
            if baseline is not None:
                row[f"vs_{baseline}"] = self.ratio_summary(name, baseline)
            out[name] = row
        return out
