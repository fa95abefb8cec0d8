"""What the pruning methods share: tokenized data, batches, size measures, progress."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Iterator

import torch

from edgenlp.models.encoder import EncoderShape
from edgenlp.prune.config import PruneConfig
from edgenlp.prune.masks import encoder_flops, encoder_params
from edgenlp.utils import progress_display


@dataclass
class PruneData:
    """Tokenized train/dev rows (``edgenlp.finetune.trainer.Encoded``) and batching on ``device``."""

    train: object
    dev: object
    pad_id: int
    num_labels: int
    device: str = "cpu"

    def batches(self, *, rows: int | None, batch_size: int, seed: int) -> Iterator[tuple[torch.Tensor, ...]]:
        """Seeded shuffled batches (ids, mask, labels) over ``rows`` training rows (all when None), repeating."""
        from edgenlp.finetune.trainer import collate

        gen = torch.Generator().manual_seed(seed)
        n = len(self.train)
        limit = n if rows is None else min(rows, n)
        while True:
            perm = torch.randperm(n, generator=gen).tolist()[:limit]
            for start in range(0, len(perm), batch_size):
                batch = collate(self.train, perm[start : start + batch_size], pad_id=self.pad_id)
                yield tuple(t.to(self.device) for t in batch)

    def steps_per_epoch(self, batch_size: int) -> int:
        return math.ceil(len(self.train) / batch_size)


def model_device(model: torch.nn.Module) -> torch.device:
    return next(model.parameters()).device


def size_fn(config: PruneConfig, head_dim: int) -> Callable:
    """``f(hidden, heads, ffn)`` -> the size ``config.target`` measures (ints or tensors)."""
    if config.target in ("flops", "latency"):
        w = config.attention_weight if config.target == "latency" else 1.0
        return lambda hidden, heads, ffn: encoder_flops(hidden, head_dim, heads, ffn, seq_len=config.seq_len,
                                                        attention_weight=w)
    return lambda hidden, heads, ffn: encoder_params(hidden, head_dim, heads, ffn)


def shape_size(shape: EncoderShape, config: PruneConfig) -> float:
    return float(size_fn(config, shape.head_dim)(shape.hidden, shape.heads, shape.ffn))


@dataclass(frozen=True)
class UnitCosts:
    """Size of one head, one neuron and the fixed part of one layer at a given hidden width."""

    head: float
    neuron: float
    fixed: float

    @classmethod
    def of(cls, config: PruneConfig, head_dim: int, hidden: int) -> "UnitCosts":
        f = size_fn(config, head_dim)
        base = float(f(hidden, [0], [0]))
        return cls(float(f(hidden, [1], [0])) - base, float(f(hidden, [0], [1])) - base, base)


def _units(keep_heads, keep_neurons, head_scores, neuron_scores, costs: UnitCosts, *, kept: bool) -> list[tuple]:
    """``(score per unit of size, size, kind, layer, index)`` of every unit whose keep flag is ``kept``."""
    out = []
    for kind, keep, scores, cost in (("h", keep_heads, head_scores, costs.head), ("n", keep_neurons, neuron_scores, costs.neuron)):
        for i, (k, sc) in enumerate(zip(keep, scores)):
            out += [(float(sc[j]) / cost, cost, kind, i, j) for j in range(len(k)) if k[j] == kept]
    return out


def _kept_size(keep_heads: list[list[bool]], keep_neurons: list[list[bool]], costs: UnitCosts) -> float:
    """Size of the kept heads and neurons plus every layer's fixed part."""
    return len(keep_heads) * costs.fixed + costs.head * sum(map(sum, keep_heads)) + costs.neuron * sum(map(sum, keep_neurons))


def fit_to_budget(keep_heads: list[list[bool]], keep_neurons: list[list[bool]], head_scores: list[torch.Tensor],
                  neuron_scores: list[torch.Tensor], costs: UnitCosts, budget: float, *, fill: bool = False) -> None:
    """Drop kept units with the lowest score per unit of size until the total fits ``budget`` (in place).

    With ``fill``, a total below the budget is raised instead: dropped units come back, highest score per
    unit of size first, while they still fit (a mask learned short of convergence can overshoot the target).
    """
    size = _kept_size(keep_heads, keep_neurons, costs)
    if size <= budget:
        if fill:
            for _, cost, kind, i, j in sorted(_units(keep_heads, keep_neurons, head_scores, neuron_scores, costs, kept=False),
                                              key=lambda c: -c[0]):
                if size + cost <= budget:
                    (keep_heads if kind == "h" else keep_neurons)[i][j] = True
                    size += cost
        return
    for _, cost, kind, i, j in sorted(_units(keep_heads, keep_neurons, head_scores, neuron_scores, costs, kept=True),
                                      key=lambda c: c[0]):
        if size <= budget:
            break
        (keep_heads if kind == "h" else keep_neurons)[i][j] = False
        size -= cost


def snap_widths(keep_heads: list[list[bool]], keep_neurons: list[list[bool]], neuron_scores: list[torch.Tensor],
                costs: UnitCosts, budget: float, multiple: int) -> None:
    """Make every kept FFN width a multiple of ``multiple`` (or 0, or the layer's full width) within ``budget`` (in place).

    Each layer first drops its lowest-scored kept neurons down to a multiple. The size freed, and any budget
    left, then buys back whole blocks of ``multiple`` neurons (each layer's best dropped neurons), the block
    with the most score per unit of size first, while they fit. Heads are left as they are. Int4 group
    size and the runtime's GEMM tiles both favour widths that 32 divides.
    """
    if multiple <= 1:
        return
    order = []  # per layer: neuron indices, best score first
    for keep, scores in zip(keep_neurons, neuron_scores):
        order.append(sorted(range(len(keep)), key=lambda j, s=scores: -float(s[j])))
    widths = []
    for keep, idx in zip(keep_neurons, order):
        kept = [j for j in idx if keep[j]]
        w = len(kept)
        if w != len(keep) and w % multiple:
            for j in kept[w - w % multiple:]:
                keep[j] = False
            w -= w % multiple
        widths.append(w)
    size = _kept_size(keep_heads, keep_neurons, costs)
    open_layers = set(range(len(keep_neurons)))
    while open_layers:
        best, best_i, best_block = -math.inf, None, None
        for i in sorted(open_layers):
            full = len(keep_neurons[i])
            if widths[i] >= full:
                open_layers.discard(i)
                continue
            dropped = [j for j in order[i] if not keep_neurons[i][j]]
            block = dropped[: min(multiple, full - widths[i])]
            value = sum(float(neuron_scores[i][j]) for j in block) / (len(block) * costs.neuron)
            if value > best:
                best, best_i, best_block = value, i, block
        if best_i is None:
            break
        cost = len(best_block) * costs.neuron
        if size + cost > budget:
            open_layers.discard(best_i)
            continue
        for j in best_block:
            keep_neurons[best_i][j] = True
        widths[best_i] += len(best_block)
        size += cost


def progress_bar(show: bool, *, fields: tuple[str, ...] = ("info",)):
    """A rich progress bar on stderr, plain lines when stderr is not a terminal, or a no-op context giving None."""

    def rich_bar():
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

        return Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                        *(TextColumn(f"{{task.fields[{f}]}}") for f in fields), TimeElapsedColumn(),
                        TimeRemainingColumn(), console=Console(stderr=True), transient=False)

    return progress_display(show, rich_bar)
