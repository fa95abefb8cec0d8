"""Expected latency of a dynamic model (early exits, token pruning) from per-segment statistics.

A dynamic model runs segment by segment (:mod:`edgenlp.run.dynamic`): a
sentence runs segment ``k`` only when no earlier exit fired, and on the tokens
that earlier token layers kept. Given, for each segment, the probability that
a sentence reaches it and the tokens it then runs on — measured on a
validation split, e.g. the ``segments`` of a profile's ``dynamic`` section
(:func:`segment_stats_from_profile`) — and a cost function ``cost(k, tokens)``
(ms of segment ``k`` at that many tokens, from the cost model or a measured
table), the latency statistics are::

    mean   sum_k reach_k * cost(k, mean_tokens_k)
    p90    sum over the segments at least 10% of sentences reach of cost(k, p90_tokens_k)
           (the 90th-percentile sentence in depth, at each segment's 90th-percentile length;
           mean_tokens where p90_tokens is not known)
    max    sum_k cost(k, full_tokens): every exit missed, no token dropped

Include the embedding (and any fixed per-call overhead) as a segment with
``reach`` 1 so that every statistic counts it. Example::

    stats = [SegmentStats(1.0, 20), SegmentStats(0.6, 14), SegmentStats(0.25, 9)]
    expected_latency(stats, lambda k, n: [1.0, 2.0, 3.0][k] * n)                    # 20 + 16.8 + 6.75 = 43.55
    expected_latency(stats, cost, statistic="max", full_tokens=32)                 # (1 + 2 + 3) * 32 = 192
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Sequence

STATISTICS = ("mean", "p90", "max")
P90_REACH = 0.1  # the 90th-percentile sentence runs every segment that at least this share of sentences reaches


@dataclass(frozen=True)
class SegmentStats:
    """How often one segment runs and on how many tokens, over a validation split.

    ``reach``: the share of sentences that run it, in [0, 1]; ``mean_tokens``:
    the mean tokens it runs on over those sentences (> 0); ``p90_tokens``: their
    90th percentile (optional; the ``p90`` statistic uses ``mean_tokens`` without it).
    """

    reach: float
    mean_tokens: float
    p90_tokens: float | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.reach, (int, float)) or not 0.0 <= self.reach <= 1.0:
            raise ValueError(f"reach must be a probability in [0, 1], got {self.reach!r}")
        for name in ("mean_tokens", "p90_tokens"):
            v = getattr(self, name)
            if v is None and name == "p90_tokens":
                continue
            if not isinstance(v, (int, float)) or math.isnan(v) or v <= 0:
                raise ValueError(f"{name} must be a positive number of tokens, got {v!r}")


def expected_latency(stats: Sequence[SegmentStats], cost: Callable[[int, float], float], *, statistic: str = "mean",
                     full_tokens: float | None = None) -> float:
    """A dynamic model's latency statistic: segment ``k`` costs ``cost(k, tokens)``; see the module docstring.

    ``stats`` lists the segments in execution order (reach cannot grow from one
    to the next). ``statistic`` is ``mean``, ``p90`` or ``max``; ``max`` needs
    ``full_tokens`` (the longest input, e.g. the bundle's max_seq_len). Returns
    the latency in the unit ``cost`` returns. Raises ValueError for an unknown
    statistic, empty or inconsistent ``stats``, ``max`` without ``full_tokens``,
    or a negative or non-finite cost.
    """
    if statistic not in STATISTICS:
        raise ValueError(f"statistic must be one of {', '.join(STATISTICS)}, got {statistic!r}")
    stats = list(stats)
    if not stats:
        raise ValueError("stats must list at least one segment")
    for k in range(1, len(stats)):
        if stats[k].reach > stats[k - 1].reach + 1e-9:
            raise ValueError(f"segment {k} is reached by {stats[k].reach} of the sentences, more than segment {k - 1} "
                             f"({stats[k - 1].reach}): a sentence only runs a segment after the one before it")

    def at(k: int, tokens: float) -> float:
        c = float(cost(k, tokens))
        if not math.isfinite(c) or c < 0:
            raise ValueError(f"cost({k}, {tokens}) returned {c}; costs must be finite and non-negative")
        return c

    if statistic == "max":
        if full_tokens is None or full_tokens <= 0:
            raise ValueError(f"statistic 'max' needs full_tokens (the longest input), got {full_tokens!r}")
        return sum(at(k, float(full_tokens)) for k in range(len(stats)))
    if statistic == "p90":
        return sum(at(k, s.p90_tokens if s.p90_tokens is not None else s.mean_tokens)
                   for k, s in enumerate(stats) if s.reach >= P90_REACH)
    return sum(s.reach * at(k, s.mean_tokens) for k, s in enumerate(stats) if s.reach > 0)


def segment_stats_from_profile(section: dict, runtime: str | None = None) -> list[SegmentStats]:
    """The :class:`SegmentStats` of a profile's ``dynamic`` section (``edgenlp profile BUNDLE --data ...``).

    ``runtime`` picks one of ``section["runtimes"]`` (default: the first). A
    segment no sentence reached gets ``reach`` 0 and one token.
    """
    runs = section.get("runtimes") or {}
    if not runs:
        raise ValueError("the dynamic section has no runtimes")
    if runtime is None:
        runtime = next(iter(runs))
    if runtime not in runs:
        raise ValueError(f"the dynamic section has no runtime {runtime!r} (it has {sorted(runs)})")
    return [SegmentStats(float(s["reach"]), float(s["mean_tokens"] or 1.0),
                         float(s["p90_tokens"]) if s.get("p90_tokens") is not None else None)
            for s in runs[runtime]["segments"]]


# What one more segment costs beyond its layer's work (the method call, the exit head, the hand-over of the hidden
# states), as a share of one layer: measured, not assumed. tools/bench/results/dynamic.json, SST-2 fp32 MiniLM-L6
# (ExecuTorch, 1 thread): static 29.96 ms; with exits 28.98 ms at 0.90x the static FLOPs and a mean exit layer of
# 5.41, so 28.98 - 0.90 * 29.96 = 2.0 ms over 5.41 segments of ~5.0 ms of layer each: 0.075 of a layer per segment.
SEGMENT_OVERHEAD = 0.075


@dataclass(frozen=True)
class ExitStats:
    """How far sentences run through a model with early exits, measured on a validation split.

    ``reach[l - 1]`` is the share of sentences that run layer ``l`` (1 for the
    first layer; it cannot grow with depth); ``drop`` the validation accuracy
    points the exits cost at the calibrated threshold; ``rule`` and
    ``threshold`` what was calibrated; ``source`` where the numbers come from.
    ``quantized``: the same, with the threshold calibrated again on the model
    with int8 linears (as ``quantize`` does it: int8 activations move the early
    exits' logits, so its sentences run to other depths); :meth:`for_bits`
    picks the one a candidate's precision runs.
    """

    reach: tuple[float, ...]
    drop: float
    rule: str = "maxprob"
    threshold: float | None = None
    source: str = ""
    quantized: "ExitStats | None" = None

    def __post_init__(self) -> None:
        reach = tuple(float(r) for r in self.reach)
        object.__setattr__(self, "reach", reach)
        if not reach:
            raise ValueError("reach must list one share per layer")
        for r in reach:
            if not 0.0 <= r <= 1.0:
                raise ValueError(f"reach must hold shares in [0, 1], got {r!r}")
        if abs(reach[0] - 1.0) > 1e-9:
            raise ValueError(f"every sentence runs the first layer: reach[0] must be 1, got {reach[0]}")
        for k in range(1, len(reach)):
            if reach[k] > reach[k - 1] + 1e-9:
                raise ValueError(f"reach cannot grow with depth: layer {k + 1} {reach[k]} > layer {k} {reach[k - 1]}")
        if not isinstance(self.drop, (int, float)) or not math.isfinite(self.drop):
            raise ValueError(f"drop must be a finite number of points, got {self.drop!r}")
        if self.quantized is not None and len(self.quantized.reach) != len(reach):
            raise ValueError(f"quantized stats have {len(self.quantized.reach)} layers, these {len(reach)}")

    @property
    def mean_layers(self) -> float:
        """Layers a sentence runs on average."""
        return float(sum(self.reach))

    def for_bits(self, bits) -> "ExitStats":
        """The statistics of a candidate whose linears have ``bits`` (a precision, or one per layer): ``quantized``
        when any linear is quantized and those were measured, else these."""
        quantized = bits != "fp32" if isinstance(bits, str) else any(b != "fp32" for b in bits)
        return self.quantized if quantized and self.quantized is not None else self

    def to_dict(self) -> dict:
        out = {"reach": [round(r, 6) for r in self.reach], "drop": round(float(self.drop), 4), "rule": self.rule,
               "threshold": self.threshold, "source": self.source, "mean_layers": round(self.mean_layers, 4)}
        if self.quantized is not None:
            out["quantized"] = self.quantized.to_dict()
        return out

    @classmethod
    def from_dict(cls, d: dict) -> "ExitStats":
        q = d.get("quantized")
        return cls(tuple(d["reach"]), float(d["drop"]), d.get("rule", "maxprob"), d.get("threshold"), d.get("source", ""),
                   cls.from_dict(q) if q is not None else None)


def exit_latency(static_ms: float, embedding_ms: float, stats: ExitStats, *, statistic: str) -> float:
    """The latency ``statistic`` of a model with early exits whose static program takes ``static_ms``.

    The embedding (``embedding_ms``) runs for every sentence; the rest of the
    static latency is split evenly over the layers, and layer ``l`` runs for
    ``reach[l - 1]`` of the sentences at its cost plus :data:`SEGMENT_OVERHEAD`
    (:func:`expected_latency` on one segment per layer; every segment at the
    full token count: exits cut depth, not length). ``max`` is the full depth
    with every overhead, so a latency budget on ``max`` never gains from exits.
    """
    if static_ms <= 0 or embedding_ms < 0 or embedding_ms > static_ms:
        raise ValueError(f"need 0 <= embedding_ms ({embedding_ms}) <= static_ms ({static_ms}) and static_ms > 0")
    per_layer = (static_ms - embedding_ms) / len(stats.reach)
    segments = [SegmentStats(1.0, 1.0)] + [SegmentStats(r, 1.0) for r in stats.reach]
    return expected_latency(segments, lambda k, n: (embedding_ms if k == 0 else per_layer * (1.0 + SEGMENT_OVERHEAD)) * n,
                            statistic=statistic, full_tokens=1.0)
