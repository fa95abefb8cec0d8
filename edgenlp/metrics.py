"""Classification metrics computed from predicted and true label indices."""

from __future__ import annotations

from typing import Sequence

import numpy as np


def accuracy(pred: Sequence[int], gold: Sequence[int]) -> float:
    pred, gold = np.asarray(pred), np.asarray(gold)
    if pred.shape != gold.shape or pred.size == 0:
        raise ValueError(f"accuracy needs two equal, non-empty sequences, got {pred.shape} and {gold.shape}")
    return float((pred == gold).mean())


def macro_f1(pred: Sequence[int], gold: Sequence[int]) -> float:
    """Unweighted mean of per-class F1 over the classes present in ``gold`` or ``pred``."""
    pred, gold = np.asarray(pred), np.asarray(gold)
    classes = np.union1d(pred, gold)
    scores = []
    for c in classes:
        tp = np.sum((pred == c) & (gold == c))
        fp = np.sum((pred == c) & (gold != c))
        fn = np.sum((pred != c) & (gold == c))
        denom = 2 * tp + fp + fn
        scores.append(0.0 if denom == 0 else 2 * tp / denom)
    return float(np.mean(scores))


def classification_report(pred: Sequence[int], gold: Sequence[int], *, num_labels: int) -> dict:
    out = {"accuracy": accuracy(pred, gold), "n": int(len(gold))}
    if num_labels > 2:
        out["macro_f1"] = macro_f1(pred, gold)
    return out
