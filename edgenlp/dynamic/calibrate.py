"""Choosing thresholds on a validation split: the lowest expected cost within a maximum accuracy drop.

Everything here works on :class:`edgenlp.dynamic.model.MaskedTrace` (every
exit's logits and every layer's token count for each validation sentence), so
one pass of the masked model serves every exit rule and threshold: an exit
does not change what the layers before it compute.

Cost is FLOPs (:func:`edgenlp.models.arithmetic.encoder_flops` per layer at the
tokens it processed, plus the heads run), relative to the static model on
the same sentences. Drops are accuracy points against the static model's
accuracy on the same validation rows.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from edgenlp.dynamic.rules import RULES, confidence
from edgenlp.models.arithmetic import encoder_flops, linear_flops


@dataclass(frozen=True)
class Point:
    """One setting on a validation curve."""

    threshold: float
    accuracy: float
    drop: float  # accuracy points below the static model
    cost: float  # expected FLOPs relative to the static model
    mean_exit_layer: float
    # standard error of the drop, in points: of the per-row difference against a reference, paired; by default the
    # trace's last exit (the drop the exits add), against the static model when token pruning is in the trace too
    # (exit_curve's reference_right); it shrinks as 1/sqrt(rows)
    drop_se: float = 0.0

    def to_dict(self) -> dict:
        return {k: round(v, 6) if isinstance(v, float) else v for k, v in asdict(self).items()}


def layer_flops(shape, counts: np.ndarray) -> np.ndarray:
    """``[N, L]`` FLOPs of each layer at the token counts it processed."""
    out = np.zeros(counts.shape, dtype=np.float64)
    for i, (h, f) in enumerate(zip(shape.heads, shape.ffn)):
        for n in np.unique(counts[:, i]):
            out[counts[:, i] == n, i] = encoder_flops(shape.hidden, shape.head_dim, (h,), (f,), seq_len=int(n))
    return out


def head_flops(shape, num_labels: int) -> float:
    return float(linear_flops(shape.hidden, shape.pooler_width, tokens=1) + linear_flops(shape.pooler_width, num_labels, tokens=1))


def exit_scores(rule: str, trace, exits: tuple[int, ...]) -> np.ndarray:
    """``[N, E]``: what ``rule`` compares at each exit (max probability, normalized entropy, or the agreeing streak)."""
    logits = [trace.exit_logits[l] for l in exits]
    n = logits[0].shape[0]
    if rule == "patience":
        labels = np.stack([z.argmax(-1) for z in logits], 1)
        streak = np.ones(labels.shape, dtype=np.int64)
        for j in range(1, labels.shape[1]):
            streak[:, j] = np.where(labels[:, j] == labels[:, j - 1], streak[:, j - 1] + 1, 1)
        return streak.astype(np.float64)
    return np.array([[confidence(rule, z[i]) for z in logits] for i in range(n)], dtype=np.float64)


def first_exit(rule: str, scores: np.ndarray, threshold: float) -> np.ndarray:
    """``[N]`` index of the exit each sentence stops at (the last exit when none fires before it)."""
    fires = scores <= threshold if rule == "entropy" else scores >= threshold
    fires[:, -1] = True
    return fires.argmax(1)


def candidates(rule: str, scores: np.ndarray, num_exits: int, *, points: int = 60) -> list[float]:
    """Thresholds worth trying: quantiles of the early exits' scores, plus the range ends."""
    if rule == "patience":
        return [float(k) for k in range(1, num_exits + 1)]
    early = scores[:, :-1].reshape(-1)
    qs = np.quantile(early, np.linspace(0.0, 1.0, points)) if early.size else np.array([])
    ends = [0.0, 1.0]
    return sorted(set(float(round(q, 6)) for q in qs) | set(ends), reverse=(rule == "entropy"))


def exit_curve(rule: str, trace, labels: np.ndarray, exits: tuple[int, ...], *, shape, static_accuracy: float,
               static_cost: float, thresholds: list[float] | None = None, reference_right=None) -> list[Point]:
    """Accuracy, drop and relative cost of ``rule`` at each threshold, on the sentences of ``trace``.

    ``reference_right`` (``[N]`` bool, the static model right per row): what ``drop_se`` is paired against; by
    default the trace's last exit, which is the static model unless the trace prunes tokens."""
    scores = exit_scores(rule, trace, exits)
    preds = np.stack([trace.exit_logits[l].argmax(-1) for l in exits], 1)
    per_layer = layer_flops(shape, trace.tokens)
    cum = np.cumsum(per_layer, 1)
    hf = head_flops(shape, trace.exit_logits[exits[-1]].shape[1])
    ref_right = preds[:, -1] == labels if reference_right is None else np.asarray(reference_right, dtype=bool)
    out = []
    for t in thresholds if thresholds is not None else candidates(rule, scores, len(exits)):
        idx = first_exit(rule, scores, t)
        rows = np.arange(len(idx))
        layer = np.asarray(exits)[idx]
        right = preds[rows, idx] == labels
        acc = float(right.mean())
        cost = float((cum[rows, layer - 1] + (idx + 1) * hf).mean()) / static_cost
        out.append(Point(float(t), acc, 100.0 * (static_accuracy - acc), cost, float(layer.mean()),
                         paired_se(ref_right, right)))
    return out


def paired_se(reference_right, right) -> float:
    """Standard error, in points, of the accuracy difference between two predictions of the same rows (``True``
    where each is right), paired per row: what a drop measured on those rows is known to."""
    diff = np.asarray(reference_right, dtype=np.float64) - np.asarray(right, dtype=np.float64)
    return 100.0 * float(np.sqrt(diff.var() / len(diff))) if len(diff) else 0.0


def drop_text(result: dict) -> str:
    """A recorded drop as printed: ``"0.44 +- 0.11"`` (the drop alone for a record made before ``drop_se`` was)."""
    return f"{result['drop']:.2f}" + (f" +- {result['drop_se']:.2f}" if "drop_se" in result else "")


def static_cost(shape, lengths: np.ndarray, num_labels: int) -> float:
    """Mean FLOPs of the static model over sentences of ``lengths`` tokens."""
    counts = np.repeat(np.asarray(lengths)[:, None], shape.num_layers, 1)
    return float(layer_flops(shape, counts).sum(1).mean()) + head_flops(shape, num_labels)


def fits(drop: float, drop_se: float, max_drop: float, margin_se: float = 0.0) -> bool:
    """Whether a drop measured to ``+- drop_se`` points is within ``max_drop`` with ``margin_se`` standard errors to
    spare (``drop + margin_se * drop_se <= max_drop``)."""
    return drop + margin_se * drop_se <= max_drop + 1e-9


def choose(points: list[Point], max_drop: float, margin_se: float = 0.0) -> tuple[Point, bool]:
    """The cheapest point that :func:`fits` ``max_drop`` (ties: the more accurate); ``(point, feasible)``.

    When none fits, the most accurate point (feasible False).
    """
    ok = [p for p in points if fits(p.drop, p.drop_se, max_drop, margin_se)]
    if ok:
        return min(ok, key=lambda p: (p.cost, -p.accuracy)), True
    return max(points, key=lambda p: (p.accuracy, -p.cost)), False


def all_rule_curves(trace, labels, exits, *, shape, static_accuracy, static_cost_value) -> dict[str, list[dict]]:
    """Validation curves of every rule, for reports and benchmarks."""
    return {rule: [p.to_dict() for p in exit_curve(rule, trace, labels, exits, shape=shape, static_accuracy=static_accuracy,
                                                   static_cost=static_cost_value)]
            for rule in RULES}
