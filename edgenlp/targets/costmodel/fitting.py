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
    embeddings: str | None = None  # the word table's precision (None: fp32); only such rows enter the fit

    def to_dict(self) -> dict:
        d = {"runtime": self.runtime, "precision": self.precision, "threads": self.threads, "seq_len": self.seq_len,
             "shape": self.shape, "components": self.components, "total_ms": self.total_ms, "num_labels": self.num_labels}  # fmt: skip
        if self.embeddings:
            d["embeddings"] = self.embeddings
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "Observation":
        return cls(str(d["runtime"]), str(d["precision"]), int(d["threads"]), int(d["seq_len"]), dict(d["shape"]),
                   {k: float(v) for k, v in d["components"].items()}, float(d["total_ms"]), int(d.get("num_labels", 2)),
                   d.get("embeddings") or None)  # fmt: skip

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
    Rows measured with a quantized word table (``embeddings`` set) are left
    out: they price the embedding schemes (:func:`embedding_ratios`).
    """
    groups: dict[tuple[str, str, int], list[Observation]] = {}
    for ob in observations:
        if ob.embeddings:
            continue
        groups.setdefault((ob.runtime, ob.precision, ob.threads), []).append(ob)
    fits = {}
    for key, obs in groups.items():
        _, precision, _ = key
        comp_fit: dict[str, dict[str, float]] = {}
        all_feats = [features(ob.encoder_shape(), seq_len=ob.seq_len, bits=precision, num_labels=ob.num_labels) for ob in obs]
        for comp, names in COMPONENT_FEATURES.items():
            X, y = [], []
            for ob, feats in zip(obs, all_feats):
                row = feats.get((comp, precision), {f: 0.0 for f in names})
                w = 1.0 / max(ob.total_ms, 1e-6)
                X.append([row[f] * w for f in names])
                y.append(ob.components.get(comp, 0.0) * w)
            coef = _nnls(np.asarray(X, dtype=float), np.asarray(y, dtype=float)) if X else np.zeros(len(names))
            comp_fit[comp] = {f: float(c) for f, c in zip(names, coef)}
        fits[key] = comp_fit
    return fits


def embedding_ratios(observations: Iterable[Observation]) -> dict[tuple[str, str], float]:
    """``{(runtime, scheme): ratio}``: the embedding component with the word table at ``scheme`` over the fp32 table's.

    Each row measured with a quantized table is paired with the fp32-table row
    of the same runtime, linear precision, threads, length and shape; the
    ratio is the median over pairs. Schemes without rows are absent.
    """
    obs = list(observations)
    plain = {(o.runtime, o.precision, o.threads, o.seq_len, repr(sorted(o.shape.items()))): o for o in obs if not o.embeddings}
    ratios: dict[tuple[str, str], list[float]] = {}
    for o in obs:
        if not o.embeddings:
            continue
        base = plain.get((o.runtime, o.precision, o.threads, o.seq_len, repr(sorted(o.shape.items()))))
        if base is None or base.components.get("embedding", 0.0) <= 0:
            continue
        ratios.setdefault((o.runtime, o.embeddings), []).append(o.components.get("embedding", 0.0) / base.components["embedding"])
    return {k: float(np.median(v)) for k, v in ratios.items()}


def _predict_total(fit: dict, ob: Observation) -> float:
    feats = features(ob.encoder_shape(), seq_len=ob.seq_len, bits=ob.precision, num_labels=ob.num_labels)
    return sum(sum(fit[comp][f] * v for f, v in row.items()) for (comp, _), row in feats.items())


def cross_validated_error(observations: Iterable[Observation]) -> dict[tuple[str, str, int], float]:
    """``{(runtime, precision, threads): mean |predicted - measured| / measured}`` of each total, leaving one shape out.

    Each shape's observations are predicted by a fit to the other shapes of
    the same group: the cost model's error on a shape it has not seen (what a
    candidate is). Groups with fewer than three shapes are absent.
    """
    groups: dict[tuple[str, str, int], list[Observation]] = {}
    for ob in observations:
        if not ob.embeddings:
            groups.setdefault((ob.runtime, ob.precision, ob.threads), []).append(ob)
    out = {}
    for key, obs in groups.items():
        shapes = sorted({repr(sorted(o.shape.items())) for o in obs})
        if len(shapes) < 3:
            continue
        errs = []
        for held in shapes:
            rest = [o for o in obs if repr(sorted(o.shape.items())) != held]
            fit = fit_coefficients(rest)[key]
            errs += [abs(_predict_total(fit, o) - o.total_ms) / o.total_ms for o in obs
                     if repr(sorted(o.shape.items())) == held and o.total_ms > 0]  # fmt: skip
        if errs:
            out[key] = float(np.mean(errs))
    return out
