"""Observations (profiled per-component latencies) and the non-negative least-squares fit of the cost model's coefficients."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

import numpy as np

from edgenlp.models.encoder import EncoderShape
from edgenlp.targets.costmodel.features import COMPONENT_FEATURES, features


@dataclass(frozen=True)
class Observation:
    """One profiled (model, seq_len, threads) run: per-component and total latency, ms."""

    runtime: str
    precision: str
    threads: int
    seq_len: int
    shape: dict
    components: dict[str, float]  # component -> ms, including runtime_overhead
    total_ms: float
    num_labels: int = 2

    def to_dict(self) -> dict:
        return {"runtime": self.runtime, "precision": self.precision, "threads": self.threads, "seq_len": self.seq_len,
                "shape": self.shape, "components": self.components, "total_ms": self.total_ms, "num_labels": self.num_labels}  # fmt: skip

    @classmethod
    def from_dict(cls, d: dict) -> "Observation":
        return cls(str(d["runtime"]), str(d["precision"]), int(d["threads"]), int(d["seq_len"]), dict(d["shape"]),
                   {k: float(v) for k, v in d["components"].items()}, float(d["total_ms"]), int(d.get("num_labels", 2)))  # fmt: skip

    def encoder_shape(self) -> EncoderShape:
        return EncoderShape.from_dict(self.shape)

    @classmethod
    def from_profile(cls, doc: dict, *, runtime_key: str, runtime: str, precision: str, model_shape: EncoderShape,
                     statistic: str = "min") -> "Observation":  # fmt: skip
        """From a profile document (:func:`edgenlp.profile.api.build_document`); ``runtime_key`` is its runtime column.

        ``statistic="min"`` (default) takes the fastest plain end-to-end run as
        the total — on a shared machine the least disturbed one — and scales the
        components (and the unattributed overhead) to add up to it;
        ``"median"`` keeps the median end-to-end run.
        """
        comps = {c["name"]: float(c["latency_ms"][runtime_key]) for c in doc["components"]}
        comps["runtime_overhead"] = max(0.0, float(doc["total"]["unattributed_ms"][runtime_key]))
        if statistic == "min":
            total = float(doc["total"]["latency_min_ms"][runtime_key])
            parts = sum(comps.values())
            comps = {k: v * total / parts for k, v in comps.items()} if parts > 0 else comps
        elif statistic == "median":
            total = float(doc["total"]["latency_ms"][runtime_key])
        else:
            raise ValueError(f"statistic must be 'min' or 'median', got {statistic!r}")
        return cls(runtime, precision, int(doc["threads"]), int(doc["seq_len"]), model_shape.to_dict(), comps, total,
                   int(doc["shape"].get("num_labels", 2)))  # fmt: skip


def _nnls(X: np.ndarray, y: np.ndarray) -> np.ndarray:
    from scipy.optimize import nnls

    scale = np.maximum(np.abs(X).max(axis=0), 1e-30)
    coef, _ = nnls(X / scale, y, maxiter=50 * X.shape[1])
    return coef / scale


def fit_coefficients(observations: Iterable[Observation]) -> dict[tuple[str, str, int], dict[str, dict[str, float]]]:
    """``{(runtime, precision, threads): {component: {feature: coefficient (ms per unit)}}}``.

    Rows are weighted by 1/total latency so every model's relative error counts alike.
    """
    groups: dict[tuple[str, str, int], list[Observation]] = {}
    for ob in observations:
        groups.setdefault((ob.runtime, ob.precision, ob.threads), []).append(ob)
    fits = {}
    for key, obs in groups.items():
        _, precision, _ = key
        comp_fit: dict[str, dict[str, float]] = {}
        for comp, names in COMPONENT_FEATURES.items():
            X, y = [], []
            for ob in obs:
                feats = features(ob.encoder_shape(), seq_len=ob.seq_len, bits=precision, num_labels=ob.num_labels)
                row = feats.get((comp, precision), {f: 0.0 for f in names})
                w = 1.0 / max(ob.total_ms, 1e-6)
                X.append([row[f] * w for f in names])
                y.append(ob.components.get(comp, 0.0) * w)
            coef = _nnls(np.asarray(X, dtype=float), np.asarray(y, dtype=float)) if X else np.zeros(len(names))
            comp_fit[comp] = {f: float(c) for f, c in zip(names, coef)}
        fits[key] = comp_fit
    return fits
