"""Fine-tuning configs: one frozen dataclass per knob set, validated on construction.

:class:`FinetuneConfig` holds what every method shares (epochs, batch, learning
rate, seed, ...); :class:`LearnerConfig` and :class:`FarConfig` hold what only
their method reads. Each config serializes to a dict carrying its ``type`` and
``version`` (recorded in ``finetune.json``) and reads back with ``from_dict``.

>>> cfg = FinetuneConfig(method="learner", epochs=3, learner=LearnerConfig(rank=16, priming_epochs=1))
>>> FinetuneConfig.from_dict(cfg.to_dict()) == cfg
True
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from edgenlp.config import Config, check_bool, check_choice, check_int, check_lr, check_positive, check_range, knob
from edgenlp.models.families import ATTENTION_LINEARS, LAYER_LINEARS

METHODS = ("full", "learner", "far", "bitfit", "freeze-ffn")
# Body learning rate when FinetuneConfig.lr is None. Weights that start pretrained
# move with a small rate; small new factors (Learners, biases) need a larger one.
# Full fine-tuning's body rate was chosen on a validation split held out of train
# (1,000 rows, 3 seeds, 1 epoch, the head at the library's rate in both): 1.6e-4
# beat 5e-5 by 0.83 points on banking77 (results/full-body-rate-banking77-1epoch)
# and on SST-2 (results/full-body-rate-sst2-1epoch). FAR and freeze-ffn keep 5e-5.
DEFAULT_LR = {"full": 1.6e-4, "far": 5e-5, "freeze-ffn": 5e-5, "learner": 1e-3, "bitfit": 1e-3}
# DEFAULT_LR as FinetuneConfig version 2 had it: a version-2 dict without ``lr`` ran at this rate.
DEFAULT_LR_V2 = {**DEFAULT_LR, "full": 5e-5}
# Learning rate of the task head (classifier and pooler) when FinetuneConfig.head_lr
# is None, for every method. The classifier starts random: at the body's 5e-5 it
# is still far from trained after an epoch (banking77: 43.6% after 1 epoch); the
# Hugging Face reference with the head at 2e-3 reaches 88.7% (RUNTIME_NOTES.md).
DEFAULT_HEAD_LR = 2e-3
# epochs=None: enough epochs for at least this many optimizer steps, at most
# AUTO_MAX_EPOCHS (early stopping on dev accuracy ends a run that stops improving).
AUTO_MIN_STEPS = 600
AUTO_MAX_EPOCHS = 10
# Parameter groups a learning rate can be set for (CLI ``--lr GROUP=VALUE``).
LR_GROUPS = ("body", "head", "priming")
# Modules a Learner may target: the canonical per-layer linears and the pooler.
LEARNER_TARGETS = LAYER_LINEARS + ("pooler",)
# LearnerConfig.rank=None: hidden // RANK_DIVISOR (64 at hidden 768, 32 for MiniLM's 384).
RANK_DIVISOR = 12
# Below SHORT_RANK_STEPS_PER_CLASS steps per class the rank is hidden // SHORT_RANK_DIVISOR (48 for MiniLM, 9.2% of its
# parameters trainable, under the 10% a parameter-efficient method keeps to). Measured on the 154-class task at 1.2
# steps per class, 3 seeds, chosen on validation rows held out of train (results/learner-ablation-154-2epochs-rank.md):
# validation accuracy rank 32 -> 48 by +1.5, +1.8 and +4.5 points, seed by seed (rank 64, at 12.1%, by +4.8 to +7.4).
# Not measured between 2 and 12 steps per class, where rank 32 meets the targets (banking77 at 3 epochs,
# 154 classes at 5 epochs): the line stays at 2. At the 2-epoch budget (4,000 rows, 1.6 steps per class) the
# validation split agrees: rank 32 -> 48 at 1e-3, +1.3, +1.4 and -0.1 points (learner-ablation-154-2epochs-4000rows.md).
# The Learners' rate stays 1e-3: 2e-3 with 10% warm-up won at 1.2 steps per class (mean validation 75.33 -> 78.57%,
# seed by seed +4.7, +6.9, -1.9) but tied at 1.6 (85.33 against 85.27%), and a tie is no reason to change a default.
SHORT_RANK_STEPS_PER_CLASS = 2
SHORT_RANK_DIVISOR = 8


def rates_by_method(rates: dict[str, float]) -> str:
    """``{"full": 1.6e-4, "far": 5e-5, "learner": 1e-3, ...}`` -> ``"1.6e-4 full, 5e-5 far/..., 1e-3 learner/..."``."""
    by_rate: dict[float, list[str]] = {}
    for method, rate in rates.items():
        by_rate.setdefault(rate, []).append(method)
    return ", ".join(f"{format_rate(rate)} {'/'.join(methods)}" for rate, methods in by_rate.items())


def format_rate(rate: float) -> str:
    """A learning rate as people write it: 1.6e-4, 5e-5, 1e-3."""
    mant, exp = f"{rate:.1e}".split("e")
    return f"{mant.rstrip('0').rstrip('.')}e{int(exp)}"


@dataclass(frozen=True)
class LearnerConfig(Config):
    """Learners (low-rank pairs P1·P2 beside frozen linears), optionally primed.

    ``rank``: an int for every target, ``None`` for ``hidden // 12`` (64 at
    hidden 768), or ``"auto"`` to pick each layer's rank from the weight change
    seen while priming (see :mod:`edgenlp.finetune.rank`). ``ranks`` overrides
    the rank per module pattern (fnmatch on ``layers.<i>.<name>`` / ``pooler``),
    e.g. ``(("layers.*.ffn_*", 16),)``; the first matching pattern wins.

    ``VERSION`` 2: ``priming_epochs``, ``priming_lr`` and ``bitfit`` unset
    (``None``) follow the task (:func:`learner_schedule`), as do the body and
    head rates of :class:`FinetuneConfig` left unset for this method.

    Priming: the first ``priming_epochs`` epochs (fractional allowed) or, when
    given, the first ``priming_steps`` steps also train the attention weights
    (query/key/value/attn_out) at ``priming_lr``; afterwards only Learners and
    the classifier train. With ``rank="auto"`` priming trains every targeted
    weight directly instead, and the Learners are created when it ends.
    ``energy`` is the share of ``||dW||^2`` a chosen rank must capture and
    ``budget`` caps the Learner parameters (``None``: what the default fixed
    rank would use).
    """

    VERSION = 2  # 2: priming_epochs/priming_lr/bitfit None follow the task; probe_epochs, bitfit

    rank: int | str | None = knob(None, help=f"Learner rank: an integer for every target, 'auto' (each layer's from the "
                                             f"weight change while priming), or unset for hidden // {RANK_DIVISOR} "
                                             f"(hidden // {SHORT_RANK_DIVISOR} below {SHORT_RANK_STEPS_PER_CLASS} "
                                             f"optimizer steps per class).")
    ranks: tuple[tuple[str, int], ...] = knob((), help="Rank per module pattern (fnmatch on layers.<i>.<name> / pooler), "
                                                      "PATTERN=RANK; the first matching pattern wins.")
    targets: tuple[str, ...] = knob(LEARNER_TARGETS, choices=LEARNER_TARGETS, help="Modules that get Learners.")
    priming_epochs: float | None = knob(None, help="Priming length in epochs (fractions allowed): the attention weights "
                                                   "train too (default: from the task, see learner_schedule).")
    priming_steps: int | None = knob(None, help="Priming length in steps (instead of --priming-epochs).")
    priming_lr: float | None = knob(None, help="Learning rate of the weights trained while priming (default: from the task).")
    energy: float = knob(0.9, help="Rank 'auto': the share of ||dW||^2 each chosen rank must capture, in (0, 1].")
    budget: int | None = knob(None, help="Rank 'auto': the most Learner parameters (default: what the fixed rank uses).")
    probe_epochs: float | None = knob(None, help="Linear probing first (LP-FT): epochs (fractions allowed) in which only "
                                                "the task head trains, before priming and the Learners (default: from "
                                                "the task).")
    bitfit: bool | None = knob(None, help="Train every bias and layer norm (embeddings' included) with the Learners, as "
                                          "BitFit does (default: from the task).")

    def __post_init__(self) -> None:
        if self.rank is not None and self.rank != "auto":
            check_int("rank", self.rank, minimum=1)
        object.__setattr__(self, "ranks", tuple((str(p), r) for p, r in (tuple(x) for x in self.ranks)))
        for pattern, r in self.ranks:
            check_int(f"rank for {pattern!r}", r, minimum=1)
        object.__setattr__(self, "targets", tuple(self.targets))
        bad = [t for t in self.targets if t not in LEARNER_TARGETS]
        if bad or not self.targets:
            raise ValueError(f"targets must be a non-empty subset of {LEARNER_TARGETS}, got {self.targets!r}")
        if self.priming_epochs is not None:
            check_range("priming_epochs", self.priming_epochs, 0.0)
        check_int("priming_steps", self.priming_steps, minimum=0, allow_none=True)
        if self.priming_lr is not None:
            check_lr("priming_lr", self.priming_lr)
        check_range("energy", self.energy, 0.0, 1.0, low_open=True)
        check_int("budget", self.budget, minimum=1, allow_none=True)
        if self.probe_epochs is not None:
            check_range("probe_epochs", self.probe_epochs, 0.0)
        if self.bitfit is not None:
            check_bool("bitfit", self.bitfit)
        no_priming = self.priming_steps == 0 or (self.priming_steps is None and self.priming_epochs == 0)
        if self.rank == "auto" and no_priming:
            raise ValueError("rank='auto' needs priming (priming_epochs > 0 or priming_steps > 0) to measure the weight change")

    def priming_steps_for(self, steps_per_epoch: int, schedule: "LearnerSchedule | None" = None) -> int:
        """Number of priming steps for a run with ``steps_per_epoch`` steps per epoch (unset: ``schedule``'s)."""
        if self.priming_steps is not None:
            return self.priming_steps
        if self.priming_epochs is None:
            if schedule is None:
                raise ValueError("priming_epochs is unset: the priming length comes from a LearnerSchedule")
            return schedule.priming_steps
        return int(round(self.priming_epochs * steps_per_epoch))

    @classmethod
    def upgrade(cls, d: dict[str, Any]) -> dict[str, Any]:
        """Version 1 primed 1 epoch at 5e-5 by default (always written out) and had no bitfit or probing."""
        if d.get("version", cls.VERSION) == 1:
            d = {"priming_epochs": 1.0, "priming_lr": 5e-5, **d, "bitfit": False, "probe_epochs": 0.0, "version": cls.VERSION}
        return d

    def probe_steps_for(self, steps_per_epoch: int, schedule: "LearnerSchedule | None" = None) -> int:
        """Number of linear-probing (head only) steps for a run with ``steps_per_epoch`` steps per epoch (unset: ``schedule``'s)."""
        if self.probe_epochs is None:
            return schedule.probe_steps if schedule is not None else 0
        return int(round(self.probe_epochs * steps_per_epoch))


# The Learner schedule (learner_schedule): what LearnerConfig's unset knobs become for one task.
# Chosen by tools/bench/learner_ablation.py (results/learner-ablation.md).
PRIMING_SHARE = 1 / 3  # of the run's steps ...
PRIMING_MAX_EPOCHS = 1.0  # ... and never more than this many epochs
PRIMING_LR = 5e-5
# A short budget for the classes: fewer optimizer steps than this many per class. A new classifier of many
# classes then does not converge at DEFAULT_HEAD_LR; the head trains at full fine-tuning's tuned head rate after a
# linear probe of a tenth of an epoch. Measured on banking77 (results/learner-ablation*.md, chosen on validation
# rows held out of train): at 94 steps (1.2 per class) 35.4% -> 77.7% on dev; at 1 epoch of every row (251 steps,
# 3.3 per class) 83.0% -> 89.97 +/- 0.61% (3 seeds), against 91.50 +/- 0.70% for tuned full fine-tuning; at 3
# epochs of every row (753 steps, 9.8 per class) 90.37 -> 93.43 +/- 0.72% (3 seeds). 12 takes in banking77's
# 3-epoch default (846 steps, 11 per class) and the 154-class task at 5 epochs (625 steps, 4.1 per class).
SHORT_STEPS_PER_CLASS = 12
SHORT_HEAD_LR = 6.4e-3
SHORT_PROBE_EPOCHS = 0.1


def short_budget(*, classes: int, total_steps: int) -> bool:
    """A budget short for the classes: fewer than :data:`SHORT_STEPS_PER_CLASS` optimizer steps per class.

    >>> short_budget(classes=77, total_steps=846), short_budget(classes=77, total_steps=1128)
    (True, False)
    """
    check_int("classes", classes, minimum=1)
    check_int("total_steps", total_steps, minimum=1)
    return total_steps < SHORT_STEPS_PER_CLASS * classes


def default_head_lr(*, classes: int, total_steps: int) -> float:
    """The head's rate when ``head_lr`` is unset, for every method: :data:`SHORT_HEAD_LR` on a budget short for the
    classes (:func:`short_budget`), else :data:`DEFAULT_HEAD_LR`. Full fine-tuning on the 154-class task at 2 epochs
    (1.6 steps per class): 63.3 +/- 1.8% on dev with the head at 2e-3 (3 seeds, finetune-154-classes-2epochs-defaults.md),
    85.7% at 6.4e-3 (seed 0, finetune-154-classes-2epochs.md; both in tools/bench/results/)."""
    return SHORT_HEAD_LR if short_budget(classes=classes, total_steps=total_steps) else DEFAULT_HEAD_LR


@dataclass(frozen=True)
class LearnerSchedule:
    """The Learner settings a task gets when LearnerConfig leaves them unset (see :func:`learner_schedule`)."""

    priming_steps: int
    priming_lr: float
    bitfit: bool
    head_lr: float | None = None  # None: FinetuneConfig's (DEFAULT_HEAD_LR unless set)
    probe_steps: int = 0  # linear probing (head only) before priming
    rank_divisor: int = RANK_DIVISOR  # an unset rank is hidden // rank_divisor

    def to_dict(self) -> dict[str, Any]:
        return {"priming_steps": self.priming_steps, "priming_lr": self.priming_lr, "bitfit": self.bitfit,
                "head_lr": self.head_lr, "probe_steps": self.probe_steps, "rank_divisor": self.rank_divisor}


def learner_schedule(*, classes: int, steps_per_epoch: int, total_steps: int) -> LearnerSchedule:
    """The Learner's defaults for a task: a deterministic function of its classes, rows and epochs.

    Rows and epochs enter as the run's ``steps_per_epoch`` (rows / batch) and
    ``total_steps`` (epochs x steps per epoch, after ``max_steps``). Priming
    takes :data:`PRIMING_SHARE` of the run, at most :data:`PRIMING_MAX_EPOCHS`
    epochs, and always leaves Learner steps after it: 1 epoch of a 3-epoch
    run (what the 3-epoch measurements used), a third of an epoch of a
    1-epoch run (where a whole epoch cannot fit), 2/3 of an epoch of a
    2-epoch run (not half of it). A budget short for the classes (fewer than
    :data:`SHORT_STEPS_PER_CLASS` steps per class) trains the head at
    :data:`SHORT_HEAD_LR` after a linear probe of :data:`SHORT_PROBE_EPOCHS`;
    below :data:`SHORT_RANK_STEPS_PER_CLASS` steps per class an unset rank is
    ``hidden // SHORT_RANK_DIVISOR`` instead of ``hidden // RANK_DIVISOR``.

    >>> learner_schedule(classes=77, steps_per_epoch=282, total_steps=846).priming_steps
    282
    >>> learner_schedule(classes=77, steps_per_epoch=282, total_steps=282).priming_steps
    94
    """
    check_int("steps_per_epoch", steps_per_epoch, minimum=1)
    short = short_budget(classes=classes, total_steps=total_steps)
    probe = int(round(SHORT_PROBE_EPOCHS * min(steps_per_epoch, total_steps))) if short else 0
    priming = min(int(PRIMING_SHARE * total_steps), int(round(PRIMING_MAX_EPOCHS * steps_per_epoch)),
                  total_steps - 1 - probe)
    very_short = total_steps < SHORT_RANK_STEPS_PER_CLASS * classes
    return LearnerSchedule(priming_steps=max(0, priming), priming_lr=PRIMING_LR, bitfit=False,
                           head_lr=SHORT_HEAD_LR if short else None, probe_steps=probe,
                           rank_divisor=SHORT_RANK_DIVISOR if very_short else RANK_DIVISOR)


@dataclass(frozen=True)
class FarConfig(Config):
    """Freeze-And-Reconfigure: prime all weights for ``priming_fraction`` of the steps,
    then keep only the ``keep`` fraction of FFN neurons that moved most trainable."""

    keep: float = knob(0.1, help="Fraction of FFN neurons kept trainable after priming, in (0, 1].")
    priming_fraction: float = knob(0.1, help="Fraction of the steps that prime the whole model, in (0, 1).")

    def __post_init__(self) -> None:
        check_range("keep", self.keep, 0.0, 1.0, low_open=True)
        check_range("priming_fraction", self.priming_fraction, 0.0, 1.0, low_open=True, high_open=True)


def auto_epochs(train_rows: int, batch_size: int) -> int:
    """Epochs for ``epochs=None``: at least :data:`AUTO_MIN_STEPS` steps, 1 to :data:`AUTO_MAX_EPOCHS` epochs.

    >>> auto_epochs(9003, 32), auto_epochs(8000, 32), auto_epochs(4000, 32), auto_epochs(67349, 32)
    (3, 3, 5, 1)
    """
    steps_per_epoch = max(1, math.ceil(train_rows / batch_size))
    return max(1, min(AUTO_MAX_EPOCHS, math.ceil(AUTO_MIN_STEPS / steps_per_epoch)))


@dataclass(frozen=True)
class FinetuneConfig(Config):
    """Everything a fine-tuning run needs besides model and data.

    ``epochs`` is the total number of passes over the training data, priming
    included; ``None`` picks it from the training-set size (:func:`auto_epochs`).
    ``max_steps`` caps the optimizer steps. ``lr`` is the body's learning rate
    and defaults per method (:data:`DEFAULT_LR`); ``head_lr`` is the task
    head's (classifier and pooler, :data:`DEFAULT_HEAD_LR`). With
    ``early_stop`` the model is evaluated on dev after every epoch and the
    best-dev weights are returned; training stops after ``patience`` epochs
    without a better dev score, once half the planned steps are done. With ``val_rows``, that many train rows
    (drawn with ``subset_seed``, never a row whose text is in dev) are held out as a validation split that early
    stopping watches instead, and dev is scored once, on the weights returned: nothing is chosen on dev.
    ``train_limit`` trains on a subset of that many (remaining)
    training rows drawn with ``subset_seed`` (fixed across run seeds, so seeds
    vary only initialization, dropout and data order). ``learner``/``far`` hold
    the method's own settings and default when the method is chosen.
    """

    VERSION = 3  # 2: head_lr, early_stop, patience, epochs=None; 3: full's default body rate 1.6e-4 (older dicts read back as what they ran)

    method: str = knob("full", choices=METHODS, help="What trains: every weight (full), Learners with priming (learner), "
                                                     "the most-moved FFN neurons after priming (far), biases (bitfit), "
                                                     "all but the FFNs (freeze-ffn).")
    epochs: int | None = knob(None, help=f"Total epochs, priming included (default: from the training-set size, at least "
                                         f"{AUTO_MIN_STEPS} steps, at most {AUTO_MAX_EPOCHS} epochs).")
    max_steps: int | None = knob(None, help="Stop after this many optimizer steps.")
    train_limit: int | None = knob(None, help="Train on a subset of this many rows drawn with --subset-seed.")
    subset_seed: int = knob(0, help="Seed of the --train-limit subset and the --val-rows split (fixed across run seeds).")
    val_rows: int | None = knob(None, help="Hold out this many seeded train rows as a validation split: early stopping "
                                           "and the per-epoch scores use it, and dev is scored once, on the weights "
                                           "returned (default: none held out; early stopping watches dev).")
    batch_size: int = knob(32, help="Training batch size.")
    lr: float | None = knob(None, help=f"Body learning rate (default per method: {rates_by_method(DEFAULT_LR)}).")
    head_lr: float | None = knob(None, help=f"Learning rate of the task head, classifier and pooler "
                                            f"(default: {DEFAULT_HEAD_LR:g}; {SHORT_HEAD_LR:g} below "
                                            f"{SHORT_STEPS_PER_CLASS} optimizer steps per class).")
    early_stop: bool = knob(True, help="Evaluate on dev (on the --val-rows split when given) after every epoch and "
                                       "return the best epoch's weights (otherwise the last epoch's, every epoch run).")
    patience: int = knob(2, help="Early stopping: epochs without a better score before training stops.")
    weight_decay: float = knob(0.01, help="AdamW weight decay of matrices (vectors never decay).")
    warmup_fraction: float = knob(0.06, help="Fraction of the steps of linear learning-rate warm-up, in [0, 1).")
    max_grad_norm: float = knob(1.0, help="Gradient norm clipping.")
    seed: int = knob(0, help="Seed of initialization (e.g. a new head), dropout and data order.")
    max_seq_len: int = knob(128, help="Longest tokenized sentence (capped at the model's positions when not given).")
    eval_batch_size: int = knob(128, help="Batch size of dev evaluation.")
    threads: int | None = knob(None, help="torch intra-op threads (default: torch's choice).")
    learner: LearnerConfig | None = knob(None, help="The learner method's settings (default with method learner).")
    far: FarConfig | None = knob(None, help="The far method's settings (default with method far).")

    def __post_init__(self) -> None:
        check_choice("method", self.method, METHODS)
        check_int("epochs", self.epochs, minimum=1, allow_none=True)
        check_int("max_steps", self.max_steps, minimum=1, allow_none=True)
        check_int("train_limit", self.train_limit, minimum=1, allow_none=True)
        check_int("subset_seed", self.subset_seed, minimum=0)
        check_int("val_rows", self.val_rows, minimum=1, allow_none=True)
        check_int("batch_size", self.batch_size, minimum=1)
        check_lr("lr", self.lr)
        check_lr("head_lr", self.head_lr)
        check_bool("early_stop", self.early_stop)
        check_int("patience", self.patience, minimum=1)
        check_range("weight_decay", self.weight_decay, 0.0)
        check_range("warmup_fraction", self.warmup_fraction, 0.0, 1.0, high_open=True)
        check_positive("max_grad_norm", self.max_grad_norm)
        check_int("seed", self.seed, minimum=0)
        check_int("max_seq_len", self.max_seq_len, minimum=2)
        check_int("eval_batch_size", self.eval_batch_size, minimum=1)
        check_int("threads", self.threads, minimum=1, allow_none=True)
        for method, (name, cls) in METHOD_CONFIGS.items():  # the chosen method's settings, and only its
            value = getattr(self, name)
            if isinstance(value, dict):
                value = cls.from_dict(value)
            if value is not None and not isinstance(value, cls):
                raise ValueError(f"{name} must be a {cls.__name__}, got {type(value).__name__}")
            if value is not None and self.method != method:
                raise ValueError(f"a {cls.__name__} was given but method is {self.method!r} (use method={method!r})")
            if value is None and self.method == method:
                value = cls()
            object.__setattr__(self, name, value)

    @property
    def resolved_lr(self) -> float:
        return self.lr if self.lr is not None else DEFAULT_LR[self.method]

    @property
    def resolved_head_lr(self) -> float:
        """The head's rate on a budget that is not short for the classes (a short one trains it at SHORT_HEAD_LR,
        :func:`default_head_lr`; the run's report records the rates it used)."""
        return self.head_lr if self.head_lr is not None else DEFAULT_HEAD_LR

    def epochs_for(self, train_rows: int) -> int:
        return self.epochs if self.epochs is not None else auto_epochs(train_rows, self.batch_size)

    def to_dict(self) -> dict[str, Any]:
        out = super().to_dict()
        out["resolved_lr"] = self.resolved_lr
        out["resolved_head_lr"] = self.resolved_head_lr
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "FinetuneConfig":
        if isinstance(d, dict):  # to_dict adds the resolved rates for readers; they are not fields
            d = {k: v for k, v in d.items() if k not in ("resolved_lr", "resolved_head_lr")}
        return super().from_dict(d)

    @classmethod
    def upgrade(cls, d: dict[str, Any]) -> dict[str, Any]:
        """Version 1 trained the head at the body's rate for 3 epochs and kept the last epoch; versions 1 and 2 ran
        an unset body rate at :data:`DEFAULT_LR_V2` (full fine-tuning at 5e-5)."""
        version = d.get("version", cls.VERSION)
        if version < 3:
            method = d.get("method", "full")
            lr = d.get("lr") if d.get("lr") is not None else DEFAULT_LR_V2.get(method, DEFAULT_LR_V2["full"])
            d = {**d, "lr": lr, "version": cls.VERSION}
            if version == 1:
                d = {"epochs": 3, **d, "head_lr": lr, "early_stop": False}
        return d


# method -> (FinetuneConfig field, config class) for the methods with settings of their own;
# the others (full, bitfit, freeze-ffn) differ only in what trains and share every setting.
METHOD_CONFIGS: dict[str, tuple[str, type[Config]]] = {"learner": ("learner", LearnerConfig), "far": ("far", FarConfig)}
