"""``prune()``: learn masks with one method, apply them, report (``prune.json``)."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

import torch

from edgenlp.errors import EdgeNLPError
from edgenlp.models.encoder import EncoderClassifier, ModelInfo
from edgenlp.prune import cofi, fast, importance
from edgenlp.prune.config import CofiConfig, FastConfig, ImportanceConfig, PruneConfig
from edgenlp.prune.masks import MaskDict, size_report

log = logging.getLogger(__name__)

REPORT_VERSION = 1

# learn(model, data, config, *, teacher, progress) -> (masks, pruned model, extra report dict)
Learn = Callable[..., "tuple[MaskDict, EncoderClassifier, dict]"]


@dataclass(frozen=True)
class PruneMethod:
    """How one config type prunes: ``learn`` finds the masks and returns the pruned model.

    ``recovers``: ``learn`` runs the distilled fine-tune itself (CoFi, with the
    layer projection it learned); otherwise :func:`prune` runs
    ``config.finetune_epochs`` of it after ``learn``.
    """

    learn: Learn
    recovers: bool = False


# config type -> its method; prune() dispatches on type(config) (register_prune_method adds one)
PRUNE_METHODS: dict[type[PruneConfig], PruneMethod] = {
    CofiConfig: PruneMethod(cofi.learn, recovers=True),
    FastConfig: PruneMethod(fast.learn),
    ImportanceConfig: PruneMethod(importance.learn),
}


def register_prune_method(config_cls: type[PruneConfig], learn: Learn, *, recovers: bool = False) -> None:
    """Make ``prune(..., config_cls(...))`` call ``learn`` (a new method: subclass :class:`PruneConfig`)."""
    if not (isinstance(config_cls, type) and issubclass(config_cls, PruneConfig)) or config_cls is PruneConfig:
        raise TypeError(f"{config_cls!r} is not a PruneConfig subclass")
    PRUNE_METHODS[config_cls] = PruneMethod(learn, recovers=recovers)


def prune_method(config: PruneConfig) -> PruneMethod:
    """The registered method of ``config``'s type (TypeError for a type with none)."""
    try:
        return PRUNE_METHODS[type(config)]
    except KeyError:
        known = ", ".join(c.__name__ for c in PRUNE_METHODS)
        raise TypeError(f"no pruning method is registered for {type(config).__name__} (known: {known})") from None


@dataclass
class PruneResult:
    """``model``: the smaller plain model (eval mode); ``info``: recipe extended; ``masks``; ``report`` (= prune.json)."""

    model: EncoderClassifier
    info: ModelInfo
    masks: MaskDict
    report: dict

    def save(self, out_dir: str | Path) -> Path:
        """A model directory every verb accepts, with ``prune.json`` and ``masks.json`` inside (atomic)."""
        import json

        from edgenlp.models.registry import model_dir

        out = Path(out_dir)
        with model_dir(self.model, self.info, out) as tmp:
            (tmp / "prune.json").write_text(json.dumps(self.report, indent=2))
            (tmp / "masks.json").write_text(json.dumps(self.masks.to_dict(), indent=2))
        return out


def check_finetuned(model: EncoderClassifier, info: ModelInfo, task) -> None:
    """Raise :class:`EdgeNLPError` unless ``model`` was fine-tuned for ``task`` (labels and a finetune step)."""
    if tuple(model.labels) != tuple(task.labels):
        raise EdgeNLPError(f"{info.source}: the model's labels {list(model.labels)[:5]} are not task {task.name!r}'s "
                           f"{list(task.labels)[:5]}; prune a model fine-tuned for this task (edgenlp finetune)")
    if not any(step.type == "finetune" for step in info.recipe):
        raise EdgeNLPError(f"{info.source}: the recipe has no finetune step; pruning needs the fine-tuned model "
                           "as its teacher (run edgenlp finetune first)")


def _metric(report: dict) -> float:
    return float(report.get("accuracy", float("nan")))


def prune(model: EncoderClassifier, info: ModelInfo, data, config: PruneConfig, *, teacher: EncoderClassifier | None = None,
          device: str = "auto", progress: bool = True, dev_before: dict | None = None) -> PruneResult:
    """Prune ``model`` (fine-tuned on task ``data``) to ``config.target_sparsity`` with the method of ``config``'s type.

    ``teacher`` (default: ``model`` itself, unchanged) is what ``cofi`` and any
    recovery fine-tune distil from. ``device`` (``auto``/``cpu``/``cuda``, see
    :func:`edgenlp.utils.resolve_device`) is where gradients, mask learning and
    fine-tuning run; ``model`` is not changed and the result is on the CPU.
    ``dev_before`` (the dict ``prune.json`` reports as ``dev_before`` for this
    model and task) skips re-evaluating the unpruned model, e.g. when one
    model is pruned at several targets.
    Raises :class:`EdgeNLPError` for a model not fine-tuned for the task and
    :class:`~edgenlp.prune.masks.MaskError` for a ``mask_file`` that does not fit.

    >>> res = prune(model, info, load_task("sst2"), FastConfig(target_sparsity=0.5))  # doctest: +SKIP
    >>> res.save("out/pruned")                                                                          # doctest: +SKIP
    """
    from edgenlp.finetune.trainer import encode_split, evaluate, load_tokenizer
    from edgenlp.prune.common import PruneData, progress_bar
    from edgenlp.prune.distiller import distill_finetune
    from edgenlp.recipe import Step
    from edgenlp.utils import environment, resolve_device

    method = prune_method(config)
    check_finetuned(model, info, data)
    dev_name = resolve_device(device)
    masks_in = MaskDict.load(config.mask_file) if config.mask_file is not None else None
    if masks_in is not None:
        masks_in.check(model.shape)  # before any work: a mask file that does not fit is a user error
    if config.threads:
        torch.set_num_threads(config.threads)
    torch.manual_seed(config.seed)
    start = time.perf_counter()
    original_shape = model.shape
    model = _clone(model).to(dev_name) if dev_name != "cpu" else model.float().eval()
    if teacher is not None and dev_name != "cpu":
        teacher = _clone(teacher).to(dev_name)
    tokenizer = load_tokenizer(info)
    pad_id = tokenizer.pad_token_id or 0
    train_split = data.train.sample(config.train_limit, seed=config.seed) if config.train_limit else data.train
    pdata = PruneData(encode_split(tokenizer, train_split, data.labels, max_len=config.max_seq_len),
                      encode_split(tokenizer, data.dev, data.labels, max_len=config.max_seq_len), pad_id, data.num_labels,
                      dev_name)
    before = dev_before or evaluate(model, pdata.dev, num_labels=data.num_labels, pad_id=pad_id, device=dev_name)
    teacher = teacher if teacher is not None else model
    with progress_bar(progress) as bar:
        t0 = time.perf_counter()
        if masks_in is not None:
            from edgenlp.prune.surgery import apply_masks

            masks, pruned, extra = masks_in, apply_masks(model, masks_in), {"mask_file": config.mask_file}
        elif config.target_sparsity == 0.0:  # the identity: nothing to learn, nothing removed
            masks, pruned, extra = MaskDict.full(model.shape, method=config.method), _clone(model), {"identity": True}
        else:
            masks, pruned, extra = method.learn(model, pdata, config, teacher=teacher, progress=bar)
        learn_s = time.perf_counter() - t0
        if not method.recovers and config.finetune_epochs > 0 and config.target_sparsity > 0 and not config.mask_file:
            extra["finetune"] = distill_finetune(pruned, teacher, pdata, config, epochs=config.finetune_epochs,
                                                 progress=bar)
    pruned = pruned.eval()
    after = evaluate(pruned, pdata.dev, num_labels=data.num_labels, pad_id=pad_id, device=dev_name)
    pruned = pruned.cpu()
    sizes = size_report(original_shape, pruned.shape, num_labels=model.num_labels, seq_len=config.seq_len,
                        attention_weight=config.attention_weight if config.target == "latency" else None)
    masks = replace(masks, sparsity=sizes["sparsity"])
    wall = time.perf_counter() - start
    teacher_steps = [s.to_dict() for s in info.recipe if s.type == "finetune"]
    report = {
        "version": REPORT_VERSION,
        "method": config.method,
        "config": config.to_dict(),
        "target_sparsity": config.target_sparsity,
        "target": {"measure": config.target, "sparsity": config.target_sparsity, "seq_len": config.seq_len,
                   **({"attention_weight": config.attention_weight} if config.target == "latency" else {})},
        "achieved": sizes["sparsity"],
        "sizes": {"original": sizes["original"], "pruned": sizes["pruned"]},
        "shape": {"hidden": pruned.shape.hidden, "heads": list(pruned.shape.heads), "ffn": list(pruned.shape.ffn),
                  "original": {"hidden": model.shape.hidden, "heads": list(model.shape.heads), "ffn": list(model.shape.ffn)}},
        "dev_before": before,
        "dev_after": after,
        "accuracy_drop": round(_metric(before) - _metric(after), 6),
        "task": {**data.to_dict(), "train_rows_used": len(pdata.train)},
        "teacher": {"model": info.to_dict(), "source": info.source,
                    "finetune": teacher_steps[-1]["result"] if teacher_steps else None},
        "learn_wall_s": round(learn_s, 2),
        "wall_s": round(wall, 2),
        "seconds": round(wall, 2),  # the same wall time under the key the compress report reads
        "device": dev_name,
        "threads": torch.get_num_threads(),
        "details": extra,
        "environment": environment(),
    }
    step = Step("prune", config, {"achieved": sizes["sparsity"], "dev_before": before, "dev_after": after,
                                  "shape": report["shape"]})
    new_info = replace(info, shape=pruned.shape, recipe=(*info.recipe, step))
    log.info("%s at %.0f%%: %s -> %s in %.1fs", config.method, 100 * config.target_sparsity, before, after, wall)
    return PruneResult(pruned, new_info, masks, report)


def _clone(model: EncoderClassifier) -> EncoderClassifier:
    out = EncoderClassifier(model.shape, model.num_labels, labels=model.labels).to(
        device=model.pooler.weight.device, dtype=torch.float32)
    out.load_state_dict(model.state_dict())
    return out.eval()
