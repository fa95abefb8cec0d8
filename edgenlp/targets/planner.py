"""Pick the compression recipe with the best predicted accuracy that fits a device's budgets.

The search space (:class:`SearchSpace`) crosses pruning (method × sparsity),
weight precision (fp32, int8, int4, or per layer), the embedding scheme and
vocabulary trimming. Each :class:`Candidate` is turned into the encoder shape
it would have (:func:`candidate_shape`), priced by the
:class:`~edgenlp.targets.costmodel.CostModel` and scored by an
:class:`AccuracyModel`. :func:`plan` returns the most accurate candidate that
meets every budget, and every candidate it considered (for the Pareto plot);
when none fits it raises :class:`BudgetError` naming the closest achievable
point for each budget.

``edgenlp compress`` builds the chosen candidate for real, verifies it, and
re-plans with the failed candidate in ``SearchSpace.exclude`` when
verification fails::

    target = load_target("pixel-7")
    p = plan(target, target.budgets.override(latency_ms=15), cost_model=CostModel.for_target(target),
             accuracy_model=AccuracyModel(baseline=91.3), shape=model.shape, num_labels=2)
    p.chosen.candidate, p.chosen.prediction.latency_ms, p.chosen.accuracy
"""

from __future__ import annotations

import dataclasses
import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from edgenlp.config import Config
from edgenlp.errors import EdgeNLPError
from edgenlp.models.encoder import EncoderShape
from edgenlp.targets.costmodel import MINILM_L6, MIXED, Prediction, layer_bits, resolve_mixed
from edgenlp.targets.target import PRECISIONS, Budgets, Target

log = logging.getLogger(__name__)

PRUNE_METHODS = ("cofi", "fast", "importance")
EMBEDDINGS = (None, "int8", "int4")
TRIM_PRIOR = 0.5  # fraction of the vocabulary a task keeps when trimmed, when the task's count is not given (SST-2 train: ~0.45)


class BudgetError(EdgeNLPError):
    """No candidate in the search space meets every budget; the message states the closest achievable point per budget."""


@dataclass(frozen=True)
class Candidate(Config):
    """One point of the compression space.

    ``prune_method`` None means no pruning (``sparsity`` must be 0);
    ``sparsity`` is the fraction of the encoder's linear parameters removed;
    ``bits`` is ``"fp32"|"int8"|"int4"``, ``"mixed"`` (int8 in the first and
    last layer, int4 in between) or one of the three per encoder layer
    (:func:`resolve_bits`; :func:`quantize_layer_bits` gives the
    ``QuantizeConfig.layer_bits`` it means);
    ``embeddings`` None keeps the word embeddings fp32; ``trim_vocab`` drops
    vocabulary rows the task never uses.
    """

    prune_method: str | None = None
    sparsity: float = 0.0
    bits: str | tuple[str, ...] = "fp32"
    embeddings: str | None = None
    trim_vocab: bool = False

    def __post_init__(self) -> None:
        if self.prune_method is not None and self.prune_method not in PRUNE_METHODS:
            raise ValueError(f"prune_method must be None or one of {PRUNE_METHODS}, got {self.prune_method!r}")
        if not isinstance(self.sparsity, (int, float)) or not 0.0 <= self.sparsity < 1.0:
            raise ValueError(f"sparsity must be in [0, 1), got {self.sparsity!r}")
        if (self.prune_method is None) != (self.sparsity == 0):
            raise ValueError(f"sparsity {self.sparsity} needs a prune_method, and a prune_method needs sparsity > 0")
        if isinstance(self.bits, str):
            if self.bits not in PRECISIONS + (MIXED,):
                raise ValueError(f"bits must be one of {PRECISIONS + (MIXED,)} or a per-layer tuple, got {self.bits!r}")
        else:
            object.__setattr__(self, "bits", tuple(self.bits))
            if not self.bits or any(b not in PRECISIONS for b in self.bits):
                raise ValueError(f"per-layer bits must each be one of {PRECISIONS}, got {self.bits!r}")
        if self.embeddings not in EMBEDDINGS:
            raise ValueError(f"embeddings must be one of {EMBEDDINGS}, got {self.embeddings!r}")
        if not isinstance(self.trim_vocab, bool):
            raise ValueError(f"trim_vocab must be a bool, got {self.trim_vocab!r}")

    @property
    def label(self) -> str:
        prune = f"{self.prune_method} {self.sparsity:.0%}" if self.prune_method else "unpruned"
        bits = self.bits if isinstance(self.bits, str) else "/".join(self.bits)
        emb = f", emb {self.embeddings}" if self.embeddings else ""
        return f"{prune}, {bits}{emb}" + (", trimmed vocab" if self.trim_vocab else "")


@dataclass(frozen=True)
class SearchSpace(Config):
    """Which candidates :func:`plan` considers. ``bits`` entries may be ``"mixed"`` (int8 at both ends, int4 inside)."""

    methods: tuple[str, ...] = PRUNE_METHODS
    sparsities: tuple[float, ...] = (0.0, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8)
    bits: tuple[str, ...] = ("fp32", "int8", "int4", MIXED)
    embeddings: tuple[str | None, ...] = EMBEDDINGS
    trim_vocab: tuple[bool, ...] = (False, True)
    trimmed_vocab_size: int | None = None  # rows kept by trimming (from the task's data); None: TRIM_PRIOR of the vocabulary
    exclude: tuple[Candidate, ...] = ()

    def __post_init__(self) -> None:
        bad = [m for m in self.methods if m not in PRUNE_METHODS]
        if bad:
            raise ValueError(f"methods must be among {PRUNE_METHODS}, got {bad}")
        if any(not 0.0 <= s < 1.0 for s in self.sparsities):
            raise ValueError(f"sparsities must be in [0, 1), got {self.sparsities}")
        bad = [b for b in self.bits if b not in PRECISIONS + (MIXED,)]
        if bad:
            raise ValueError(f"bits must be among {PRECISIONS + (MIXED,)}, got {bad}")
        bad = [e for e in self.embeddings if e not in EMBEDDINGS]
        if bad:
            raise ValueError(f"embeddings must be among {EMBEDDINGS}, got {bad}")
        if self.trimmed_vocab_size is not None and self.trimmed_vocab_size < 1:
            raise ValueError(f"trimmed_vocab_size must be positive, got {self.trimmed_vocab_size}")
        object.__setattr__(self, "exclude", tuple(Candidate.from_dict(c) if isinstance(c, dict) else c for c in self.exclude))

    def candidates(self, num_layers: int = 0) -> list[Candidate]:
        prunes = [(None, 0.0)] if 0.0 in self.sparsities or not self.sparsities else []
        prunes += [(m, s) for m in self.methods for s in self.sparsities if s > 0]
        out = []
        for (m, s) in prunes:
            for bits in self.bits:
                for e in self.embeddings:
                    for t in self.trim_vocab:
                        c = Candidate(prune_method=m, sparsity=s, bits=bits, embeddings=e, trim_vocab=t)
                        if c not in self.exclude and c not in out:
                            out.append(c)
        return out


def candidate_shape(base: EncoderShape, candidate: Candidate, *, trimmed_vocab_size: int | None = None) -> EncoderShape:
    """The nominal shape of ``candidate``: every layer keeps ``1 - sparsity`` of its heads and FFN width.

    Real pruning removes unevenly (that is its point); the cost model is linear
    in per-layer counts, so the nominal shape prices the same totals.
    """
    keep = 1.0 - candidate.sparsity
    heads = tuple(int(round(h * keep)) for h in base.heads)
    ffn = tuple(int(round(f * keep)) for f in base.ffn)
    vocab = base.vocab_size
    if candidate.trim_vocab:
        vocab = min(vocab, trimmed_vocab_size or max(1, int(round(base.vocab_size * TRIM_PRIOR))))
    return dataclasses.replace(base, heads=heads, ffn=ffn, vocab_size=vocab)


def resolve_bits(bits: str | tuple[str, ...], num_layers: int) -> str | tuple[str, ...]:
    """``"mixed"`` -> int8 in the first and last layer, int4 in between; anything else unchanged."""
    return resolve_mixed(bits, num_layers)


def quantize_layer_bits(candidate: Candidate | dict, num_layers: int) -> tuple[tuple[str, int], ...]:
    """``QuantizeConfig.layer_bits`` for a candidate: ``(linear module name, 32|8|4)`` for every linear.

    Encoder layer ``i``'s linears (the family table's canonical parts) take that
    layer's precision; the pooler and classifier take the most common one.
    """
    from edgenlp.models.families import LAYER_LINEARS
    from edgenlp.targets.costmodel import dominant

    c = Candidate.from_dict(candidate) if isinstance(candidate, dict) else candidate
    per = layer_bits(_blank_shape(num_layers), resolve_bits(c.bits, num_layers))
    width = {"fp32": 32, "int8": 8, "int4": 4}
    out = [(f"layers.{i}.{part}", width[b]) for i, b in enumerate(per) for part in LAYER_LINEARS]
    head = width[dominant(per)]
    return tuple(out + [("pooler", head), ("classifier", head)])


def _blank_shape(num_layers: int) -> EncoderShape:
    return EncoderShape(family="bert", vocab_size=1, hidden=1, heads=(0,) * num_layers, head_dim=1, ffn=(0,) * num_layers)


def default_space(*, prune_methods: tuple[str, ...] = PRUNE_METHODS, schemes: tuple[str, ...] = ("fp32", "int8", "int4", MIXED),
                  sparsities: tuple[float, ...] | None = None, embeddings: tuple[str | None, ...] = EMBEDDINGS,
                  trim_vocab: tuple[bool, ...] = (False, True)) -> list[Candidate]:  # fmt: skip
    """The candidates of a :class:`SearchSpace` with these pruning methods and weight schemes."""
    kw = {} if sparsities is None else {"sparsities": tuple(sparsities)}
    return SearchSpace(methods=tuple(prune_methods), bits=tuple(schemes), embeddings=tuple(embeddings), trim_vocab=tuple(trim_vocab),
                       **kw).candidates()  # fmt: skip


# --------------------------------------------------------------------------- accuracy prior

DEFAULT_PRIOR: dict[str, Any] = {
    "about": (
        "Prior: predicted dev-accuracy drop (points) of MiniLM-L6 classifiers vs the uncompressed fine-tuned model. "
        "fast and importance: measured, mean of SST-2 and banking77 (tools/bench/results/prune.md, 2026-11-24; "
        "importance cuts attention and FFN by the same fraction). cofi: scaled from its paper (Xia et al. 2022) to this "
        "smaller model (estimate). Quantization: measured, mean of SST-2 and banking77 through the ExecuTorch bundle "
        "(tools/bench/results/quantize.md; drops in points, SST-2/banking77: int8 linears 0.11/0.30, int4 group-32 "
        "-0.23/0.40, an int8 table added to int8 linears 0.23/-0.10, an int4 table added to int4 linears -0.34/0.60, "
        "trimming added 0.34/0.00). Fewer bits are never predicted more accurate: int4's mean (0.09) is within one seed's "
        "noise of int8's (0.21), so int4 takes int8's drop. "
        "Drops add. Refresh with measured benchmark rows (AccuracyModel.with_measured)."
    ),
    "prune": {  # method -> [[sparsity, drop]], linear in between, extended by the last slope
        "cofi": [[0.0, 0.0], [0.3, 0.4], [0.5, 1.2], [0.7, 3.5], [0.8, 6.0]],
        "fast": [[0.0, 0.0], [0.3, 0.82], [0.5, 2.07], [0.7, 11.6], [0.9, 36.7]],
        "importance": [[0.0, 0.0], [0.3, 1.66], [0.5, 4.2], [0.7, 9.35], [0.9, 29.3]],
    },
    "bits": {"fp32": 0.0, "int8": 0.2, "int4": 0.2},  # per layer, averaged over layers
    "embeddings": {"none": 0.0, "int8": 0.07, "int4": 0.13},
    "trim_vocab": 0.17,  # dev tokens unseen in training become [UNK]
}


class AccuracyModel:
    """Predicted dev accuracy of a candidate: ``baseline - drop``, the drop from a refreshable prior table.

    ``baseline`` is the uncompressed fine-tuned model's dev accuracy (%); left
    at 100 the predictions read as "100 minus the drop".
    """

    def __init__(self, table: dict | None = None, *, baseline: float = 100.0) -> None:
        self.table = json.loads(json.dumps(table or DEFAULT_PRIOR))
        self.baseline = float(baseline)
        for method, pts in self.table["prune"].items():
            arr = np.asarray(pts, dtype=float)
            if arr.ndim != 2 or arr.shape[1] != 2 or np.any(np.diff(arr[:, 0]) <= 0):
                raise ValueError(f"accuracy table: prune.{method} must be [[sparsity, drop], ...] with increasing sparsity")

    @classmethod
    def from_json(cls, path: str | Path, *, baseline: float = 100.0) -> "AccuracyModel":
        try:
            table = json.loads(Path(path).read_text())
        except (OSError, ValueError) as exc:
            raise EdgeNLPError(f"{path}: cannot read accuracy table ({exc})") from None
        merged = {**DEFAULT_PRIOR, **table}
        try:
            return cls(merged, baseline=baseline)
        except (ValueError, KeyError, TypeError) as exc:
            raise EdgeNLPError(f"{path}: {exc}") from None

    def to_dict(self) -> dict:
        return {**self.table, "baseline": self.baseline}

    def with_measured(self, rows: list[dict]) -> "AccuracyModel":
        """A copy where measured drops replace the prior: rows ``{"prune_method", "sparsity", "drop"}`` or ``{"bits", "drop"}``."""
        table = json.loads(json.dumps(self.table))
        for r in rows:
            if "prune_method" in r:
                pts = {round(s, 6): d for s, d in table["prune"].setdefault(r["prune_method"], [[0.0, 0.0]])}
                pts[round(float(r["sparsity"]), 6)] = float(r["drop"])
                table["prune"][r["prune_method"]] = [[s, pts[s]] for s in sorted(pts)]
            elif "bits" in r:
                table["bits"][r["bits"]] = float(r["drop"])
            elif "embeddings" in r:
                table["embeddings"][r["embeddings"] or "none"] = float(r["drop"])
        return AccuracyModel(table, baseline=self.baseline)

    def prune_drop(self, method: str | None, sparsity: float) -> float:
        if method is None or sparsity <= 0:
            return 0.0
        pts = np.asarray(self.table["prune"][method], dtype=float)
        xs, ys = pts[:, 0], pts[:, 1]
        if sparsity <= xs[-1]:
            return float(np.interp(sparsity, xs, ys))
        slope = (ys[-1] - ys[-2]) / (xs[-1] - xs[-2]) if len(xs) > 1 else 0.0
        return float(ys[-1] + slope * (sparsity - xs[-1]))

    def drop(self, candidate: Candidate, *, num_layers: int = 6) -> float:
        per = layer_bits(_blank_shape(num_layers), resolve_bits(candidate.bits, num_layers))
        d = self.prune_drop(candidate.prune_method, candidate.sparsity)
        d += sum(self.table["bits"][b] for b in per) / len(per)
        d += self.table["embeddings"][candidate.embeddings or "none"]
        d += self.table["trim_vocab"] if candidate.trim_vocab else 0.0
        return d

    def predict(self, candidate: Candidate, *, num_layers: int = 6) -> float:
        """Predicted dev accuracy (%)."""
        return self.baseline - self.drop(candidate, num_layers=num_layers)


# --------------------------------------------------------------------------- the plan


@dataclass(frozen=True)
class Considered:
    """A candidate with its predicted cost, accuracy and accuracy drop, and the budgets it breaks (empty: it fits).

    Unpacks as ``(candidate, prediction, predicted_drop, fits)``.
    """

    candidate: Candidate
    prediction: Prediction
    accuracy: float
    drop: float
    violations: tuple[str, ...] = ()

    @property
    def fits(self) -> bool:
        return not self.violations

    def __iter__(self):
        return iter((self.candidate, self.prediction, self.drop, self.fits))

    def to_dict(self) -> dict:
        return {"candidate": self.candidate.to_dict(), "label": self.candidate.label, "prediction": self.prediction.to_dict(),
                "predicted_accuracy": round(self.accuracy, 3), "predicted_drop": round(self.drop, 3),
                "violations": list(self.violations)}  # fmt: skip


@dataclass(frozen=True)
class Plan:
    """The chosen candidate (``chosen``; its predictions in ``chosen_point``) and every candidate considered."""

    chosen: Candidate
    chosen_point: Considered
    considered: tuple[Considered, ...]
    target: str
    budgets: Budgets
    shape: EncoderShape = field(compare=False)
    trimmed_vocab_size: int | None = None

    @property
    def estimated(self) -> bool:
        """Whether the chosen candidate's cost is a transfer or an assumption rather than a measured table."""
        return self.chosen_point.prediction.estimated

    @property
    def chosen_shape(self) -> EncoderShape:
        return candidate_shape(self.shape, self.chosen, trimmed_vocab_size=self.trimmed_vocab_size)

    def pareto(self) -> list[Considered]:
        """Candidates no other beats on both predicted latency and accuracy."""
        pts = sorted(self.considered, key=lambda c: (c.prediction.latency_ms, -c.accuracy))
        front, best = [], -float("inf")
        for c in pts:
            if c.accuracy > best:
                front.append(c)
                best = c.accuracy
        return front

    def to_dict(self) -> dict:
        return {"target": self.target, "budgets": self.budgets.to_dict(), "chosen": self.chosen.to_dict(),
                "chosen_point": self.chosen_point.to_dict(), "estimated": self.estimated,
                "considered": [c.to_dict() for c in self.considered]}  # fmt: skip


def _violations(pred: Prediction, budgets: Budgets, drop: float, max_drop: float | None) -> tuple[str, ...]:
    out = []
    if budgets.latency_ms is not None and pred.latency_ms > budgets.latency_ms:
        out.append("latency")
    if budgets.memory_mb is not None and pred.peak_memory_mb > budgets.memory_mb:
        out.append("memory")
    if budgets.size_mb is not None and pred.size_mb > budgets.size_mb:
        out.append("size")
    if max_drop is not None and drop > max_drop:
        out.append("accuracy")
    return tuple(out)


def plan(target: Target, budgets: Budgets, *, cost_model=None, accuracy_model: AccuracyModel | None = None,
         space: SearchSpace | list[Candidate] | None = None, shape: EncoderShape | None = None, num_labels: int = 2,
         max_drop: float | None = None, task: str | None = None) -> Plan:  # fmt: skip
    """The candidate with the best predicted accuracy that meets every budget (ties: the fastest).

    ``cost_model`` defaults to :meth:`CostModel.for_target`, ``accuracy_model``
    to the prior (:class:`AccuracyModel`); ``space`` is a :class:`SearchSpace` or
    a list of candidates (default: the full space); ``shape`` is the
    uncompressed model's shape (default MiniLM-L6); ``max_drop`` (points) also
    rules out candidates predicted to lose more; ``task`` is recorded in the log.
    Raises :class:`BudgetError` when nothing fits.
    """
    from edgenlp.targets.costmodel import CostModel

    cost_model = cost_model if cost_model is not None else CostModel.for_target(target)
    accuracy_model = accuracy_model if accuracy_model is not None else AccuracyModel()
    shape = shape or MINILM_L6
    if isinstance(space, SearchSpace) or space is None:
        space = space or SearchSpace()
        candidates, trimmed = space.candidates(shape.num_layers), space.trimmed_vocab_size
    else:
        candidates, trimmed = list(space), None
    if budgets.threads > target.cores:
        raise EdgeNLPError(f"{target.name} has {target.cores} cores; threads {budgets.threads} is out of range")
    if budgets.seq_len > shape.max_positions:
        raise EdgeNLPError(f"seq_len {budgets.seq_len} exceeds the model's {shape.max_positions} positions")
    considered = []
    for c in candidates:
        s = candidate_shape(shape, c, trimmed_vocab_size=trimmed)
        bits = resolve_bits(c.bits, shape.num_layers)
        pred = cost_model.predict(s, bits=bits, embeddings=c.embeddings, seq_len=budgets.seq_len, threads=budgets.threads,
                                  num_labels=num_labels)  # fmt: skip
        drop = accuracy_model.drop(c, num_layers=shape.num_layers)
        considered.append(Considered(c, pred, accuracy_model.baseline - drop, drop, _violations(pred, budgets, drop, max_drop)))
    if not considered:
        raise BudgetError(f"the search space for {target.name} is empty (every candidate excluded)")
    fitting = [c for c in considered if c.fits]
    if not fitting:
        raise BudgetError(_closest_message(target, budgets, considered, accuracy_model, max_drop))
    chosen = min(fitting, key=lambda c: (-round(c.accuracy, 6), c.prediction.latency_ms, c.prediction.size_mb))
    log.info("plan for %s%s: %s (predicted %.2f ms, %.1f MB, %.2f MB, drop %.2f)", target.name, f" / {task}" if task else "",
             chosen.candidate.label, chosen.prediction.latency_ms, chosen.prediction.peak_memory_mb, chosen.prediction.size_mb,
             chosen.drop)  # fmt: skip
    return Plan(chosen.candidate, chosen, tuple(considered), target.name, budgets, shape, trimmed)


def _tradeoff(budgets: Budgets, considered: list[Considered]) -> list[str]:
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


def _closest_message(target: Target, budgets: Budgets, considered: list[Considered], acc: AccuracyModel,
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
        parts += _tradeoff(budgets, considered)
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
