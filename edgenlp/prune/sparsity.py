"""Block sparsity: gradual magnitude pruning of weight blocks under distillation (the recipe's ``sparsify`` step).

Structured pruning removes whole heads, neurons and layers; this step keeps
every unit and zeroes blocks of weights inside the encoder's linears instead,
in the block shapes the kernels of ``runtime/kernels`` skip (1x4, 1x8, 4x1).
Two stages, as for structured pruning: learn a named mask dict
(:func:`block_masks`: the blocks of smallest L2 norm), then apply it
(:func:`apply_block_masks`). :func:`sparsify` grows the sparsity along the
cubic schedule (:func:`gmp_sparsity`) while the model distils from its dense
self (:func:`edgenlp.prune.recovery.distill`), so it composes with structured
pruning (sparsify a pruned model, with the unpruned one as teacher) and with
quantization (zero blocks stay zero in int8). The export swaps the sparse
linears for ``edgenlp::sparse_linear`` ops (:mod:`edgenlp.sparse`)::

    res = sparsify(model, info, task, SparsifyConfig(sparsity=0.8, block="1x4", epochs=2))
    res.save("out/sparse80")           # a model directory; its recipe ends with the sparsify step
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, replace
from pathlib import Path

import torch
from torch import nn

from edgenlp.models.encoder import EncoderClassifier, ModelInfo
from edgenlp.models.families import LAYER_LINEARS
from edgenlp.prune.config import SparsifyConfig
from edgenlp.sparse.ops import BLOCKS, block_sparsity

log = logging.getLogger(__name__)

REPORT_VERSION = 1

BlockMasks = dict[str, torch.Tensor]  # linear name -> bool [n][k], True where the weight is kept


def encoder_linears(model: nn.Module) -> tuple[str, ...]:
    """Names of the encoder's non-empty linears, layer by layer in :data:`LAYER_LINEARS` order (the head excluded)."""
    modules = dict(model.named_modules())
    names = (f"layers.{i}.{part}" for i in range(model.shape.num_layers) for part in LAYER_LINEARS)
    return tuple(n for n in names if isinstance(modules.get(n), nn.Linear) and modules[n].weight.numel() > 0)


def _block_view(w: torch.Tensor, rows: int, cols: int) -> tuple[torch.Tensor, int, int]:
    """``w`` zero-padded to whole blocks, as [row blocks, rows, column blocks, cols]."""
    n, k = w.shape
    nrb, kb = -(-n // rows), -(-k // cols)
    padded = torch.zeros(nrb * rows, kb * cols, dtype=w.dtype, device=w.device)
    padded[:n, :k] = w
    return padded.view(nrb, rows, kb, cols), nrb, kb


def block_masks(model: nn.Module, sparsity: float, block: str, names: tuple[str, ...] | None = None) -> BlockMasks:
    """For each linear in ``names`` (default: :func:`encoder_linears`), keep the blocks of largest L2 norm.

    Each linear loses ``floor(sparsity x blocks)`` blocks (ties: the first in
    row-major order stay). ``sparsity`` 0 keeps everything.
    """
    rows, cols = BLOCKS[block]
    modules = dict(model.named_modules())
    out: BlockMasks = {}
    for name in names if names is not None else encoder_linears(model):
        w = modules[name].weight.detach()
        view, nrb, kb = _block_view(w.float(), rows, cols)
        norms = view.pow(2).sum(dim=(1, 3)).flatten()  # [nrb * kb]
        drop = int(sparsity * norms.numel())
        keep = torch.ones_like(norms, dtype=torch.bool)
        if drop > 0:
            order = torch.argsort(norms, stable=True)
            keep[order[:drop]] = False
        full = keep.view(nrb, 1, kb, 1).expand(nrb, rows, kb, cols).reshape(nrb * rows, kb * cols)
        out[name] = full[: w.shape[0], : w.shape[1]].clone()
    return out


@torch.no_grad()
def apply_block_masks(model: nn.Module, masks: BlockMasks) -> nn.Module:
    """Zero the masked weights of ``model`` in place (the surgery of block sparsity); returns ``model``."""
    modules = dict(model.named_modules())
    for name, keep in masks.items():
        w = modules[name].weight
        w.mul_(keep.to(device=w.device, dtype=w.dtype))
    return model


def measured_sparsity(model: nn.Module, block: str, names: tuple[str, ...] | None = None) -> dict[str, float]:
    """Fraction of all-zero ``block`` blocks in each linear (what the kernels will skip)."""
    modules = dict(model.named_modules())
    return {name: round(block_sparsity(modules[name].weight, block), 6)
            for name in (names if names is not None else encoder_linears(model))}


def gmp_sparsity(step: int, steps: int, final: float, prune_fraction: float) -> float:
    """Zhu & Gupta's cubic schedule: 0 at step 0, ``final`` from ``prune_fraction x steps`` on.

    >>> [round(gmp_sparsity(s, 10, 0.8, 0.5), 3) for s in (0, 1, 5, 9)]
    [0.0, 0.39, 0.8, 0.8]
    """
    end = max(1.0, prune_fraction * steps)
    t = min(1.0, step / end)
    return final * (1.0 - (1.0 - t) ** 3)


@dataclass
class SparsifyResult:
    """``model``: block-sparse (CPU, eval mode); ``info``: recipe + ``sparsify``; ``masks``; ``report`` (= sparsify.json)."""

    model: EncoderClassifier
    info: ModelInfo
    masks: BlockMasks
    report: dict

    def save(self, out_dir: str | Path) -> Path:
        """A model directory every verb accepts, with ``sparsify.json`` inside (atomic)."""
        from edgenlp.models.registry import model_dir

        out = Path(out_dir)
        with model_dir(self.model, self.info, out) as tmp:
            (tmp / "sparsify.json").write_text(json.dumps(self.report, indent=2))
        return out


def sparsify(model: EncoderClassifier, info: ModelInfo, task, config: SparsifyConfig, *,
             teacher: EncoderClassifier | None = None, teacher_info: ModelInfo | None = None, device: str = "auto",
             progress: bool = False) -> SparsifyResult:
    """A copy of ``model`` with ``config.sparsity`` of every encoder linear's blocks zeroed, distilled as it goes.

    ``teacher`` defaults to ``model`` itself (dense). The masks follow
    :func:`gmp_sparsity`, re-chosen ``config.mask_updates`` times, and are
    applied after every optimizer step, so zeroed blocks stay zero. The last
    step's pattern is exact: every encoder linear ends at ``floor(sparsity x
    blocks)`` zero blocks or more.
    """
    from edgenlp.prune.recovery import distill
    from edgenlp.recipe import Step

    if not isinstance(config, SparsifyConfig):
        raise TypeError(f"config must be a SparsifyConfig, got {type(config).__name__}")
    start = time.perf_counter()
    names = encoder_linears(model)
    state: dict = {"masks": None, "sparsity": 0.0, "updates": []}

    def on_step(done: int, steps: int, student: nn.Module) -> None:
        prune_steps = max(1, int(config.prune_fraction * steps))
        every = max(1, prune_steps // config.mask_updates)
        target = gmp_sparsity(done, steps, config.sparsity, config.prune_fraction)
        due = done == 0 or (done <= prune_steps and (done % every == 0 or done == prune_steps)) or done == steps
        if due and (state["masks"] is None or target > state["sparsity"] or done == steps):
            if done == steps:
                target = config.sparsity
            state["masks"] = block_masks(student, target, config.block, names)
            state["sparsity"] = target
            state["updates"].append({"step": done, "sparsity": round(target, 4)})
        apply_block_masks(student, state["masks"])

    d = distill(model, info, teacher if teacher is not None else model, task, config,
                teacher_info=teacher_info if teacher is not None else info, device=device, progress=progress,
                on_step=on_step)
    sparse = d.model
    masks = block_masks(sparse, config.sparsity, config.block, names)
    apply_block_masks(sparse, masks)  # the final pattern, on the model as returned
    per_linear = measured_sparsity(sparse, config.block, names)
    report = {
        "version": REPORT_VERSION,
        "config": config.to_dict(),
        "block": config.block,
        "sparsity": config.sparsity,
        "linears": per_linear,
        "mean_sparsity": round(sum(per_linear.values()) / max(1, len(per_linear)), 6),
        "mask_updates": state["updates"],
        "distill": {k: d.report[k] for k in ("steps", "steps_planned", "stopped", "dev_before", "dev_after",
                                             "kl_before", "kl_after", "train_s", "device", "threads")},
        "wall_s": round(time.perf_counter() - start, 2),
    }
    step = Step("sparsify", config, {"block": config.block, "linears": sorted(per_linear),
                                     "mean_sparsity": report["mean_sparsity"], "steps": d.report["steps"],
                                     "dev_before": d.report["dev_before"], "dev_after": d.report["dev_after"]})
    log.info("sparsify: %s blocks at %.0f%% in %d linears, dev %s -> %s in %.1fs", config.block, 100 * config.sparsity,
             len(per_linear), d.report["dev_before"], d.report["dev_after"], report["wall_s"])
    return SparsifyResult(sparse, replace(info, recipe=(*info.recipe, step)), masks, report)
