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

from edgenlp.config import Config
from edgenlp.models.families import ATTENTION_LINEARS, LAYER_LINEARS

METHODS = ("full", "learner", "far", "bitfit", "freeze-ffn")
# Body learning rate when FinetuneConfig.lr is None. Weights that start pretrained
# move with a small rate; small new factors (Learners, biases) need a larger one.
DEFAULT_LR = {"full": 5e-5, "far": 5e-5, "freeze-ffn": 5e-5, "learner": 1e-3, "bitfit": 1e-3}
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


def _check_positive(name: str, value, *, allow_none: bool = False) -> None:
    if value is None and allow_none:
        return
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not value > 0:
        raise ValueError(f"{name} must be a positive number, got {value!r}")


def _check_lr(name: str, value) -> None:
    """A learning rate: ``None`` (the default) or a finite number in (0, 1]."""
    if value is None:
        return
    if (not isinstance(value, (int, float)) or isinstance(value, bool) or math.isnan(value)
            or not 0.0 < value <= 1.0):
        raise ValueError(f"{name} must be a learning rate in (0, 1], got {value!r}")


def _check_int(name: str, value, *, minimum: int, allow_none: bool = False) -> None:
    if value is None and allow_none:
        return
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")


@dataclass(frozen=True)
class LearnerConfig(Config):
    """Learners (low-rank pairs P1·P2 beside frozen linears), optionally primed.

    ``rank``: an int for every target, ``None`` for ``hidden // 12`` (64 at
    hidden 768), or ``"auto"`` to pick each layer's rank from the weight change
    seen while priming (see :mod:`edgenlp.finetune.rank`). ``ranks`` overrides
    the rank per module pattern (fnmatch on ``layers.<i>.<name>`` / ``pooler``),
    e.g. ``(("layers.*.ffn_*", 16),)``; the first matching pattern wins.

    Priming: the first ``priming_epochs`` epochs (fractional allowed) or, when
    given, the first ``priming_steps`` steps also train the attention weights
    (query/key/value/attn_out) at ``priming_lr``; afterwards only Learners and
    the classifier train. With ``rank="auto"`` priming trains every targeted
    weight directly instead, and the Learners are created when it ends.
    ``energy`` is the share of ``||dW||^2`` a chosen rank must capture and
    ``budget`` caps the Learner parameters (``None``: what the default fixed
    rank would use).
    """

    rank: int | str | None = None
    ranks: tuple[tuple[str, int], ...] = ()
    targets: tuple[str, ...] = LEARNER_TARGETS
    priming_epochs: float = 1.0
    priming_steps: int | None = None
    priming_lr: float = 5e-5
    energy: float = 0.9
    budget: int | None = None

    def __post_init__(self) -> None:
        if self.rank is not None and self.rank != "auto":
            _check_int("rank", self.rank, minimum=1)
        object.__setattr__(self, "ranks", tuple((str(p), r) for p, r in (tuple(x) for x in self.ranks)))
        for pattern, r in self.ranks:
            _check_int(f"rank for {pattern!r}", r, minimum=1)
        object.__setattr__(self, "targets", tuple(self.targets))
        bad = [t for t in self.targets if t not in LEARNER_TARGETS]
        if bad or not self.targets:
            raise ValueError(f"targets must be a non-empty subset of {LEARNER_TARGETS}, got {self.targets!r}")
        if not isinstance(self.priming_epochs, (int, float)) or self.priming_epochs < 0 or math.isnan(self.priming_epochs):
            raise ValueError(f"priming_epochs must be >= 0, got {self.priming_epochs!r}")
        _check_int("priming_steps", self.priming_steps, minimum=0, allow_none=True)
        _check_lr("priming_lr", self.priming_lr)
        if not isinstance(self.energy, (int, float)) or not 0.0 < self.energy <= 1.0:
            raise ValueError(f"energy must be in (0, 1], got {self.energy!r}")
        _check_int("budget", self.budget, minimum=1, allow_none=True)
        no_priming = self.priming_steps == 0 or (self.priming_steps is None and self.priming_epochs == 0)
        if self.rank == "auto" and no_priming:
            raise ValueError("rank='auto' needs priming (priming_epochs > 0 or priming_steps > 0) to measure the weight change")

    def priming_steps_for(self, steps_per_epoch: int) -> int:
        """Number of priming steps for a run with ``steps_per_epoch`` steps per epoch."""
        if self.priming_steps is not None:
            return self.priming_steps
        return int(round(self.priming_epochs * steps_per_epoch))


@dataclass(frozen=True)
class FarConfig(Config):
    """Freeze-And-Reconfigure: prime all weights for ``priming_fraction`` of the steps,
    then keep only the ``keep`` fraction of FFN neurons that moved most trainable."""

    keep: float = 0.1
    priming_fraction: float = 0.1

    def __post_init__(self) -> None:
        if not isinstance(self.keep, (int, float)) or not 0.0 < self.keep <= 1.0:
            raise ValueError(f"keep must be in (0, 1], got {self.keep!r}")
        if not isinstance(self.priming_fraction, (int, float)) or not 0.0 < self.priming_fraction < 1.0:
            raise ValueError(f"priming_fraction must be in (0, 1), got {self.priming_fraction!r}")


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
    without a better dev score, once half the planned steps are done. ``train_limit`` trains on a subset of that many
    training rows drawn with ``subset_seed`` (fixed across run seeds, so seeds
    vary only initialization, dropout and data order). ``learner``/``far`` hold
    the method's own settings and default when the method is chosen.
    """

    VERSION = 2  # 2: head_lr, early_stop, patience, epochs=None (version-1 dicts read back as what they ran)

    method: str = "full"
    epochs: int | None = None
    max_steps: int | None = None
    train_limit: int | None = None
    subset_seed: int = 0
    batch_size: int = 32
    lr: float | None = None
    head_lr: float | None = None
    early_stop: bool = True
    patience: int = 2
    weight_decay: float = 0.01
    warmup_fraction: float = 0.06
    max_grad_norm: float = 1.0
    seed: int = 0
    max_seq_len: int = 128
    eval_batch_size: int = 128
    threads: int | None = None
    learner: LearnerConfig | None = None
    far: FarConfig | None = None

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ValueError(f"method must be one of {', '.join(METHODS)}, got {self.method!r}")
        _check_int("epochs", self.epochs, minimum=1, allow_none=True)
        _check_int("max_steps", self.max_steps, minimum=1, allow_none=True)
        _check_int("train_limit", self.train_limit, minimum=1, allow_none=True)
        _check_int("subset_seed", self.subset_seed, minimum=0)
        _check_int("batch_size", self.batch_size, minimum=1)
        _check_lr("lr", self.lr)
        _check_lr("head_lr", self.head_lr)
        if not isinstance(self.early_stop, bool):
            raise ValueError(f"early_stop must be True or False, got {self.early_stop!r}")
        _check_int("patience", self.patience, minimum=1)
        if not isinstance(self.weight_decay, (int, float)) or self.weight_decay < 0:
            raise ValueError(f"weight_decay must be >= 0, got {self.weight_decay!r}")
        if not isinstance(self.warmup_fraction, (int, float)) or not 0.0 <= self.warmup_fraction < 1.0:
            raise ValueError(f"warmup_fraction must be in [0, 1), got {self.warmup_fraction!r}")
        _check_positive("max_grad_norm", self.max_grad_norm)
        _check_int("seed", self.seed, minimum=0)
        _check_int("max_seq_len", self.max_seq_len, minimum=2)
        _check_int("eval_batch_size", self.eval_batch_size, minimum=1)
        _check_int("threads", self.threads, minimum=1, allow_none=True)
        if isinstance(self.learner, dict):
            object.__setattr__(self, "learner", LearnerConfig.from_dict(self.learner))
        if isinstance(self.far, dict):
            object.__setattr__(self, "far", FarConfig.from_dict(self.far))
        if self.learner is not None and self.method != "learner":
            raise ValueError(f"a LearnerConfig was given but method is {self.method!r} (use method='learner')")
        if self.far is not None and self.method != "far":
            raise ValueError(f"a FarConfig was given but method is {self.method!r} (use method='far')")
        if self.method == "learner" and self.learner is None:
            object.__setattr__(self, "learner", LearnerConfig())
        if self.method == "far" and self.far is None:
            object.__setattr__(self, "far", FarConfig())

    @property
    def resolved_lr(self) -> float:
        return self.lr if self.lr is not None else DEFAULT_LR[self.method]

    @property
    def resolved_head_lr(self) -> float:
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
        d = {k: v for k, v in d.items() if k not in ("resolved_lr", "resolved_head_lr")}
        if d.get("version", cls.VERSION) == 1:  # version 1: head at the body's rate, last epoch kept, epochs 3
            method = d.get("method", "full")
            lr = d.get("lr") if d.get("lr") is not None else DEFAULT_LR.get(method, DEFAULT_LR["full"])
            d = {"epochs": 3, **d, "version": cls.VERSION, "head_lr": lr, "early_stop": False}
        return super().from_dict(d)
