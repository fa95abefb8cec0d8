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

import math
from dataclasses import dataclass

from edgenlp.config import Config

PRESET_NAMES = ("quick", "full")


@dataclass(frozen=True)
class Preset:
    """How much work each stage may spend."""

    name: str
    train_limit: int | None  # fine-tuning rows (seeded subset); None = all
    max_steps: int | None  # fine-tuning optimizer steps; None = the library default
    priming_steps: int | None  # Learner priming steps; None = the library default (one epoch)
    finetune_seq_len: int
    prune_methods: tuple[str, ...]
    prune_samples: int  # training rows the retraining-free pruning reads
    prune_epochs: float | None  # CoFi mask-learning epochs; None = its default
    schemes: tuple[str, ...]  # quantization schemes the planner may pick
    profile_runs: int  # timed runs per latency measurement


PRESETS: dict[str, Preset] = {
    "quick": Preset("quick", train_limit=8000, max_steps=300, priming_steps=100, finetune_seq_len=64,
                    prune_methods=("fast", "importance"), prune_samples=512, prune_epochs=None,
                    schemes=("fp32", "int8", "int4"), profile_runs=20),
    "full": Preset("full", train_limit=None, max_steps=None, priming_steps=None, finetune_seq_len=128,
                   prune_methods=("fast", "importance", "cofi"), prune_samples=2048, prune_epochs=None,
                   schemes=("fp32", "int8", "int4", "mixed"), profile_runs=50),
}


def _check_budget(name: str, value) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value) or not value > 0:
        raise ValueError(f"{name} must be a positive number, got {value!r}")


@dataclass(frozen=True)
class CompressConfig(Config):
    """What to build and under which budgets.

    ``model`` is a registered name or a model directory; ``target`` a target
    name or a TOML file. ``latency_ms``, ``memory_mb`` and ``size_mb``
    override the target's default budgets (``None``: the target's), as do
    ``seq_len`` and ``threads`` for the latency budget. ``max_drop`` is the
    largest dev-accuracy drop (points) allowed against the uncompressed
    fine-tuned model. ``finetune_method`` is the fine-tuning method of the
    first stage (Learners with priming by default). ``max_attempts`` bounds the
    plan -> build -> verify iterations.
    """

    model: str = "minilm-l6"
    task: str = "sst2"
    target: str = "pixel-7"
    latency_ms: float | None = None
    memory_mb: float | None = None
    size_mb: float | None = None
    seq_len: int | None = None
    threads: int | None = None
    max_drop: float = 1.0
    preset: str = "quick"
    finetune_method: str = "learner"
    seed: int = 0
    max_attempts: int = 3

    def __post_init__(self) -> None:
        for name in ("model", "task", "target"):
            if not isinstance(getattr(self, name), str) or not getattr(self, name):
                raise ValueError(f"{name} must be a non-empty string, got {getattr(self, name)!r}")
        for name in ("latency_ms", "memory_mb", "size_mb"):
            _check_budget(name, getattr(self, name))
        for name in ("seq_len", "threads"):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
                raise ValueError(f"{name} must be a positive integer, got {v!r}")
        if isinstance(self.max_drop, bool) or not isinstance(self.max_drop, (int, float)) or not 0 <= self.max_drop <= 100:
            raise ValueError(f"max_drop must be in [0, 100] points, got {self.max_drop!r}")
        if self.preset not in PRESETS:
            raise ValueError(f"preset must be one of {', '.join(PRESET_NAMES)}, got {self.preset!r}")
        from edgenlp.finetune.config import METHODS

        if self.finetune_method not in METHODS:
            raise ValueError(f"finetune_method must be one of {', '.join(METHODS)}, got {self.finetune_method!r}")
        if not isinstance(self.max_attempts, int) or isinstance(self.max_attempts, bool) or self.max_attempts < 1:
            raise ValueError(f"max_attempts must be an integer >= 1, got {self.max_attempts!r}")

    @property
    def resolved_preset(self) -> Preset:
        return PRESETS[self.preset]
