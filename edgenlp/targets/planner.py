"""Pick the compression recipe that fits a device's budgets and is best on an objective (fastest by default).

The search space (:class:`SearchSpace`) crosses pruning (method × sparsity),
weight precision (fp32, int8, int4, or per layer), the embedding scheme and
vocabulary trimming. Each :class:`Candidate` is turned into the encoder shape
it would have (:func:`candidate_shape`), priced by the
:class:`~edgenlp.targets.costmodel.CostModel` and scored by an
:class:`AccuracyModel` (measured rows only, :mod:`edgenlp.targets.prior`).
:func:`plan` returns the best candidate on the objective (:func:`choose`:
fastest within the accuracy bound by default, ties within the cost model's
own error broken by size) that meets every budget, why it won
(:class:`Choice`), and every candidate it considered (for the Pareto plot);
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
import logging
from dataclasses import dataclass, field


from edgenlp.config import Config
from edgenlp.errors import EdgeNLPError
from edgenlp.models.encoder import EncoderShape
from edgenlp.sparse.convert import MIN_SPARSITY
from edgenlp.targets.budget_message import closest_message
from edgenlp.targets.costmodel import MINILM_L6, MIXED, Prediction, layer_bits, resolve_mixed
from edgenlp.targets.prior import AccuracyModel, PriorPoint, pruning_key
from edgenlp.targets.target import PRECISIONS, Budgets, Target

log = logging.getLogger(__name__)

PRUNE_METHODS = ("cofi", "fast", "importance")
SPARSE_PRECISIONS = tuple(MIN_SPARSITY)  # the block-sparse kernels' precisions (fp32, int8)
EMBEDDINGS = (None, "int8", "int4")
TRIM_PRIOR = 0.5  # fraction of the vocabulary a task keeps when trimmed, when the task's count is not given (SST-2: 0.38, 11,575 rows)


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
    vocabulary rows the task never uses; ``exits`` adds early exits after
    every layer (a dynamic bundle: its latency is a statistic over inputs,
    priced from measured :class:`~edgenlp.targets.costmodel.ExitStats`);
    ``block_sparsity`` zeroes that fraction of the 1x4 weight blocks of every
    encoder linear (``sparsify``), which then run edgenlp's block-sparse ops:
    fp32 or int8 linears only, and not with exits (a dynamic bundle's
    segments run dense).
    """

    prune_method: str | None = None
    sparsity: float = 0.0
    bits: str | tuple[str, ...] = "fp32"
    embeddings: str | None = None
    trim_vocab: bool = False
    exits: bool = False
    block_sparsity: float = 0.0

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
        for name in ("trim_vocab", "exits"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be a bool, got {getattr(self, name)!r}")
        if not isinstance(self.block_sparsity, (int, float)) or not 0.0 <= self.block_sparsity < 1.0:
            raise ValueError(f"block_sparsity must be in [0, 1), got {self.block_sparsity!r}")
        if self.block_sparsity > 0:
            per = (self.bits,) if isinstance(self.bits, str) else self.bits
            if any(b not in SPARSE_PRECISIONS for b in per):
                raise ValueError(f"block_sparsity needs {' or '.join(SPARSE_PRECISIONS)} linears (the sparse kernels' "
                                 f"precisions), got bits {self.bits!r}")
            if self.exits:
                raise ValueError("block_sparsity and exits do not combine: a dynamic bundle's segments run dense")

    def to_dict(self) -> dict:
        d = super().to_dict()
        if not self.exits:  # a static candidate reads as it did before exits existed (plans, caches, manifests)
            d.pop("exits", None)
        if not self.block_sparsity:  # likewise a dense one
            d.pop("block_sparsity", None)
        return d

    @property
    def static(self) -> "Candidate":
        """The same candidate without early exits."""
        return dataclasses.replace(self, exits=False)

    @property
    def label(self) -> str:
        prune = f"{self.prune_method} {self.sparsity:.0%}" if self.prune_method else "unpruned"
        bits = self.bits if isinstance(self.bits, str) else "/".join(self.bits)
        emb = f", emb {self.embeddings}" if self.embeddings else ""
        return (f"{prune}, {bits}{emb}" + (", trimmed vocab" if self.trim_vocab else "")
                + (f", {self.block_sparsity:.0%} blocks zero" if self.block_sparsity else "")
                + (", early exits" if self.exits else ""))


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
    block_sparsities: tuple[float, ...] = (0.0,)  # fractions of zero 1x4 blocks (fp32 / int8 linears only)

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
        if any(not 0.0 <= s < 1.0 for s in self.block_sparsities):
            raise ValueError(f"block_sparsities must be in [0, 1), got {self.block_sparsities}")
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
                        for b in self.block_sparsities:
                            if b > 0 and bits not in SPARSE_PRECISIONS:
                                continue
                            c = Candidate(prune_method=m, sparsity=s, bits=bits, embeddings=e, trim_vocab=t, block_sparsity=b)
                            if c not in self.exclude and c not in out:
                                out.append(c)
        return out


def structured_key(prune_method: str | None, sparsity: float) -> tuple[str | None, float]:
    """What two candidates share when their pruned models have the same heads and FFN widths (block sparsity aside)."""
    return prune_method, round(float(sparsity), 4)


def candidate_shape(base: EncoderShape, candidate: Candidate, *, trimmed_vocab_size: int | None = None,
                    built: tuple[tuple[int, ...], tuple[int, ...]] | None = None) -> EncoderShape:
    """The shape of ``candidate``: ``built`` (heads, FFN width per layer) when this pruning was built before, else
    the nominal shape, where every layer keeps ``1 - sparsity`` of its heads and FFN width.

    Real pruning removes unevenly, and not in proportion between heads and
    neurons (``fast`` at 50% kept 68% of SST-2's heads and 41% of its FFN):
    the nominal shape has the parameters right but not the attention, whose
    cost grows with the heads and the square of the length.
    """
    keep = 1.0 - candidate.sparsity
    if built is not None and candidate.prune_method and len(built[0]) == len(built[1]) == base.num_layers:
        heads, ffn = tuple(built[0]), tuple(built[1])
    else:
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


# --------------------------------------------------------------------------- the plan


@dataclass(frozen=True)
class Considered:
    """A candidate with its predicted cost, accuracy and accuracy drop, and the budgets it breaks (empty: it fits).

    ``prior`` says how the drop was obtained (measured, interpolated,
    extrapolated) and from which results files. Unpacks as
    ``(candidate, prediction, predicted_drop, fits)``.
    """

    candidate: Candidate
    prediction: Prediction
    accuracy: float
    drop: float
    violations: tuple[str, ...] = ()
    prior: PriorPoint | None = field(default=None, compare=False)

    @property
    def fits(self) -> bool:
        return not self.violations

    def __iter__(self):
        return iter((self.candidate, self.prediction, self.drop, self.fits))

    def to_dict(self) -> dict:
        d = {"candidate": self.candidate.to_dict(), "label": self.candidate.label, "prediction": self.prediction.to_dict(),
             "predicted_accuracy": round(self.accuracy, 3), "predicted_drop": round(self.drop, 3),
             "violations": list(self.violations)}  # fmt: skip
        if self.prior is not None:
            d["prior"] = self.prior.to_dict()
        return d


OBJECTIVES = ("latency", "accuracy", "size")
SIZE_TOLERANCE = 0.01  # size is counted from the shapes, not fitted: within 1% of the written file (tests/targets/test_costmodel.py)


@dataclass(frozen=True)
class Choice:
    """Why :func:`choose` picked a candidate: the objective, the runner-up on it, the margin and the tolerance that makes a tie.

    ``margin`` is the runner-up's value minus the chosen one's on the
    objective: a fraction of the chosen value for latency and size, points for
    accuracy (the drop). ``tie`` is true when the runner-up is within
    ``tolerance`` of the best value, and the tie was broken by ``tiebreak``.
    """

    objective: str
    chosen: Considered
    runner_up: Considered | None
    best_value: float
    margin: float | None
    tolerance: float
    tie: bool
    tiebreak: str
    max_drop: float | None

    @staticmethod
    def value(c: Considered, objective: str) -> float:
        return {"latency": c.prediction.latency_ms, "size": c.prediction.size_mb, "accuracy": c.drop}[objective]

    def reason(self) -> str:
        """One paragraph: why the chosen candidate won, and the bound it met."""
        unit = {"latency": "ms predicted", "size": "MB predicted", "accuracy": "points predicted drop"}[self.objective]
        c, r = self.chosen, self.runner_up
        tol = f"{self.tolerance:.0%}" if self.objective != "accuracy" else f"{self.tolerance:.2f} points"
        source = {"latency": "the cost model's own error", "size": "the size count's error",
                  "accuracy": "the prior's spread between tasks"}[self.objective]  # fmt: skip
        head = f"Objective: {self.objective}. {c.candidate.label}: {self.value(c, self.objective):.3g} {unit}"
        if r is None:
            text = f"{head}; it is the only candidate within the budgets and the accuracy bound."
        else:
            rv = self.value(r, self.objective)
            diff = (f"{self.margin:+.1%}" if self.objective != "accuracy" else f"{self.margin:+.2f} points")
            text = f"{head}; runner-up {r.candidate.label}: {rv:.3g} ({diff} against the chosen)."
            if self.tie:
                text += (f" Within {tol} of the best ({source}) candidates tie on {self.objective}; the tie went to "
                         f"the {self.tiebreak}.")
            else:
                text += f" The margin exceeds the {tol} tie tolerance ({source})."
        bound = (f" Predicted drop {c.drop:.2f} points" +
                 (f" within the bound of {self.max_drop:g}" if self.max_drop is not None else " (no accuracy bound)") +
                 f" ({c.prior.basis if c.prior else 'prior'}).")  # fmt: skip
        return text + bound

    def to_dict(self) -> dict:
        r = self.runner_up
        return {"objective": self.objective, "chosen": self.chosen.candidate.label,
                "chosen_value": round(self.value(self.chosen, self.objective), 4),
                "runner_up": r.candidate.label if r else None, "runner_up_candidate": r.candidate.to_dict() if r else None,
                "runner_up_value": round(self.value(r, self.objective), 4) if r else None,
                "margin": round(self.margin, 4) if self.margin is not None else None,
                "margin_unit": "points" if self.objective == "accuracy" else "fraction of the chosen value",
                "tolerance": round(self.tolerance, 4), "tie": self.tie, "tiebreak": self.tiebreak,
                "max_drop": self.max_drop, "predicted_drop": round(self.chosen.drop, 4), "reason": self.reason()}  # fmt: skip


def choose(fitting: list[Considered], *, objective: str = "latency", latency_tolerance: float = 0.0,
           drop_tolerance: float = 0.0, size_tolerance: float = SIZE_TOLERANCE, max_drop: float | None = None) -> Choice:
    """The best of ``fitting`` (candidates that meet every budget and the accuracy bound) on ``objective``.

    Values within a tolerance of the best tie: latency within
    ``latency_tolerance`` (a fraction: the cost model's own error), size within
    ``size_tolerance``, the predicted drop within ``drop_tolerance`` points
    (the prior's spread). A tie on the objective goes to the next key, with
    its own tolerance, and what is still tied to the smallest predicted drop:

    ``latency`` (default)  fastest; ties: smallest; then the smallest drop
    ``size``               smallest; ties: fastest; then the smallest drop
    ``accuracy``           smallest drop; ties: fastest; then the smallest drop

    so a difference below a model's error never decides a plan.
    """
    if objective not in OBJECTIVES:
        raise ValueError(f"objective must be one of {OBJECTIVES}, got {objective!r}")
    if not fitting:
        raise ValueError("choose needs at least one candidate")
    lat = lambda c: c.prediction.latency_ms  # noqa: E731
    size = lambda c: c.prediction.size_mb  # noqa: E731

    def within(cands: list[Considered], key, tol: float, *, relative: bool) -> list[Considered]:
        best = min(key(c) for c in cands)
        limit = best * (1 + tol) if relative else best + tol
        return [c for c in cands if key(c) <= limit + 1e-12]

    keys = {"latency": (lat, latency_tolerance, True), "size": (size, size_tolerance, True), "accuracy": (lambda c: c.drop, drop_tolerance, False)}
    second = {"latency": "size", "size": "latency", "accuracy": "latency"}[objective]
    k1, tol, rel = keys[objective]
    tied = within(list(fitting), k1, tol, relative=rel)
    k2, tol2, rel2 = keys[second]
    tied2 = within(tied, k2, tol2, relative=rel2)
    chosen = min(tied2, key=lambda c: (c.drop, k2(c), k1(c)))
    tiebreak = {"size": "smallest predicted size", "latency": "fastest predicted latency"}[second]
    tiebreak += f" (within {tol2:.0%}), then the smallest predicted drop"
    others = [c for c in fitting if c is not chosen]
    runner = min(others, key=lambda c: (k1(c), c.drop, k2(c))) if others else None
    margin = None
    if runner is not None:
        cv, rv = Choice.value(chosen, objective), Choice.value(runner, objective)
        margin = (rv - cv) if objective == "accuracy" else ((rv - cv) / cv if cv > 0 else 0.0)
    tie = runner is not None and runner in tied
    return Choice(objective, chosen, runner, min(k1(c) for c in fitting), margin, tol, tie, tiebreak, max_drop)


@dataclass(frozen=True)
class Plan:
    """The chosen candidate (``chosen``; its predictions in ``chosen_point``), every candidate considered and why it won."""

    chosen: Candidate
    chosen_point: Considered
    considered: tuple[Considered, ...]
    target: str
    budgets: Budgets
    shape: EncoderShape = field(compare=False)
    trimmed_vocab_size: int | None = None
    choice: Choice | None = field(default=None, compare=False)
    not_offered: tuple[Candidate, ...] = field(default=(), compare=False)
    ranked: tuple[Considered, ...] = field(default=(), compare=False)  # the fitting candidates, best first (:func:`rank`)

    def shortlist(self, k: int) -> list[Considered]:
        """The ``k`` fitting candidates ``compress --measure k`` builds: the chosen one first, then the best-ranked of
        each other pruning, then the rest in rank order.

        Candidates pruned alike (method, sparsity, block sparsity) share one pruned model and with it most of their
        accuracy loss, so a shortlist of one pruning stands or falls together: the main job measured fast 50% at
        1.3 and 1.4 points under two quantizations where the prior said 0.80 and 0.86. A second pruning (often none)
        in the next slot is what the measurement can fall back on within the same attempt.
        """
        if not self.ranked:
            return [self.chosen_point][:k]
        out, seen = [], set()
        for p in self.ranked:
            key = pruning_key(p.candidate)
            if key not in seen:
                out.append(p)
                seen.add(key)
                if len(out) == k:
                    return out
        return out + [p for p in self.ranked if p not in out][: k - len(out)]

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
                "why": self.choice.to_dict() if self.choice else None,
                "not_offered": [c.label for c in self.not_offered],
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


def rank(fitting: list[Considered], **choose_kwargs) -> list[Considered]:
    """``fitting`` ordered best first: :func:`choose` picks the first, then the best of the rest, and so on."""
    left, out = list(fitting), []
    while left:
        best = choose(left, **choose_kwargs).chosen
        out.append(best)
        left = [c for c in left if c is not best]
    return out


def exits_prediction(static: Prediction, stats, *, statistic: str) -> Prediction:
    """``static`` (a static candidate's prediction) with early exits: the latency ``statistic`` over inputs
    (:func:`~edgenlp.targets.costmodel.exit_latency` on the measured ``stats``); size and memory unchanged (the exit
    heads are a pooler and a classifier per layer: under a percent of MiniLM's weights)."""
    from edgenlp.targets.costmodel import exit_latency

    emb = min(static.components_ms.get("embedding", 0.0), static.latency_ms)
    ms = exit_latency(static.latency_ms, emb, stats, statistic=statistic)
    basis = f"{static.basis}; early exits: {statistic} over the validation split (mean {stats.mean_layers:.2f} layers)"
    return dataclasses.replace(static, latency_ms=ms, basis=basis.lstrip("; "))


def plan(target: Target, budgets: Budgets, *, cost_model=None, accuracy_model: AccuracyModel | None = None,
         space: SearchSpace | list[Candidate] | None = None, shape: EncoderShape | None = None, num_labels: int = 2,
         max_drop: float | None = None, task: str | None = None, objective: str = "latency",
         latency_tolerance: float | None = None, exit_stats=None, trimmed_vocab_size: int | None = None,
         built_shapes: dict | None = None) -> Plan:  # fmt: skip
    """The best candidate on ``objective`` among those that meet every budget and the accuracy bound (:func:`choose`).

    ``cost_model`` defaults to :meth:`CostModel.for_target`, ``accuracy_model``
    to the prior (:class:`AccuracyModel`); ``space`` is a :class:`SearchSpace` or
    a list of candidates (default: the full space); ``shape`` is the
    uncompressed model's shape (default MiniLM-L6); ``max_drop`` (points) rules
    out candidates predicted to lose more; ``objective`` is ``latency``
    (default: the fastest, ties within the cost model's error broken by size),
    ``accuracy`` or ``size``; ``latency_tolerance`` overrides the cost model's
    :meth:`~edgenlp.targets.costmodel.CostModel.ranking_tolerance`;
    ``trimmed_vocab_size`` is how many word-table rows a trimmed candidate
    keeps (the task's tokens; default the space's, else
    :data:`TRIM_PRIOR` of the vocabulary); ``built_shapes`` maps
    :func:`structured_key` to the ``(heads, ffn)`` per layer that pruning
    had when it was built (:func:`candidate_shape`). A candidate
    the prior has no measured row for (a pruning method without rows at its
    budget, a precision without a row) is not offered (``Plan.not_offered``);
    an interpolated or extrapolated pruning point is offered and labelled so
    (``Considered.prior``). ``task`` is recorded in the log. Raises
    :class:`BudgetError` when nothing fits.

    Latency is ``budgets.latency_stat`` over inputs: a static candidate's one
    latency, or for a candidate with ``exits`` the statistic from
    ``exit_stats`` (:class:`~edgenlp.targets.costmodel.ExitStats`, measured
    on a validation split; required when the space has such candidates; its
    ``quantized`` statistics for a candidate with quantized linears, when
    measured), whose ``drop`` adds to the static candidate's predicted drop.
    """
    from edgenlp.targets.costmodel import CostModel

    if objective not in OBJECTIVES:
        raise EdgeNLPError(f"objective must be one of {', '.join(OBJECTIVES)}, got {objective!r}")
    cost_model = cost_model if cost_model is not None else CostModel.for_target(target)
    accuracy_model = accuracy_model if accuracy_model is not None else AccuracyModel()
    shape = shape or MINILM_L6
    if isinstance(space, SearchSpace) or space is None:
        space = space or SearchSpace()
        candidates, trimmed = space.candidates(shape.num_layers), trimmed_vocab_size or space.trimmed_vocab_size
    else:
        candidates, trimmed = list(space), trimmed_vocab_size
    if trimmed is not None and trimmed < 1:
        raise ValueError(f"trimmed_vocab_size must be positive, got {trimmed}")
    if budgets.threads > target.cores:
        raise EdgeNLPError(f"{target.name} has {target.cores} cores; threads {budgets.threads} is out of range")
    if budgets.seq_len > shape.max_positions:
        raise EdgeNLPError(f"seq_len {budgets.seq_len} exceeds the model's {shape.max_positions} positions")
    if exit_stats is None and any(c.exits for c in candidates):
        raise ValueError("candidates with exits need exit_stats (measured on a validation split)")
    if exit_stats is not None and len(exit_stats.reach) != shape.num_layers:
        raise ValueError(f"exit_stats has {len(exit_stats.reach)} layers, the model {shape.num_layers}")
    considered, not_offered = [], []
    unpriced: dict[str, str] = {}  # why block-sparse candidates were not offered
    for c in candidates:
        # an exits candidate built and measured before has its own drop; otherwise its static drop plus the exits'
        own = accuracy_model.explain(c, num_layers=shape.num_layers) if c.exits else None
        own_measured = own is not None and own.basis == "measured" and bool(accuracy_model.measured_candidates) and \
            accuracy_model.candidate_key(c) in accuracy_model.measured_candidates
        prior = own if own_measured else accuracy_model.explain(c.static, num_layers=shape.num_layers)
        if prior.basis == "unmeasured":
            not_offered.append(c)
            continue
        s = candidate_shape(shape, c, trimmed_vocab_size=trimmed,
                            built=(built_shapes or {}).get(structured_key(c.prune_method, c.sparsity)))
        bits = resolve_bits(c.bits, shape.num_layers)
        if c.block_sparsity:
            factors = [cost_model.sparse_factor(p, c.block_sparsity) for p in set(layer_bits(_blank_shape(shape.num_layers), bits))]
            why = next((w for f, w in factors if f is None), None)
            if why is not None:  # the cost model cannot price its kernels here
                not_offered.append(c)
                unpriced.setdefault(why, c.label)
                continue
        pred = cost_model.predict(s, bits=bits, embeddings=c.embeddings, seq_len=budgets.seq_len, threads=budgets.threads,
                                  num_labels=num_labels, block_sparsity=c.block_sparsity)  # fmt: skip
        drop = prior.drop
        if c.exits:  # how deep sentences run at this precision's own threshold (quantize calibrates it again)
            stats = exit_stats.for_bits(bits)
            pred = exits_prediction(pred, stats, statistic=budgets.latency_stat)
            if not own_measured:
                drop = drop + max(0.0, float(stats.drop))
        considered.append(Considered(c, pred, accuracy_model.baseline - drop, drop, _violations(pred, budgets, drop, max_drop), prior))
    for why, label in unpriced.items():
        log.info("block-sparse candidates not offered (e.g. %s): %s", label, why)
    no_row = [c for c in not_offered if accuracy_model.explain(c.static, num_layers=shape.num_layers).basis == "unmeasured"]
    if no_row:
        log.info("not offered (no measured prior row): %d candidates, e.g. %s (%s)", len(no_row), no_row[0].label,
                 accuracy_model.explain(no_row[0], num_layers=shape.num_layers).note)  # fmt: skip
    if not considered:
        why = " (every candidate excluded)" if not not_offered else " (the accuracy prior has no measured row for any candidate)"
        raise BudgetError(f"the search space for {target.name} is empty{why}")
    fitting = [c for c in considered if c.fits]
    if not fitting:
        raise BudgetError(closest_message(target, budgets, considered, accuracy_model, max_drop))
    if latency_tolerance is None:
        precisions = tuple(sorted({p for c in fitting for p in layer_bits(_blank_shape(shape.num_layers),
                                                                         resolve_bits(c.candidate.bits, shape.num_layers))}))
        latency_tolerance = cost_model.ranking_tolerance(precisions, threads=budgets.threads)
    kwargs = dict(objective=objective, latency_tolerance=latency_tolerance, drop_tolerance=accuracy_model.tolerance(max_drop),
                  max_drop=max_drop)  # fmt: skip
    choice = choose(fitting, **kwargs)
    chosen = choice.chosen
    ranked = [chosen, *rank([c for c in fitting if c is not chosen], **kwargs)]
    if chosen.prior is not None and chosen.prior.basis != "measured":
        log.warning("the chosen candidate's accuracy is %s, not measured: %s", chosen.prior.basis, chosen.prior.note)
    log.info("plan for %s%s: %s (predicted %.2f ms, %.1f MB, %.2f MB, drop %.2f); %s", target.name, f" / {task}" if task else "",
             chosen.candidate.label, chosen.prediction.latency_ms, chosen.prediction.peak_memory_mb, chosen.prediction.size_mb,
             chosen.drop, choice.reason())  # fmt: skip
    return Plan(chosen.candidate, chosen, tuple(considered), target.name, budgets, shape, trimmed, choice, tuple(not_offered),
                tuple(ranked))
