"""The planner's accuracy prior: measured drops only, each row naming the results file it comes from.

``targets/accuracy-prior.json`` (built by ``tools/bench/accuracy_prior.py``,
never by hand) holds one row per measured point:

* ``prune``: a method at a target sparsity, at the budget it was measured at
  (the prune config knobs that set how much data and training it spent), with
  the drop per task and their mean;
* ``bits``, ``embeddings``, ``trim_vocab``: one quantization variant against
  another, through the ExecuTorch bundle;
* ``block_sparsity``: ``sparsify`` (block sparsity under distillation) at a
  fraction of zero blocks, at the budget it was measured at, against the same
  precision dense.

:class:`AccuracyModel` composes a candidate's drop from those rows (drops
add; per layer fewer bits never predict a smaller drop than more bits) and
says how it got there (:class:`PriorPoint`): ``measured``, ``interpolated``
between two measured sparsities, ``extrapolated`` beyond them, or
``unmeasured`` (no row: the planner does not offer the candidate). Given the
budgets ``compress`` spends per method (``budgets``), only rows measured at
exactly those budgets count. Given a ``task`` the prior measured (a built-in
benchmark task), each row that holds that task's own drop predicts with it
instead of the mean over tasks (``drop_mean`` keeps the mean)::

    acc = AccuracyModel(baseline=91.3, budgets={"fast": {"samples": 1024, "max_seq_len": 64,
                                                         "epochs": 0.0, "finetune_epochs": 0.0}})
    acc.sparsities("fast")            # (0.3, 0.5, 0.7, 0.9)
    acc.explain(candidate).basis      # "measured"
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from edgenlp.errors import EdgeNLPError
from edgenlp.targets.target import PRECISIONS, targets_dir

log = logging.getLogger(__name__)

PRIOR_SCHEMA = "edgenlp.accuracy-prior/1"
SPARSIFY = "sparsify"  # the ``budgets`` key of the block-sparsity rows' budget
BASES = ("measured", "interpolated", "extrapolated", "unmeasured")  # from best to worst
EMB_ORDER = ("int8", "int4")  # word-table schemes from more to fewer bits


def prior_path() -> Path:
    """The shipped prior: ``targets/accuracy-prior.json``."""
    return targets_dir() / "accuracy-prior.json"


def load_prior(path: str | Path | None = None) -> dict:
    path = Path(path) if path else prior_path()
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise EdgeNLPError(f"{path}: cannot read the accuracy prior ({exc})") from None
    if not isinstance(doc, dict) or doc.get("schema") != PRIOR_SCHEMA:
        raise EdgeNLPError(f"{path}: not an edgenlp accuracy prior (schema {PRIOR_SCHEMA!r} expected)")
    return doc


@dataclass(frozen=True)
class PriorPoint:
    """A predicted drop (points), how it was obtained (:data:`BASES`) and the results files it rests on."""

    drop: float
    basis: str
    sources: tuple[str, ...] = ()
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"drop": round(self.drop, 4), "basis": self.basis, "sources": list(self.sources), "note": self.note}


def _worst(*bases: str) -> str:
    return max(bases, key=BASES.index)


class AccuracyModel:
    """Predicted dev accuracy of a candidate: ``baseline - drop``, the drop composed from the prior's measured rows.

    ``table`` is a prior document (default: :func:`load_prior`). ``budgets``
    maps a pruning method to the budget ``compress`` spends on it; only rows
    measured at exactly that budget count, and a method absent from
    ``budgets`` has none. Without ``budgets``, each method uses the budget it
    has the most rows at (the first such in the file on a tie), and says so
    in :meth:`budget_of`. ``baseline`` is the uncompressed fine-tuned model's
    dev accuracy (%); left at 100 the predictions read as "100 minus the drop".
    ``task``: the task being planned, by the name the prior's rows measure it
    under (only a built-in task's data is the data they measured: see
    :attr:`edgenlp.data.tasks.TaskData.builtin`). A row measured on it
    predicts that task's own drop; a row measured on other tasks only, and
    every row for a task the prior never measured, their mean.
    """

    def __init__(self, table: dict | None = None, *, baseline: float = 100.0,
                 budgets: Mapping[str, Mapping[str, Any]] | None = None, task: str | None = None) -> None:  # fmt: skip
        self.table = json.loads(json.dumps(table if table is not None else load_prior()))
        self.baseline = float(baseline)
        self.budgets = {m: dict(b) for m, b in budgets.items()} if budgets is not None else None
        self.task = task
        for kind in ("prune", "bits", "embeddings", "trim_vocab", "block_sparsity"):
            self.table.setdefault(kind, [])
            for r in self.table[kind]:
                _use_task_drop(r, task)
        for r in self.table["prune"]:
            if not {"method", "sparsity", "drop"} <= set(r) or not 0.0 < float(r["sparsity"]) < 1.0:
                raise ValueError(f"accuracy prior: prune row {r} needs method, a sparsity in (0, 1) and drop")
        self._prune = self._select_budgets()
        self._blocks = self._select_block_rows()
        self.measured_candidates: dict[str, dict] = {}  # candidate key -> {"drop", "source"}: whole candidates built and measured
        self._residuals_by_depth: dict[int, dict[tuple, list[float]]] = {}  # num_layers -> _residuals(num_layers)

    @staticmethod
    def candidate_key(candidate) -> str:
        """A candidate (a planner ``Candidate`` or its dict) as the key of :attr:`measured_candidates`."""
        return json.dumps(_candidate_dict(candidate), sort_keys=True)

    def with_measured_candidates(self, rows: list[dict]) -> "AccuracyModel":
        """A copy that predicts each candidate of ``rows`` (``{"candidate", "drop", "source"}``) by its own measured drop.

        Such a drop was measured on the whole candidate as ``compress`` built
        it (on a validation split of this task's training data), so it
        replaces the drop composed from the prior's parts; the latest row of a
        candidate wins.
        """
        out = AccuracyModel(self.table, baseline=self.baseline, budgets=self.budgets, task=self.task)
        out.measured_candidates = dict(self.measured_candidates)
        for r in rows:
            out.measured_candidates[self.candidate_key(r["candidate"])] = {"drop": float(r["drop"]),
                                                                         "source": str(r.get("source", "measured")),
                                                                         "candidate": _candidate_dict(r["candidate"])}
        return out

    def _residuals(self, num_layers: int) -> dict[tuple, list[float]]:
        """Per pruning (:func:`pruning_key`), the static measured candidates' measured - composed drops; worked out
        once per depth (mixed precision composes per layer). An exits candidate's drop holds the exits' loss too,
        which the composed drop leaves out, so it does not count."""
        if num_layers not in self._residuals_by_depth:
            out: dict[tuple, list[float]] = {}
            for m in self.measured_candidates.values():
                if "candidate" in m and not m["candidate"].get("exits"):
                    mc = _as_candidate(m["candidate"])
                    out.setdefault(pruning_key(mc), []).append(m["drop"] - self._composed(mc, num_layers=num_layers).drop)
            self._residuals_by_depth[num_layers] = out
        return self._residuals_by_depth[num_layers]

    # ---- rows

    def _select_budgets(self) -> dict[str, list[dict]]:
        by_method: dict[str, dict[str, list[dict]]] = {}
        for r in self.table["prune"]:
            key = json.dumps(r.get("budget", {}), sort_keys=True)
            by_method.setdefault(r["method"], {}).setdefault(key, []).append(r)
        out = {}
        for method, groups in by_method.items():
            if self.budgets is not None:
                want = self.budgets.get(method)
                rows = groups.get(json.dumps(want, sort_keys=True), []) if want is not None else []
            else:
                rows = max(groups.values(), key=len)  # max keeps the first of equals
            if rows:
                out[method] = sorted(rows, key=lambda r: float(r["sparsity"]))
        return out

    def _select_block_rows(self) -> list[dict]:
        """The ``block_sparsity`` rows at the ``sparsify`` budget in use (``budgets["sparsify"]``; without budgets, the
        budget with the most rows)."""
        groups: dict[str, list[dict]] = {}
        for r in self.table["block_sparsity"]:
            groups.setdefault(json.dumps(r.get("budget", {}), sort_keys=True), []).append(r)
        if self.budgets is not None:
            want = self.budgets.get(SPARSIFY)
            rows = groups.get(json.dumps(want, sort_keys=True), []) if want is not None else []
        else:
            rows = max(groups.values(), key=len) if groups else []
        return sorted(rows, key=lambda r: float(r["block_sparsity"]))

    def block_sparsities(self) -> tuple[float, ...]:
        """The measured block sparsities at the ``sparsify`` budget in use (empty: none)."""
        return tuple(float(r["block_sparsity"]) for r in self._blocks)

    def block_budget(self) -> dict | None:
        """The ``sparsify`` budget the block-sparsity rows in use were measured at (None: no rows)."""
        return dict(self._blocks[0].get("budget", {})) if self._blocks else None

    def methods(self) -> tuple[str, ...]:
        """Pruning methods with measured rows at the budgets in use."""
        return tuple(sorted(self._prune))

    def sparsities(self, method: str) -> tuple[float, ...]:
        """The measured target sparsities of ``method`` at its budget (empty: the method has no rows)."""
        return tuple(float(r["sparsity"]) for r in self._prune.get(method, []))

    def budget_of(self, method: str) -> dict | None:
        """The budget ``method``'s rows were measured at (None: no rows)."""
        rows = self._prune.get(method)
        return dict(rows[0].get("budget", {})) if rows else None

    def rows(self) -> list[dict]:
        """Every row in use (pruning at the selected budgets, quantization), as stored."""
        out = [r for rows in self._prune.values() for r in rows]
        return out + [r for k in ("bits", "embeddings", "trim_vocab") for r in self.table[k]] + list(self._blocks)

    def tolerance(self, bound: float | None = None) -> float:
        """The prior's own spread (points): mean |task drop - row mean| over rows measured on several tasks.

        The mean over tasks predicts a task this far off on average. With a
        measured ``task`` its own rows predict it, but they hold one run's
        noise; the spread stays the margin either way. With ``bound`` (the
        accuracy bound), only rows whose mean is within it count: the spread
        where the plan chooses, not that of candidates it rules out anyway. Differences in predicted drop smaller
        than this do not rank candidates (:func:`edgenlp.targets.planner.choose`).
        """
        devs = [abs(float(v) - float(r["drop_mean"])) for r in self.rows() for v in r.get("measured", {}).values()
                if len(r.get("measured", {})) > 1 and (bound is None or float(r["drop_mean"]) <= bound)]  # fmt: skip
        return float(np.mean(devs)) if devs else 0.0

    # ---- parts

    def prune_point(self, method: str | None, sparsity: float) -> PriorPoint:
        if method is None or sparsity <= 0:
            return PriorPoint(0.0, "measured", (), "unpruned")
        rows = self._prune.get(method)
        if not rows:
            have = "no rows" if method not in {r["method"] for r in self.table["prune"]} else "no rows at this budget"
            return PriorPoint(float("nan"), "unmeasured", (), f"{method}: {have}")
        point = _curve_point(rows, "sparsity", sparsity, measured=f"{method} {sparsity:.0%}", about=f"{method} {sparsity:.0%}",
                             extrapolate=True)
        if point.drop < 0:  # a pruning that measured a gain on dev measured noise: removing units is not predicted to help
            return PriorPoint(0.0, point.basis, point.sources,
                              "; ".join(x for x in (point.note, f"measured {point.drop:+.2f} points, counted as no drop") if x))
        return point

    def prune_drop(self, method: str | None, sparsity: float) -> float:
        return self.prune_point(method, sparsity).drop

    def _row(self, kind: str, value) -> dict | None:
        return next((r for r in self.table[kind] if r.get(kind) == value), None)

    def bits_point(self, precision: str) -> PriorPoint:
        """Per-layer drop of linears at ``precision``: its row, never below a wider precision's (fp32 is the reference)."""
        if precision == "fp32":
            return PriorPoint(0.0, "measured", (), "fp32 linears")
        best = PriorPoint(0.0, "measured")
        for p in PRECISIONS[1 : PRECISIONS.index(precision) + 1]:
            r = self._row("bits", p)
            if r is None:
                if p == precision:
                    return PriorPoint(float("nan"), "unmeasured", (), f"{precision} linears: no row")
                continue
            if float(r["drop"]) >= best.drop:
                best = PriorPoint(float(r["drop"]), "measured", (r["source"],), f"{precision} linears" +
                                  ("" if p == precision else f" (takes {p}'s larger drop)"))  # fmt: skip
        return best

    def embeddings_point(self, scheme: str | None) -> PriorPoint:
        if not scheme or scheme == "fp32":
            return PriorPoint(0.0, "measured", (), "fp32 word table")
        if scheme not in EMB_ORDER:
            raise ValueError(f"embeddings must be None or one of {EMB_ORDER}, got {scheme!r}")
        best = PriorPoint(0.0, "measured")
        for s in EMB_ORDER[: EMB_ORDER.index(scheme) + 1]:
            r = self._row("embeddings", s)
            if r is None:
                if s == scheme:
                    return PriorPoint(float("nan"), "unmeasured", (), f"{scheme} word table: no row")
                continue
            if float(r["drop"]) >= best.drop:
                best = PriorPoint(float(r["drop"]), "measured", (r["source"],), f"{scheme} word table")
        return best

    def block_point(self, sparsity: float) -> PriorPoint:
        """The drop of ``sparsity`` of every encoder linear's blocks zeroed by ``sparsify``: a measured row, or linear
        between 0 and the measured rows; never extrapolated beyond the last (accuracy falls off quickly there)."""
        if sparsity <= 0:
            return PriorPoint(0.0, "measured")
        if not self._blocks:
            have = "no rows" if not self.table["block_sparsity"] else "no rows at this budget"
            return PriorPoint(float("nan"), "unmeasured", (), f"block sparsity: {have}")
        return _curve_point(self._blocks, "block_sparsity", sparsity, measured=f"{sparsity:.0%} of blocks zero",
                            about=f"block sparsity {sparsity:.0%}", extrapolate=False)

    def trim_point(self, trim: bool) -> PriorPoint:
        if not trim:
            return PriorPoint(0.0, "measured")
        r = self._row("trim_vocab", True)
        if r is None:
            return PriorPoint(float("nan"), "unmeasured", (), "vocabulary trimming: no row")
        return PriorPoint(float(r["drop"]), "measured", (r["source"],), "trimmed vocabulary")

    # ---- candidates

    def explain(self, candidate, *, num_layers: int = 6) -> PriorPoint:
        """The candidate's drop, the worst basis of its parts, and the results files they come from
        (or the candidate's own measured drop, from :meth:`with_measured_candidates`); shifted by what candidates
        pruned alike measured on this task (:meth:`_measured_shift`)."""
        own = self.measured_candidates.get(self.candidate_key(candidate)) if self.measured_candidates else None
        if own is not None:
            return PriorPoint(own["drop"], "measured", (own["source"],), "this candidate, built and measured")
        point = self._composed(candidate, num_layers=num_layers)
        shift, why = self._measured_shift(candidate, num_layers=num_layers)
        if why is None:
            return point
        return PriorPoint(point.drop + shift, point.basis, point.sources + ("measured on this task",),
                          "; ".join(x for x in (point.note, why) if x))

    def _composed(self, candidate, *, num_layers: int = 6) -> PriorPoint:
        """The drop composed from the prior's parts (pruning, linears, word table, trimming, block sparsity)."""
        from edgenlp.targets.costmodel import resolve_mixed

        candidate = _as_candidate(candidate)
        bits_ = resolve_mixed(candidate.bits, num_layers)
        per = (bits_,) * num_layers if isinstance(bits_, str) else tuple(bits_)
        bits = [self.bits_point(b) for b in per]
        parts = [self.prune_point(candidate.prune_method, candidate.sparsity), self.embeddings_point(candidate.embeddings),
                 self.trim_point(candidate.trim_vocab), self.block_point(float(getattr(candidate, "block_sparsity", 0.0)))]  # fmt: skip
        drop = parts[0].drop + sum(b.drop for b in bits) / len(bits) + parts[1].drop + parts[2].drop + parts[3].drop
        basis = _worst(*(p.basis for p in parts + bits))
        sources = tuple(sorted({s for p in parts + bits for s in p.sources}))
        notes = "; ".join(p.note for p in parts if p.basis != "measured")
        return PriorPoint(drop, basis, sources, notes)

    def _measured_shift(self, candidate, *, num_layers: int = 6) -> tuple[float, str | None]:
        """How far this task's measured candidates landed from their composed drops, carried to ``candidate``.

        A candidate built and measured on this task (:meth:`with_measured_candidates`) shows how much its pruning
        costs *this* model, which the prior, measured on other models, only guesses: the pruning dominates the drop
        and every quantization of one pruned model shares it. So a candidate pruned alike (method, sparsity, block
        sparsity) takes the mean of their residuals (measured - composed), either sign; one pruned more by the same
        method takes the residual of the nearest lighter pruning when it is positive (pruning more does not lose
        less). Only static measurements count (the planner adds an exits candidate's own loss to its static drop).
        ``(0.0, None)`` where nothing measured applies.
        """
        residuals = self._residuals(num_layers)
        key = pruning_key(_as_candidate(candidate))
        if key in residuals:
            r = float(np.mean(residuals[key]))
            return r, f"{r:+.2f} points: candidates pruned alike measured on this task"
        lighter = [(k, float(np.mean(v))) for k, v in residuals.items()
                   if k[0] is not None and k[0] == key[0] and k[2] == key[2] and k[1] < key[1]]
        if not lighter:
            return 0.0, None
        k, r = max(lighter, key=lambda kv: kv[0][1])
        if r <= 0:
            return 0.0, None
        return r, f"{r:+.2f} points: {k[0]} {k[1]:.0%}, pruned less, measured on this task"

    def drop(self, candidate, *, num_layers: int = 6) -> float:
        return self.explain(candidate, num_layers=num_layers).drop

    def predict(self, candidate, *, num_layers: int = 6) -> float:
        """Predicted dev accuracy (%)."""
        return self.baseline - self.drop(candidate, num_layers=num_layers)

    # ---- refresh and serialization

    def with_measured(self, rows: list[dict], *, source: str = "measured by the caller") -> "AccuracyModel":
        """A copy where measured rows replace the prior's: ``{"prune_method", "sparsity", "drop"}``, ``{"bits", "drop"}``
        or ``{"embeddings", "drop"}``, each with an optional ``source`` (the results file; ``source`` otherwise).

        A pruning row joins the method's rows at the budget in use.
        """
        table = json.loads(json.dumps(self.table))
        for r in rows:
            src = r.get("source", source)
            ours = {"measured": {self.task: float(r["drop"])}} if self.task else {}  # measured on this task
            if "prune_method" in r:
                m, s = r["prune_method"], round(float(r["sparsity"]), 6)
                budget = self.budget_of(m) if self.budget_of(m) is not None else (self.budgets or {}).get(m, {})
                table["prune"] = [x for x in table["prune"] if not (x["method"] == m and round(float(x["sparsity"]), 6) == s
                                                                    and x.get("budget", {}) == budget)]  # fmt: skip
                table["prune"].append({"method": m, "sparsity": s, "budget": budget, "drop": float(r["drop"]), "source": src,
                                       **ours})
            else:
                kind = "bits" if "bits" in r else "embeddings" if "embeddings" in r else None
                if kind is None:
                    raise ValueError(f"a measured row needs prune_method, bits or embeddings: {r}")
                table[kind] = [x for x in table[kind] if x.get(kind) != r[kind]]
                table[kind].append({kind: r[kind], "drop": float(r["drop"]), "source": src, **ours})
        return AccuracyModel(table, baseline=self.baseline, budgets=self.budgets, task=self.task)

    def task_rows(self) -> int:
        """How many rows in use predict with :attr:`task`'s own drop (0: every row is a mean over tasks)."""
        return sum(1 for r in self.rows() if r.get("drop_of") == self.task) if self.task else 0

    def to_dict(self) -> dict:
        return {"baseline": self.baseline, "budgets": self.budgets, "task": self.task, "task_rows": self.task_rows(),
                "tolerance_points": round(self.tolerance(), 4), "rows": self.rows()}  # fmt: skip


def _use_task_drop(row: dict, task: str | None) -> None:
    """Make ``row`` predict ``task``'s own measured drop where it has one (``drop_of`` names it; ``drop_mean`` keeps
    the mean over tasks); otherwise the mean. Idempotent: a copy of a model's table passes through again."""
    if "drop_mean" not in row:
        row["drop_mean"] = row["drop"]
    own = (row.get("measured") or {}).get(task) if task else None
    row["drop"], row["drop_of"] = (float(own), task) if own is not None else (row["drop_mean"], "mean")


def _curve_point(rows: list[dict], key: str, x: float, *, measured: str, about: str, extrapolate: bool) -> PriorPoint:
    """The drop at ``x`` on a measured curve: ``rows`` sorted by ``key``, each with a ``drop``, and 0 at 0.

    A row at ``x`` is measured (noted ``measured``); between rows the drop is
    linear; beyond the last row it follows the last segment (``extrapolate``)
    or is unmeasured. ``about`` starts the other notes.
    """
    for r in rows:
        if abs(float(r[key]) - x) < 1e-9:
            return PriorPoint(float(r["drop"]), "measured", (r["source"],), measured)
    xs = np.asarray([0.0] + [float(r[key]) for r in rows])
    ys = np.asarray([0.0] + [float(r["drop"]) for r in rows])
    src = tuple(sorted({r["source"] for r in rows}))
    if x < xs[-1]:
        return PriorPoint(float(np.interp(x, xs, ys)), "interpolated", src, f"{about}: interpolated between measured sparsities")
    if not extrapolate:
        return PriorPoint(float("nan"), "unmeasured", (), f"{about}: beyond the measured {xs[-1]:.0%}")
    slope = (ys[-1] - ys[-2]) / (xs[-1] - xs[-2])
    return PriorPoint(float(ys[-1] + slope * (x - xs[-1])), "extrapolated", src,
                      f"{about}: extrapolated beyond the last measured {xs[-1]:.0%}")


def _candidate_dict(candidate) -> dict:
    d = candidate.to_dict() if hasattr(candidate, "to_dict") else dict(candidate)
    return {k: v for k, v in d.items() if k not in ("type", "version")}


def _as_candidate(candidate):
    """A planner ``Candidate`` as it is; a candidate's dict (a measured row) as one."""
    if hasattr(candidate, "prune_method"):
        return candidate
    from edgenlp.targets.planner import Candidate

    return Candidate.from_dict(_candidate_dict(candidate))


def pruning_key(c) -> tuple:
    """What two candidates must share to share a pruned model: method, sparsity, block sparsity."""
    return c.prune_method, round(float(c.sparsity), 4), round(float(c.block_sparsity), 4)
