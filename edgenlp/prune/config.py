"""``PruneConfig``: one frozen config drives ``prune()``, ``edgenlp prune`` and the recipe step."""

from __future__ import annotations

from dataclasses import dataclass

from edgenlp.config import Config
from edgenlp.recipe import register_step

METHODS = ("cofi", "fast", "importance")
TARGETS = ("params", "flops")

# Per-method defaults for the length knobs (None in the config = use these).
DEFAULT_EPOCHS = {"cofi": 2.0, "fast": 0.0, "importance": 0.0}  # mask learning (cofi) / recovery (others)
DEFAULT_FINETUNE_EPOCHS = {"cofi": 1.0, "fast": 0.0, "importance": 0.0}


@dataclass(frozen=True)
class PruneConfig(Config):
    """How to prune.

    ``target_sparsity`` is the fraction of the size to remove, measured as
    ``target`` (``params``: parameters of the transformer layers; ``flops``:
    their FLOPs for one sequence of ``seq_len`` tokens). ``epochs`` is CoFi's
    mask-learning length; ``finetune_epochs`` the distilled fine-tune of the
    pruned model afterwards (every method can take one; only CoFi does by
    default). ``budget_minutes`` stops mask learning early when it runs long
    (the target schedule is still planned from ``epochs``). ``samples`` is
    the number of training rows ``fast`` uses for Fisher information and
    rescaling and ``importance`` for each of its ``iterations``.
    ``ffn_multiple`` makes every kept FFN width a multiple of it (or 0, or
    the full width), within the target: 32 matches the int4 group size and
    keeps the runtime's GEMM tiles full; 1 leaves widths as the method chose.

    CoFi's gate (``mask_lr``) and multiplier (``lagrangian_lr``) learning
    rates are 10x and 5x the paper's 0.01: the paper prunes for 20 epochs,
    the defaults here are sized for an epoch or two on a CPU, where the gates
    must move from "keep" to "drop" within a few hundred steps.
    """

    VERSION = 1

    method: str = "fast"
    target_sparsity: float = 0.5
    target: str = "params"
    seq_len: int = 128
    epochs: float | None = None
    finetune_epochs: float | None = None
    budget_minutes: float | None = None
    train_limit: int | None = None
    batch_size: int = 32
    max_seq_len: int = 128
    lr: float = 5e-5
    mask_lr: float = 0.1
    lagrangian_lr: float = 0.05
    droprate_init: float = 0.1
    prune_hidden: bool = True
    target_warmup: float = 0.5
    temperature: float = 2.0
    kd_weight: float = 0.1
    layer_weight: float = 0.9
    samples: int = 1024
    iterations: int = 4
    rescale: bool = True
    ffn_multiple: int = 1
    mask_file: str | None = None
    seed: int = 0
    threads: int | None = None

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ValueError(f"method must be one of {', '.join(METHODS)}, got {self.method!r}")
        if not isinstance(self.target_sparsity, (int, float)) or not 0.0 <= self.target_sparsity < 1.0:
            raise ValueError(f"target_sparsity must be in [0, 1) (a fraction to remove), got {self.target_sparsity}")
        if self.target not in TARGETS:
            raise ValueError(f"target must be one of {', '.join(TARGETS)}, got {self.target!r}")
        for name in ("seq_len", "batch_size", "max_seq_len", "samples", "iterations", "ffn_multiple"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        for name in ("epochs", "finetune_epochs", "budget_minutes"):
            v = getattr(self, name)
            if v is not None and v < 0:
                raise ValueError(f"{name} must be >= 0, got {v}")
        if self.train_limit is not None and self.train_limit < 1:
            raise ValueError(f"train_limit must be >= 1, got {self.train_limit}")
        for name in ("lr", "mask_lr", "lagrangian_lr", "temperature"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        if not 0.0 < self.droprate_init < 1.0:
            raise ValueError(f"droprate_init must be in (0, 1), got {self.droprate_init}")
        if not 0.0 <= self.target_warmup <= 1.0:
            raise ValueError(f"target_warmup must be in [0, 1], got {self.target_warmup}")
        if self.kd_weight < 0 or self.layer_weight < 0 or self.kd_weight + self.layer_weight == 0:
            raise ValueError("kd_weight and layer_weight must be >= 0 and not both 0")
        if self.threads is not None and self.threads < 1:
            raise ValueError(f"threads must be >= 1, got {self.threads}")

    @property
    def mask_epochs(self) -> float:
        return DEFAULT_EPOCHS[self.method] if self.epochs is None else float(self.epochs)

    @property
    def recovery_epochs(self) -> float:
        return DEFAULT_FINETUNE_EPOCHS[self.method] if self.finetune_epochs is None else float(self.finetune_epochs)


register_step("prune", PruneConfig)
