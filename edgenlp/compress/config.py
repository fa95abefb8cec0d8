"""``CompressConfig``: one frozen config drives ``compress()``, ``edgenlp compress`` and ``compress.json``.

A preset fixes how much work each stage may spend (the budgets and the target
say *what* to build; the preset says how hard to try):

``quick``
    a bounded fine-tune on a seeded subset, retraining-free pruning (``fast``),
    int8/int4 quantization: minutes on a 2-core CPU.
``full``
    fine-tuning with the library defaults on the whole training set, CoFi
    pruning with distillation as well as ``fast``, mixed precision: hours on a
    CPU, minutes on a GPU.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from edgenlp.config import Config, check_positive, knob

PRESET_NAMES = ("quick", "full")
PRUNE_TARGETS = ("params", "latency")  # what compress prunes a candidate's sparsity of


@dataclass(frozen=True)
class Preset:
    """How much work each stage may spend."""

    name: str
    train_limit: int | None  # fine-tuning rows (seeded subset); None = all
    max_steps: int | None  # fine-tuning optimizer steps; None = the library default
    priming_steps: int | None  # Learner priming steps; None = the library default (one epoch)
    finetune_seq_len: int
    prune_methods: tuple[str, ...]
    prune_samples: int  # training rows the retraining-free pruning reads (where prune_budgets does not say)
    prune_epochs: float | None  # CoFi mask-learning epochs; None = its default (where prune_budgets does not say)
    schemes: tuple[str, ...]  # quantization schemes the planner may pick
    profile_runs: int  # timed runs per latency measurement
    # method -> the prune config knobs that set how much it spends: exactly a budget the accuracy prior
    # (targets/accuracy-prior.json) has measured rows at, so the planner's drop is the measured one
    prune_budgets: tuple[tuple[str, tuple[tuple[str, object], ...]], ...] = ()
    # the recovery distillation (DistillConfig knobs) after a pruning that does not distil by itself (fast,
    # importance; CoFi ends with its own distilled fine-tune): part of those methods' budgets
    recovery: tuple[tuple[str, object], ...] = ()
    # the early exits compress may add (DynamicConfig knobs; --dynamic auto): exit heads after every layer, distilled
    # from the final classifier with the backbone frozen, the max-probability threshold calibrated on held-out rows
    exits: tuple[tuple[str, object], ...] = ()
    # with --dynamic joint: the DynamicConfig knobs that differ when the backbone trains with the exits (a backward
    # pass through the whole model per step, so fewer epochs than the heads alone get)
    exits_joint: tuple[tuple[str, object], ...] = ()
    # block sparsity compress may add (SparsifyConfig knobs, the sparsity aside): the budget the prior's
    # block_sparsity rows were measured at (tools/bench/results/sparsify-accuracy.json); empty: none offered
    sparsify: tuple[tuple[str, object], ...] = ()
    # fine-tuning method -> its optimizer steps where they differ from max_steps: the same minutes buy fewer steps of
    # a method that trains the embeddings (full, FAR: AdamW over 16-23M parameters) than of Learners (1.4M)
    method_steps: tuple[tuple[str, int], ...] = ()

    def steps_for(self, method: str) -> int | None:
        """The fine-tuning steps ``method`` may spend: its entry in ``method_steps``, else ``max_steps``."""
        return dict(self.method_steps).get(method, self.max_steps)

    def sparsify_config(self, sparsity: float, *, seed: int = 0):
        """The :class:`~edgenlp.prune.config.SparsifyConfig` ``compress`` zeroes ``sparsity`` of the blocks with.

        ``epochs`` is set high so that ``max_steps`` (part of the budget) bounds the run, as it did when the
        prior's rows were measured.
        """
        from edgenlp.prune.config import SparsifyConfig

        return SparsifyConfig(sparsity=sparsity, epochs=100.0, seed=seed, **dict(self.sparsify))

    def exits_config(self, *, max_drop: float, seed: int = 0, joint: bool = False):
        """The :class:`~edgenlp.dynamic.config.DynamicConfig` of the early exits ``compress`` offers the planner.

        The exits may cost :data:`EXITS_SHARE_OF_DROP` of the run's ``max_drop``
        on validation rows; the rest is left to pruning and quantization.
        ``joint`` (``--dynamic joint``): the backbone trains with the exits
        (``DynamicConfig.joint``, with :attr:`exits_joint`'s knobs).
        """
        from edgenlp.dynamic.config import DynamicConfig

        knobs = {**dict(self.exits), **({"joint": True, **dict(self.exits_joint)} if joint else {})}
        return DynamicConfig(exits=None, rule="maxprob", tokens="none", max_drop=round(max_drop * EXITS_SHARE_OF_DROP, 4),
                             seed=seed, **knobs)

    def recovery_config(self, *, seed: int = 0):
        """The :class:`~edgenlp.prune.config.DistillConfig` ``compress`` recovers a pruned model with."""
        from edgenlp.prune.config import DistillConfig

        return DistillConfig(**dict(self.recovery), seed=seed)

    def recovers_after(self, method: str) -> bool:
        """Whether ``compress`` distils a model pruned by ``method`` (False: the method distils by itself)."""
        from edgenlp.prune.api import PRUNE_METHODS
        from edgenlp.prune.config import METHOD_CONFIGS

        return not PRUNE_METHODS[METHOD_CONFIGS[method]].recovers

    def prune_budget(self, method: str) -> dict:
        """The prune config knobs ``method`` runs with (the measured budget), else the preset's samples/epochs.

        For a method ``compress`` recovers after, the budget holds the
        recovery's too (``recovery``: :meth:`DistillConfig.budget`), so the
        prior's rows for it are the ones measured with that recovery.
        """
        own = dict(self.prune_budgets).get(method)
        if own is not None:
            out = dict(own)
        else:
            out = {"samples": self.prune_samples, **({"epochs": self.prune_epochs} if self.prune_epochs is not None else {})}
        if self.recovers_after(method):
            out["recovery"] = self.recovery_config().budget()
        return out

    def prune_kwargs(self, method: str) -> dict:
        """:meth:`prune_budget` without the knobs ``method``'s config does not have (``edgenlp.prune.prune_config`` takes these).

        The prior's budgets were recorded when one config class served every
        method: ``fast`` and ``importance`` rows name ``epochs: 0`` (no mask
        learning), a knob their own configs no longer have.
        """
        from edgenlp.prune.config import METHOD_CONFIGS

        names = METHOD_CONFIGS[method].field_names()
        return {k: v for k, v in self.prune_budget(method).items() if k in names}

    def prune_budget_map(self) -> dict[str, dict]:
        """The budgets the accuracy prior's rows must have been measured at: per pruning method, and
        ``sparsify`` for block sparsity (when the preset offers it)."""
        from edgenlp.targets.prior import SPARSIFY

        out = {m: self.prune_budget(m) for m in self.prune_methods}
        if self.sparsify:
            out[SPARSIFY] = dict(self.sparsify)
        return out


# The budgets tools/bench/prune.py measured (prune.json; prune-cofi-longer.json, then prune-cofi-compress.json from the
# teachers compress fine-tunes): fast and importance as the benchmark ran them; CoFi at 5x its short budget (8,000
# rows, 3 + 2 epochs), the budget at which it kept accuracy.
_FAST = ("fast", (("samples", 1024), ("max_seq_len", 64), ("epochs", 0.0), ("finetune_epochs", 0.0)))
_IMPORTANCE = ("importance", (("samples", 512), ("iterations", 4), ("max_seq_len", 64), ("epochs", 0.0), ("finetune_epochs", 0.0)))
_COFI_LONG = ("cofi", (("train_limit", 8000), ("epochs", 3.0), ("finetune_epochs", 2.0), ("max_seq_len", 64), ("batch_size", 32)))

# importance is not offered: tools/bench/recovery.py measured it with this recovery at 50% and 70% (recovery.json,
# from the teacher compress fine-tunes), and on SST-2 it loses as much as fast or more on validation (2.1 points at
# both, against fast's 1.7 and 1.3) for the same shape budget; on banking77 it loses less (-0.2 / 1.1 against 0.6 /
# 1.7). Offering it would widen the quick shortlist for no measured gain on the main task.
# The recovery distillation after fast / importance: 300 steps of 32 on 8,000 training rows (what the quick
# preset's fine-tune spends) at lr 2e-4 (4x DistillConfig's default, near the full fine-tune's tuned 1.6e-4; the one
# rate tools/bench/recovery.py ran); the prior's rows for those methods were measured with exactly this (recovery.json).
# ``epochs`` is set high so that ``max_steps`` ends the run on any task (DistillConfig.budget() leaves epochs out
# where max_steps is set; the prior's rows all ran their max_steps).
_RECOVERY = (("train_limit", 8000), ("epochs", 100.0), ("max_steps", 300), ("max_seq_len", 64), ("lr", 2e-4))
# compress --recovery long: 1,200 steps of 32 on up to 32,000 training rows at the same rate, the budget
# tools/bench/recovery_budget.py chose on validation rows held out of train (after fast at 60% and 70% it recovered
# more than a point the short budget left); the prior's rows for it: recovery-1200-compress.json (tools/bench/recovery.py
# --teacher compress: from the teachers compress fine-tunes; recovery-1200.json's weaker teachers were beaten by their
# students on SST-2, which made those rows optimistic).
_RECOVERY_LONG = (("train_limit", 32000), ("epochs", 100.0), ("max_steps", 1200), ("max_seq_len", 64), ("lr", 2e-4))
RECOVERY_BUDGETS = {"short": _RECOVERY, "long": _RECOVERY_LONG}
RECOVERY_NAMES = tuple(RECOVERY_BUDGETS)  # what --recovery may name

# Early exits for the planner: trained on up to 8,000 (quick) / 16,000 (full) training rows, calibrated on 4,000 /
# 8,000 rows held out of them (rows the fine-tuning did not see where there are enough; at most a fifth of the
# training rows), at the fine-tune's length. The exits get half of --max-drop (0.5 points at the default), which
# 1,000 rows cannot resolve: a threshold chosen on them follows noise (tools/bench/results/dynamic-val-rows.md), and
# the SST-2 exits calibrated on 1,000 rows kept 0.82x the static FLOPs; calibrated on 8,000 (heads distilled on
# 16,000 rows instead of 2,000) they run at 0.55x for the same validation drop (tools/bench/dynamic.py, cases
# sst2-mean and sst2-8k-val).
_EXITS_QUICK = (("train_limit", 8000), ("val_rows", 4000), ("max_seq_len", 64))
_EXITS_FULL = (("train_limit", 16000), ("val_rows", 8000), ("max_seq_len", 128))
# --dynamic joint: 2 epochs over the same rows, heads at 3e-3 and the backbone at DynamicConfig.backbone_lr, as
# tools/bench/dynamic.py's sst2-8k-val-joint case ran them (SST-2, 16,000 rows: the 8,000 validation rows ran 0.43x
# the static FLOPs at a 0.41-point drop, against 0.59x for frozen-backbone heads, case sst2-8k-val).
_EXITS_JOINT = (("epochs", 2.0), ("lr", 3e-3))
# Block sparsity (edgenlp sparsify) as tools/bench/sparsify_accuracy.py measured it: 1x4 blocks, 250 distillation
# steps of 32 rows at length 64, lr 1e-4 (about 11 minutes on a 2-core CPU per sparsity).
_SPARSIFY = (("block", "1x4"), ("max_steps", 250), ("batch_size", 32), ("max_seq_len", 64), ("lr", 1e-4))
EXITS_SHARE_OF_DROP = 0.5
EXITS_MIN_ROWS = 50  # fewer training rows than this: no exits are offered (nothing to calibrate a threshold on)

# The quick preset's fine-tuning: what fits 8 minutes of a 2-core CPU (model loading and evaluation included) and
# reaches SST-2 >= 86% and banking77 >= 89% (tools/bench/results/quick-preset.md: CPU wall times; quick-preset-cuda.md:
# 3 seeds per setting, chosen on validation rows held out of train). Learner + priming, 800 steps of 32 on a seeded
# 25,600-row subset: SST-2 validation 90.17 +- 0.51 (300 steps on 8,000 rows: 87.53 +- 0.97), 432 s on the CPU. FAR
# and full fine-tuning step at ~0.75 s there (Learners ~0.45 s): 500 steps, banking77 validation 90.82 +- 1.53 with
# FAR (300 steps on 8,000 rows: 87.33 +- 0.30; its 3 epochs, 762 steps, would take ~10 minutes: epoch 1 alone took 193 s).
_QUICK_FINETUNE = {"train_limit": 25600, "max_steps": 800, "priming_steps": 100,
                   "method_steps": (("far", 500), ("full", 500))}

PRESETS: dict[str, Preset] = {
    "quick": Preset("quick", **_QUICK_FINETUNE, finetune_seq_len=64,
                    prune_methods=("fast",), prune_samples=512, prune_epochs=None,
                    schemes=("fp32", "int8", "int4"), profile_runs=20, prune_budgets=(_FAST, _IMPORTANCE),
                    recovery=_RECOVERY, exits=_EXITS_QUICK, exits_joint=_EXITS_JOINT, sparsify=_SPARSIFY),
    "full": Preset("full", train_limit=None, max_steps=None, priming_steps=None, finetune_seq_len=128,
                   prune_methods=("fast", "cofi"), prune_samples=2048, prune_epochs=None,
                   schemes=("fp32", "int8", "int4", "mixed"), profile_runs=50, prune_budgets=(_FAST, _IMPORTANCE, _COFI_LONG),
                   recovery=_RECOVERY, exits=_EXITS_FULL, exits_joint=_EXITS_JOINT, sparsify=_SPARSIFY),
}
OBJECTIVES = ("latency", "accuracy", "size")  # edgenlp.targets.planner.OBJECTIVES
AUTO = "auto"
DYNAMIC_MODES = ("auto", "joint", "off")
LATENCY_STATS = ("mean", "p90", "max")  # edgenlp.targets.costmodel.STATISTICS


@dataclass(frozen=True)
class FinetuneRule:
    """``finetune_method="auto"``: tasks of at most ``max_classes`` classes (``None``: any) fine-tune with ``method``,
    because of ``evidence`` (a measurement, with its results file; ``tests/compress/test_finetune_choice.py`` checks
    the numbers against the file)."""

    max_classes: int | None
    method: str
    evidence: str


# The first rule whose max_classes covers the task decides.
FINETUNE_RULES: tuple[FinetuneRule, ...] = (
    FinetuneRule(2, "learner", "SST-2 (2 classes), 1 epoch, 3 seeds, each method at its tuned rates: Learner 84.59 ± 0.96, "
                               "full 84.90 ± 0.67, FAR 84.02 ± 0.40 (tools/bench/results/finetune.json)"),
    FinetuneRule(None, "far", "banking77 (77 classes), 1 epoch, 3 seeds, each method at its tuned rates: Learner "
                              "86.37 ± 0.40, full 91.23 ± 0.92, FAR 91.60 ± 0.36 (tools/bench/results/finetune.json)"),
)


def finetune_method_for(asked: str, num_classes: int) -> tuple[str, str]:
    """``(method, why)``: ``asked`` itself, or for ``auto`` the method :data:`FINETUNE_RULES` gives ``num_classes``."""
    if asked != AUTO:
        return asked, "asked for"
    for rule in FINETUNE_RULES:
        if rule.max_classes is None or num_classes <= rule.max_classes:
            span = "any number of classes" if rule.max_classes is None else f"at most {rule.max_classes} classes"
            return rule.method, f"auto, {num_classes} classes: {rule.method} for {span}; {rule.evidence}"
    raise AssertionError("FINETUNE_RULES ends with a rule for any number of classes")
MAX_MEASURE = 16  # candidates built per attempt


@dataclass(frozen=True)
class CompressConfig(Config):
    """What to build and under which budgets.

    ``model`` is a registered name or a model directory; ``target`` a target
    name or a TOML file. ``latency_ms``, ``memory_mb`` and ``size_mb``
    override the target's default budgets (``None``: the target's), as do
    ``seq_len`` and ``threads`` for the latency budget. ``max_drop`` is the
    largest dev-accuracy drop (points) allowed against the uncompressed
    fine-tuned model. ``finetune_method`` is the fine-tuning method of the
    first stage (``auto`` by default: :func:`finetune_method_for`). ``max_attempts`` bounds the
    plan -> build -> verify iterations; ``measure`` is how many of the plan's
    candidates each attempt builds (:meth:`edgenlp.targets.planner.Plan.shortlist`) and scores on a validation split of
    the training data (:mod:`edgenlp.compress.measured`). ``objective`` is what the plan
    optimizes within the budgets and the accuracy bound (``latency`` by
    default: :func:`edgenlp.targets.planner.choose`).
    """

    model: str = knob("minilm-l6", help="Registered model name or model directory.")
    task: str = knob("sst2", help="Built-in task or a folder with train.tsv and dev.tsv.")
    target: str = knob("pixel-7", help="Device target name (`edgenlp targets`) or a TOML file.")
    latency_ms: float | None = knob(None, help="Latency budget (default: the target's).")
    memory_mb: float | None = knob(None, help="Peak memory budget (default: the target's).")
    size_mb: float | None = knob(None, help="Bundle size budget (default: the target's).")
    seq_len: int | None = knob(None, help="Sequence length the latency budget is for (default: the target's).")
    threads: int | None = knob(None, help="Threads the latency budget is for (default: the target's).")
    max_drop: float = knob(1.0, help="Largest dev-accuracy drop (points) against the uncompressed fine-tuned model.")
    preset: str = knob("quick", choices=PRESET_NAMES, help="quick: minutes on a CPU (bounded fine-tune, retraining-free "
                                                          "pruning); full: the whole training set, CoFi.")
    finetune_method: str = knob(AUTO, help="Fine-tuning method of the first stage (see `edgenlp finetune --method`); auto: "
                                           "Learners for two classes, FAR for more, where each measured best.")
    seed: int = knob(0, help="Seed of every stage.")
    max_attempts: int = knob(3, help="Most plan -> build -> verify iterations.")
    measure: int = knob(2, help="Candidates built and scored on a validation split of the training data per attempt: "
                                "the plan's choice, then the best of each other pruning, then the next best; the first "
                                "of them that meets every bound as measured is verified on dev (1: build the plan's "
                                "choice only).")
    objective: str = knob("latency", choices=OBJECTIVES, help=(
        "What the plan optimizes within the budgets and --max-drop: latency (the fastest; candidates within the cost "
        "model's own error tie and the smallest wins), accuracy (the smallest predicted drop) or size."))
    latency_stat: str | None = knob(None, choices=LATENCY_STATS, help=(
        "The statistic over inputs the latency budget bounds (default: the target's, p90). Static bundles cost the "
        "same on every input; with early exits mean < p90 <= max, and max is the full depth."))
    recovery: str | None = knob(None, choices=RECOVERY_NAMES, help=(
        "The recovery distillation after a pruning that does not distil by itself (fast): short (300 steps of 32 on "
        "8,000 training rows) or long (1,200 steps on up to 32,000 rows: about four times the minutes per pruned "
        "candidate, for the higher sparsities the short one cannot bring back within --max-drop). Default: the "
        "preset's (short). The prior offers the sparsities measured at that budget."))
    prune_target: str = knob("params", choices=PRUNE_TARGETS, help=(
        "What a pruned candidate's sparsity measures: params (the encoder's parameters) or latency (its FLOPs at the "
        "budget's length with the attention core weighted by what it costs per FLOP on the target, from the cost "
        "model: beside int8 linears a head costs more than its parameters say, so more heads go and more FFN stays)."))
    dynamic: str = knob("auto", choices=DYNAMIC_MODES, help=(
        "auto: train early exits on the fine-tuned model, measure how deep validation sentences run, and let the "
        "planner offer every candidate with exits too (chosen only where the latency statistic gains within "
        "--max-drop); joint: the same with the backbone trained together with the exits (the early layers learn to "
        "decide, so sentences leave earlier; a backward pass through the whole model per step, minutes more on a CPU; "
        "the bundle's static path changes, its drop is still held against the fine-tuned model); off: static "
        "bundles only."))

    def __post_init__(self) -> None:
        for name in ("model", "task", "target"):
            if not isinstance(getattr(self, name), str) or not getattr(self, name):
                raise ValueError(f"{name} must be a non-empty string, got {getattr(self, name)!r}")
        for name in ("latency_ms", "memory_mb", "size_mb"):
            check_positive(name, getattr(self, name), allow_none=True)
        for name in ("seq_len", "threads"):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
                raise ValueError(f"{name} must be a positive integer, got {v!r}")
        if isinstance(self.max_drop, bool) or not isinstance(self.max_drop, (int, float)) or not 0 <= self.max_drop <= 100:
            raise ValueError(f"max_drop must be in [0, 100] points, got {self.max_drop!r}")
        if self.preset not in PRESETS:
            raise ValueError(f"preset must be one of {', '.join(PRESET_NAMES)}, got {self.preset!r}")
        from edgenlp.finetune.config import METHODS

        if self.finetune_method not in (AUTO, *METHODS):
            raise ValueError(f"finetune_method must be one of {', '.join((AUTO, *METHODS))}, got {self.finetune_method!r}")
        if not isinstance(self.max_attempts, int) or isinstance(self.max_attempts, bool) or self.max_attempts < 1:
            raise ValueError(f"max_attempts must be an integer >= 1, got {self.max_attempts!r}")
        if isinstance(self.measure, bool) or not isinstance(self.measure, int) or not 1 <= self.measure <= MAX_MEASURE:
            raise ValueError(f"measure must be an integer in [1, {MAX_MEASURE}], got {self.measure!r}")
        if self.objective not in OBJECTIVES:
            raise ValueError(f"objective must be one of {', '.join(OBJECTIVES)}, got {self.objective!r}")
        if self.latency_stat is not None and self.latency_stat not in LATENCY_STATS:
            raise ValueError(f"latency_stat must be one of {', '.join(LATENCY_STATS)}, got {self.latency_stat!r}")
        if self.recovery is not None and self.recovery not in RECOVERY_NAMES:
            raise ValueError(f"recovery must be one of {', '.join(RECOVERY_NAMES)}, got {self.recovery!r}")
        if self.prune_target not in PRUNE_TARGETS:
            raise ValueError(f"prune_target must be one of {', '.join(PRUNE_TARGETS)}, got {self.prune_target!r}")
        if self.dynamic not in DYNAMIC_MODES:
            raise ValueError(f"dynamic must be one of {', '.join(DYNAMIC_MODES)}, got {self.dynamic!r}")

    @property
    def resolved_preset(self) -> Preset:
        """The preset, with the recovery budget ``recovery`` names where it is set."""
        preset = PRESETS[self.preset]
        return preset if self.recovery is None else replace(preset, recovery=RECOVERY_BUDGETS[self.recovery])

    @property
    def recovery_changed(self) -> bool:
        """Whether ``recovery`` spends another budget than the preset's own (the measured candidates are then others)."""
        return self.resolved_preset.recovery != PRESETS[self.preset].recovery
