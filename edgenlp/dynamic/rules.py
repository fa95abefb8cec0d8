"""The decisions a dynamic model takes after each segment, as plain numpy (the reference for every runtime).

Two decisions, both on a single sentence:

- **exit** (:func:`exit_fires`): after a segment that ends at an exit, does the
  exit rule stop here? ``maxprob``: the largest softmax probability is at least
  the threshold; ``entropy``: the softmax entropy divided by ``log(num_labels)``
  is at most the threshold; ``patience``: the last ``k`` exits (this one
  included) predicted the same label (argmax, the lowest index on ties), with
  ``k`` the threshold. Probabilities are computed in IEEE double from the
  float32 logits.
- **tokens** (:func:`keep_tokens`): after a segment whose last layer may drop
  tokens, which of the current tokens go on? The segment returns each token's
  importance: the attention it receives, averaged over heads and summed over
  the real (unpadded, kept) queries, i.e. the mean over queries times their
  number, so importances average 1 over a sentence. ``ltp``: keep the tokens
  whose importance is at least the layer's threshold; ``keep``: keep the
  ``max(min(n, 2), ceil(R * n))`` most important of the ``n`` current tokens
  (``R * n`` in double; a stable sort on descending importance, so ties keep
  the earlier token). In both, the first token (``[CLS]``) and the last
  (``[SEP]``) are always kept, and kept tokens stay in their original order.

The native runtime implements the same rules (see :mod:`edgenlp.bundle`, key ``dynamic``).
"""

from __future__ import annotations

import math

import numpy as np

RULES = ("maxprob", "entropy", "patience")
TOKEN_MODES = ("none", "ltp", "keep")


def threshold_range(rule: str, num_exits: int | None = None) -> tuple[float, float]:
    """The closed range a threshold of ``rule`` must lie in (patience: 1 to the number of exits)."""
    if rule == "patience":
        return (1, num_exits if num_exits is not None else math.inf)
    if rule in ("maxprob", "entropy"):
        return (0.0, 1.0)
    raise ValueError(f"rule must be one of {', '.join(RULES)}, got {rule!r}")


def check_threshold(rule: str, value, *, num_exits: int | None = None, name: str = "threshold") -> float:
    """``value`` as the rule takes it; raises ValueError naming the range when it is outside."""
    lo, hi = threshold_range(rule, num_exits)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        raise ValueError(f"{name} must be a number, got {value!r}")
    if rule == "patience":
        if float(value) != int(value) or not lo <= value <= hi:
            hi_s = "the number of exits" if hi == math.inf else str(int(hi))
            raise ValueError(f"{name} for rule patience must be an integer from 1 to {hi_s}, got {value!r}")
        return int(value)
    if not lo <= value <= hi:
        what = "the max probability" if rule == "maxprob" else "the normalized entropy"
        raise ValueError(f"{name} for rule {rule} ({what}) must be in [0, 1], got {value!r}")
    return float(value)


def check_keep_ratio(value, *, name: str = "keep ratio") -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 < value <= 1.0:
        raise ValueError(f"{name} must be in (0, 1], got {value!r}")
    return float(value)


def probabilities(logits) -> np.ndarray:
    z = np.asarray(logits, dtype=np.float64).reshape(-1)
    e = np.exp(z - z.max())
    return e / e.sum()


def confidence(rule: str, logits) -> float:
    """The score ``rule`` compares with its threshold: max probability or normalized entropy (not for patience)."""
    p = probabilities(logits)
    if rule == "maxprob":
        return float(p.max())
    if rule == "entropy":
        nz = p[p > 0]
        return float(-(nz * np.log(nz)).sum() / math.log(len(p))) if len(p) > 1 else 0.0
    raise ValueError(f"no confidence score for rule {rule!r}")


class ExitState:
    """The exit rule's state over one sentence (patience counts agreeing exits)."""

    def __init__(self, rule: str, threshold: float) -> None:
        self.rule, self.threshold = rule, threshold
        self.previous: int | None = None
        self.streak = 0

    def fires(self, logits) -> bool:
        """Whether the rule stops at this exit (call once per exit, in order)."""
        if self.rule == "patience":
            label = int(np.argmax(np.asarray(logits).reshape(-1)))
            self.streak = self.streak + 1 if label == self.previous else 1
            self.previous = label
            return self.streak >= self.threshold
        score = confidence(self.rule, logits)
        return score >= self.threshold if self.rule == "maxprob" else score <= self.threshold


def exit_fires(rule: str, threshold: float, exit_logits: list) -> int | None:
    """Index into ``exit_logits`` (one per exit, in order) of the first exit the rule stops at, or None."""
    state = ExitState(rule, threshold)
    for i, logits in enumerate(exit_logits):
        if state.fires(logits):
            return i
    return None


def keep_count(n: int, ratio: float) -> int:
    """How many of ``n`` tokens a keep ratio keeps (never fewer than [CLS] and [SEP])."""
    return max(min(n, 2), min(n, math.ceil(float(ratio) * n)))


def keep_tokens(importance, *, mode: str, threshold: float | None = None, ratio: float | None = None) -> np.ndarray:
    """Ascending indices of the tokens kept among ``len(importance)`` current tokens (first and last always)."""
    imp = np.asarray(importance, dtype=np.float32).reshape(-1)
    n = imp.shape[0]
    if n <= 2 or mode == "none":
        return np.arange(n)
    if mode == "ltp":
        keep = imp >= np.float32(threshold)
    elif mode == "keep":
        k = keep_count(n, ratio)
        score = imp.astype(np.float64)
        score[0] = score[n - 1] = np.inf
        order = np.argsort(-score, kind="stable")
        keep = np.zeros(n, dtype=bool)
        keep[order[:k]] = True
    else:
        raise ValueError(f"token mode must be one of {', '.join(TOKEN_MODES)}, got {mode!r}")
    keep[0] = keep[n - 1] = True
    return np.flatnonzero(keep)
