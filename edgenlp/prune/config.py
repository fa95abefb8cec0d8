"""One frozen config per pruning method; each drives ``prune()``, ``edgenlp prune`` and the recipe step.

:class:`PruneConfig` holds what every method shares (the target, the data, the
distilled recovery fine-tune, the width rounding); :class:`CofiConfig`,
:class:`FastConfig` and :class:`ImportanceConfig` add what only their method
reads, and the config's type picks the method (``prune()`` dispatches on it)::

    prune(model, info, task, FastConfig(target_sparsity=0.5, samples=512))
    prune(model, info, task, CofiConfig(target_sparsity=0.7, epochs=2, budget_minutes=30))

``prune_config("cofi", ...)`` builds one from a method name (the CLI, the
compress pipeline). Version 1 of the recipe step stored a single
``PruneConfig`` with a ``method`` string; :meth:`PruneConfig.upgrade` reads such
a dict into the method's class (fields that method never read are dropped,
unset per-method lengths become that method's defaults, which are what ran).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, ClassVar

from edgenlp.config import (Config, check_bool, check_choice, check_int, check_positive, check_range, knob)

log = logging.getLogger(__name__)

TARGETS = ("params", "flops", "latency")
DEFAULT_METHOD = "fast"


@dataclass(frozen=True)
class PruneConfig(Config):
    """What every pruning method shares; not a method itself (use a subclass).

    ``target_sparsity`` is the fraction of the size to remove, measured as
    ``target`` (``params``: parameters of the transformer layers; ``flops``:
    their FLOPs for one sequence of ``seq_len`` tokens; ``latency``: those
    FLOPs with every attention-core FLOP counted ``attention_weight`` times,
    the device's cost of one attention-core FLOP in linear-layer FLOPs, so a
    head is priced at what it costs to run; ``compress`` sets the weight from
    the target's cost model). ``finetune_epochs``
    is the distilled fine-tune of the pruned model from the teacher
    (``temperature``, ``kd_weight`` on the logits, ``layer_weight`` on the
    hidden states). ``ffn_multiple`` makes every kept FFN width a multiple of it
    (or 0, or the full width), within the target: 32 matches the int4 group
    size and keeps the runtime's GEMM tiles full; 1 leaves widths as the method
    chose. ``mask_file`` applies a saved :class:`~edgenlp.prune.masks.MaskDict`
    instead of learning one.
    """

    VERSION = 2  # 2: one class per method (version 1: a single PruneConfig with a ``method`` string)
    method: ClassVar[str] = ""

    target_sparsity: float = knob(0.5, help="Fraction of the size to remove, in [0, 1).")
    target: str = knob("params", choices=TARGETS,
                       help="What the sparsity measures: encoder parameters, encoder FLOPs at --seq-len, or latency "
                            "(FLOPs with the attention core weighted by --attention-weight).")
    attention_weight: float = knob(1.0, help="Latency target: what one attention-core FLOP costs in linear-layer FLOPs "
                                             "on the device (compress derives it from the target's cost model).")
    seq_len: int = knob(128, help="Sequence length of the FLOPs measure (and of the size report).")
    finetune_epochs: float = knob(0.0, help="Epochs of distilled fine-tuning of the pruned model from the teacher.")
    train_limit: int | None = knob(None, help="Use a seeded subset of this many training rows (default: all).")
    batch_size: int = knob(32, help="Batch size of gradients, mask learning and fine-tuning.")
    max_seq_len: int = knob(128, help="Longest tokenized training/dev sentence (longer ones are truncated).")
    lr: float = knob(5e-5, help="Learning rate of the model's weights while learning masks or fine-tuning.")
    temperature: float = knob(2.0, help="Distillation: softmax temperature of the teacher's and student's logits.")
    kd_weight: float = knob(0.1, help="Distillation: weight of the logit (KL) loss.")
    layer_weight: float = knob(0.9, help="Distillation: weight of the hidden-state (MSE) loss.")
    ffn_multiple: int = knob(1, help="Keep FFN widths that this divides (or 0, or the full width); "
                                     "32 suits int4 groups and GEMM tiles.")
    mask_file: str | None = knob(None, help="Apply this masks.json (a MaskDict) instead of learning masks.")
    seed: int = knob(0, help="Seed of the data order and sampling.")
    threads: int | None = knob(None, help="torch intra-op threads (default: torch's choice).")

    def __post_init__(self) -> None:
        if type(self) is PruneConfig or not self.method:
            raise TypeError(f"PruneConfig is the shared base; use one of {', '.join(c.__name__ for c in METHOD_CONFIGS.values())}")
        check_range("target_sparsity", self.target_sparsity, 0.0, 1.0, high_open=True)
        check_choice("target", self.target, TARGETS)
        check_positive("attention_weight", self.attention_weight)
        for name in ("seq_len", "batch_size", "max_seq_len", "ffn_multiple"):
            check_int(name, getattr(self, name), minimum=1)
        check_range("finetune_epochs", self.finetune_epochs, 0.0)
        check_int("train_limit", self.train_limit, minimum=1, allow_none=True)
        check_int("seed", self.seed, minimum=0)
        for name in ("lr", "temperature"):
            check_positive(name, getattr(self, name))
        check_range("kd_weight", self.kd_weight, 0.0)
        check_range("layer_weight", self.layer_weight, 0.0)
        if self.kd_weight + self.layer_weight == 0:
            raise ValueError("kd_weight and layer_weight must be >= 0 and not both 0")
        check_int("threads", self.threads, minimum=1, allow_none=True)

    @classmethod
    def upgrade(cls, d: dict[str, Any]) -> dict[str, Any]:
        """Version 1 (one ``PruneConfig`` with ``method``) -> the method's class, as what it ran."""
        if d.get("type", "PruneConfig") != "PruneConfig" or d.get("version", 1) != 1:
            return d
        method = d.get("method", DEFAULT_METHOD)
        if method not in METHOD_CONFIGS:
            raise ValueError(f"method must be one of {', '.join(METHOD_CONFIGS)}, got {method!r}")
        target = METHOD_CONFIGS[method]
        keep = set(target.field_names())
        out: dict[str, Any] = {"type": target.__name__, "version": target.VERSION}
        for name, value in d.items():
            if name in ("type", "version", "method"):
                continue
            if name not in keep:
                unknown = name not in _V1_FIELDS
                if unknown:  # not a version-1 field: let from_dict report it
                    out[name] = value
                continue  # a field this method never read
            if value is None and name in ("epochs", "finetune_epochs"):
                continue  # version 1's None meant the method's default, which the new class holds
            out[name] = value
        return out


@dataclass(frozen=True)
class CofiConfig(PruneConfig):
    """CoFi: L0 gates on heads, FFN neurons and hidden dimensions learned with distillation, then a fine-tune.

    ``epochs`` is the mask-learning length (the target ramps up over the first
    ``target_warmup`` of it); ``budget_minutes`` stops mask learning early when
    it runs long. The gate (``mask_lr``) and multiplier (``lagrangian_lr``)
    learning rates are 10x and 5x the paper's 0.01: the paper prunes for 20
    epochs, the defaults here are sized for an epoch or two on a CPU, where the
    gates must move from "keep" to "drop" within a few hundred steps.
    """

    method: ClassVar[str] = "cofi"

    finetune_epochs: float = knob(1.0, help="Epochs of distilled fine-tuning of the pruned model from the teacher.")
    epochs: float = knob(2.0, help="Mask-learning epochs.")
    budget_minutes: float | None = knob(None, help="Stop mask learning after this many minutes (default: no limit).")
    mask_lr: float = knob(0.1, help="Learning rate of the L0 gates.")
    lagrangian_lr: float = knob(0.05, help="Learning rate of the Lagrange multipliers that enforce the target.")
    droprate_init: float = knob(0.1, help="Initial drop probability of every gate, in (0, 1).")
    prune_hidden: bool = knob(True, help="Also prune hidden dimensions (one mask shared by every layer).")
    target_warmup: float = knob(0.5, help="Fraction of mask learning over which the target ramps up from 0, in [0, 1].")

    def __post_init__(self) -> None:
        super().__post_init__()
        check_range("epochs", self.epochs, 0.0)
        check_range("budget_minutes", self.budget_minutes, 0.0, allow_none=True)
        for name in ("mask_lr", "lagrangian_lr"):
            check_positive(name, getattr(self, name))
        check_range("droprate_init", self.droprate_init, 0.0, 1.0, low_open=True, high_open=True)
        check_bool("prune_hidden", self.prune_hidden)
        check_range("target_warmup", self.target_warmup, 0.0, 1.0)


@dataclass(frozen=True)
class FastConfig(PruneConfig):
    """Retraining-free pruning (Kwon et al. 2022): Fisher-information masks, then least-squares rescaling."""

    method: ClassVar[str] = "fast"

    samples: int = knob(1024, help="Training rows whose gradients score the heads and neurons (and that fit the rescaling).")
    rescale: bool = knob(True, help="Rescale the kept units by least squares against the unpruned layer outputs.")

    def __post_init__(self) -> None:
        super().__post_init__()
        check_int("samples", self.samples, minimum=1)
        check_bool("rescale", self.rescale)


@dataclass(frozen=True)
class ImportanceConfig(PruneConfig):
    """Gradient importance of heads and neurons (Michel et al. 2019), pruned in ``iterations`` rounds."""

    method: ClassVar[str] = "importance"

    samples: int = knob(1024, help="Training rows whose gradients score the heads and neurons, per iteration.")
    iterations: int = knob(4, help="Rounds of scoring and pruning towards the target.")

    def __post_init__(self) -> None:
        super().__post_init__()
        check_int("samples", self.samples, minimum=1)
        check_int("iterations", self.iterations, minimum=1)


# method name -> its config class (the config's type is the method; prune() dispatches on it)
METHOD_CONFIGS: dict[str, type[PruneConfig]] = {c.method: c for c in (CofiConfig, FastConfig, ImportanceConfig)}
METHODS = tuple(METHOD_CONFIGS)

# Every field of the version-1 PruneConfig.
_V1_FIELDS = frozenset({
    "method", "target_sparsity", "target", "seq_len", "epochs", "finetune_epochs", "budget_minutes", "train_limit",
    "batch_size", "max_seq_len", "lr", "mask_lr", "lagrangian_lr", "droprate_init", "prune_hidden", "target_warmup",
    "temperature", "kd_weight", "layer_weight", "samples", "iterations", "rescale", "ffn_multiple", "mask_file", "seed",
    "threads",
})  # fmt: skip


def prune_config(method: str, **fields: Any) -> PruneConfig:
    """The config of ``method`` (``cofi``, ``fast``, ``importance``) with ``fields``.

    Raises ValueError for an unknown method or a field the method does not take.

    >>> prune_config("importance", target_sparsity=0.3, iterations=2)  # doctest: +ELLIPSIS
    ImportanceConfig(target_sparsity=0.3, ..., samples=1024, iterations=2)
    """
    check_choice("method", method, METHODS)
    cls = METHOD_CONFIGS[method]
    extra = sorted(set(fields) - set(cls.field_names()))
    if extra:
        owners = {n: [m for m, c in METHOD_CONFIGS.items() if n in c.field_names()] for n in extra}
        raise ValueError("; ".join(f"{n} is not a setting of method {method!r}"
                                   + (f" (only of {', '.join(owners[n])})" if owners[n] else "") for n in extra))
    return cls(**fields)


@dataclass(frozen=True)
class DistillConfig(Config):
    """Recovery distillation: a (pruned) student learns from its unpruned teacher; the recipe's ``distill`` step.

    The loss is ``kd_weight`` x the logit KL divergence at ``temperature``
    (scaled by its square) plus ``layer_weight`` x the hidden-state MSE over
    non-padding tokens, summed over the layer map (student layer i against the
    teacher layer the surgery kept it from; through a learned projection where
    hidden dimensions were removed), plus ``label_weight`` x the cross-entropy
    on the gold labels. Training runs ``epochs`` over ``train_limit`` rows
    (all by default), stops at ``max_steps`` or after ``budget_minutes``,
    with AdamW at ``lr``, linear warmup over ``warmup_fraction`` then linear
    decay, and the gradient norm clipped at ``max_grad_norm``.
    """

    epochs: float = knob(1.0, help="Epochs of distillation over the training rows.")
    max_steps: int | None = knob(None, help="Stop after this many optimizer steps (default: the epochs' steps).")
    budget_minutes: float | None = knob(None, help="Stop after this many minutes of training (default: no limit).")
    lr: float = knob(5e-5, help="Learning rate of the student's weights (and of the hidden-state projection).")
    batch_size: int = knob(32, help="Batch size.")
    max_seq_len: int = knob(128, help="Longest tokenized training/dev sentence (longer ones are truncated).")
    temperature: float = knob(2.0, help="Softmax temperature of the teacher's and student's logits.")
    kd_weight: float = knob(1.0, help="Weight of the logit (KL) loss.")
    layer_weight: float = knob(1.0, help="Weight of the hidden-state (MSE) loss through the layer map.")
    label_weight: float = knob(0.0, help="Weight of the cross-entropy on the gold labels.")
    warmup_fraction: float = knob(0.1, help="Fraction of the steps over which the learning rate warms up, in [0, 1).")
    max_grad_norm: float = knob(1.0, help="Clip the gradient norm to this.")
    train_limit: int | None = knob(None, help="Use a seeded subset of this many training rows (default: all).")
    seed: int = knob(0, help="Seed of the data order and dropout.")
    threads: int | None = knob(None, help="torch intra-op threads (default: torch's choice).")

    def __post_init__(self) -> None:
        check_range("epochs", self.epochs, 0.0, low_open=True)
        check_int("max_steps", self.max_steps, minimum=1, allow_none=True)
        check_range("budget_minutes", self.budget_minutes, 0.0, low_open=True, allow_none=True)
        check_positive("lr", self.lr)
        for name in ("batch_size", "max_seq_len"):
            check_int(name, getattr(self, name), minimum=1)
        check_positive("temperature", self.temperature)
        for name in ("kd_weight", "layer_weight", "label_weight"):
            check_range(name, getattr(self, name), 0.0)
        if self.kd_weight + self.layer_weight + self.label_weight == 0:
            raise ValueError("kd_weight, layer_weight and label_weight must not all be 0")
        check_range("warmup_fraction", self.warmup_fraction, 0.0, 1.0, high_open=True)
        check_positive("max_grad_norm", self.max_grad_norm)
        check_int("train_limit", self.train_limit, minimum=1, allow_none=True)
        check_int("seed", self.seed, minimum=0)
        check_int("threads", self.threads, minimum=1, allow_none=True)

    # the knobs that do not change what is learned: the seed (a budget holds across seeds), the thread count, and a
    # wall-clock limit (which stops a run early on a slow host and is recorded with the run, not the budget)
    NOT_BUDGET: ClassVar[tuple[str, ...]] = ("seed", "threads", "budget_minutes")

    def budget(self) -> dict[str, Any]:
        """What this distillation spends and how it learns: every knob but :attr:`NOT_BUDGET`, as plain values.

        The accuracy prior keys a recovered pruning row by it, and ``compress``
        recovers with exactly the budget its rows were measured at. Where
        ``max_steps`` is set it is the length of the run and ``epochs`` is left
        out: the prior's rows ran their ``max_steps`` (``tools/bench/accuracy_prior.py``
        checks), and ``compress`` sets ``epochs`` high enough that ``max_steps``
        ends its runs on any task, however many rows it has.
        """
        d = self.to_dict()
        skip = (*self.NOT_BUDGET, "epochs") if self.max_steps is not None else self.NOT_BUDGET
        return {k: d[k] for k in self.field_names() if k not in skip}


SPARSE_BLOCKS = ("1x4", "1x8", "4x1")


@dataclass(frozen=True)
class SparsifyConfig(DistillConfig):
    """Block sparsity by gradual magnitude pruning (GMP) under distillation; the recipe's ``sparsify`` step.

    Every encoder linear (queries, keys, values, attention outputs, FFN in and
    out) loses the same ``sparsity`` fraction of its ``block``-shaped weight
    blocks (1x4: one output channel x 4 consecutive input channels; the
    shapes the block-sparse kernels of ``runtime/kernels`` run). The fraction
    grows along the cubic schedule of Zhu & Gupta (2017) from 0 to
    ``sparsity`` over the first ``prune_fraction`` of the steps, re-choosing
    the blocks of smallest L2 norm ``mask_updates`` times; the rest of the run
    trains with the final pattern. Training is the recovery distillation of
    :class:`DistillConfig` (its every knob) from the dense model as teacher,
    so a sparsified model learns from the model it started as.
    """

    sparsity: float = knob(0.8, help="Fraction of every encoder linear's weight blocks set to zero, in (0, 1).")
    block: str = knob("1x4", choices=SPARSE_BLOCKS, help="Block shape: output channels x consecutive input channels.")
    prune_fraction: float = knob(0.7, help="Share of the steps over which the sparsity grows to its target, in (0, 1].")
    mask_updates: int = knob(20, help="How many times the pattern is re-chosen while the sparsity grows.")
    epochs: float = knob(2.0, help="Epochs of distillation over the training rows.")

    def __post_init__(self) -> None:
        super().__post_init__()
        check_range("sparsity", self.sparsity, 0.0, 1.0, low_open=True, high_open=True)
        check_choice("block", self.block, SPARSE_BLOCKS)
        check_range("prune_fraction", self.prune_fraction, 0.0, 1.0, low_open=True)
        check_int("mask_updates", self.mask_updates, minimum=1)
