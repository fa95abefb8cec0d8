"""Recovery distillation: a pruned student learns from the unpruned teacher (the recipe's ``distill`` step).

After any pruning (``fast``, ``importance``, ``cofi``) the smaller model has
lost accuracy that a short distillation from the model it was pruned from
gives back. :func:`distill` trains the student with the trainer's own step
(:func:`edgenlp.finetune.trainer.train_step`) on the loss of
:class:`~edgenlp.prune.distiller.Distiller` (the one CoFi distils with) given a
fixed layer map instead of CoFi's dynamic matching:

- the logits: KL divergence to the teacher's at ``temperature``;
- the hidden states: MSE over the non-padding tokens between student layer
  ``i`` and the teacher layer it came from (:func:`layer_map`: surgery never
  removes a layer, so ``i`` against ``i``; a shallower student maps to evenly
  spaced teacher layers), through :func:`hidden_projection`: the identity
  where the hidden width was kept, a learned projection where hidden
  dimensions were removed, started as the scatter of the kept dimensions back
  to their places when the masks say which ones were kept;
- optionally the gold labels (``label_weight``).

::

    res = prune(model, info, task, FastConfig(target_sparsity=0.5))
    res = recover(res, model, info, task, DistillConfig(epochs=2))   # prune, then distil from the model it pruned
    res.save("out/fast50-recovered")

    d = distill(student, student_info, teacher, task, DistillConfig(), teacher_info=teacher_info)
    d.save("out/distilled")                                            # ``edgenlp distill``
"""

from __future__ import annotations

import json
import logging
import math
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

import torch
from torch import nn
from torch.nn import functional as F

from edgenlp.errors import EdgeNLPError
from edgenlp.models.encoder import EncoderClassifier, ModelInfo
from edgenlp.prune.config import DistillConfig
from edgenlp.prune.masks import Gates, MaskDict, masked_forward

log = logging.getLogger(__name__)

REPORT_VERSION = 1


class DistillError(EdgeNLPError):
    """A student and teacher that cannot be distilled together (vocabulary, labels, task)."""


# --------------------------------------------------------------------------- the map


def layer_map(student_layers: int, teacher_layers: int) -> tuple[tuple[int, int], ...]:
    """``(student, teacher)`` hidden-state index pairs (1-based: 0 is the embedding output), one per student layer.

    The same depth (pruning keeps every layer, a removed sublayer only stops
    computing) maps layer ``i`` to ``i``; a shallower student maps its layer
    ``i`` to the teacher layer at the same relative depth, the last to the last.

    >>> layer_map(3, 6)
    ((1, 2), (2, 4), (3, 6))
    """
    if student_layers < 1 or teacher_layers < 1:
        raise ValueError(f"layer counts must be >= 1, got {student_layers}, {teacher_layers}")
    return tuple((i, max(1, round(i * teacher_layers / student_layers))) for i in range(1, student_layers + 1))


def hidden_projection(student_hidden: int, teacher_hidden: int, kept: tuple[int, ...] | None = None) -> nn.Module:
    """Student hidden states -> the teacher's width for the hidden-state loss.

    ``kept`` (the teacher dimensions the surgery kept, in the student's order)
    starts a learned linear map as the scatter of each kept dimension back to
    its place; the same width without ``kept`` is the identity (nothing to
    learn); another width without ``kept`` a learned map started as the
    identity on the leading dimensions.
    """
    if kept is None and student_hidden == teacher_hidden:
        return nn.Identity()
    proj = nn.Linear(student_hidden, teacher_hidden)
    with torch.no_grad():
        proj.weight.zero_()
        proj.bias.zero_()
        if kept is not None:
            if len(kept) != student_hidden or any(not 0 <= k < teacher_hidden for k in kept):
                raise ValueError(f"kept hidden dimensions {list(kept)[:5]}... do not map {student_hidden} to {teacher_hidden}")
            proj.weight[torch.tensor(kept, dtype=torch.long), torch.arange(student_hidden)] = 1.0
        else:
            n = min(student_hidden, teacher_hidden)
            proj.weight[:n, :n] = torch.eye(n)
    return proj


# --------------------------------------------------------------------------- checks


def _vocab_bytes(info: ModelInfo | None) -> bytes | None:
    if info is None or not info.vocab_file or not Path(info.vocab_file).is_file():
        return None
    return Path(info.vocab_file).read_bytes()


def check_pair(student: EncoderClassifier, info: ModelInfo, teacher: EncoderClassifier, task,
               teacher_info: ModelInfo | None = None) -> None:
    """Raise :class:`DistillError` unless ``student`` can learn from ``teacher`` on ``task``.

    Both must read the same token ids (vocabulary size, and the same
    vocabulary file when both name one) and predict the same labels, which are
    the task's.
    """
    s_name, t_name = info.source or info.name, (teacher_info.source or teacher_info.name) if teacher_info else "the teacher"
    if student.shape.vocab_size != teacher.shape.vocab_size:
        raise DistillError(f"the student ({s_name}) has a vocabulary of {student.shape.vocab_size} tokens and the teacher "
                           f"({t_name}) one of {teacher.shape.vocab_size}; distillation needs the same tokenizer")
    sv, tv = _vocab_bytes(info), _vocab_bytes(teacher_info)
    if sv is not None and tv is not None and sv != tv:
        raise DistillError(f"the student's vocabulary ({info.vocab_file}) differs from the teacher's "
                           f"({teacher_info.vocab_file}); distillation needs the same tokenizer")
    if tuple(student.labels) != tuple(teacher.labels):
        raise DistillError(f"the student's labels {list(student.labels)[:5]} are not the teacher's {list(teacher.labels)[:5]}")
    if tuple(teacher.labels) != tuple(task.labels):
        raise DistillError(f"the models' labels {list(teacher.labels)[:5]} are not task {task.name!r}'s "
                           f"{list(task.labels)[:5]}; distil on the task the teacher was fine-tuned for")


def _masks_for(masks: MaskDict | None, student: EncoderClassifier, teacher: EncoderClassifier) -> MaskDict | None:
    """``masks`` when they turn the teacher's shape into the student's (else None: the generic map)."""
    if masks is None:
        return None
    try:
        masks.check(teacher.shape)
        shape = masks.pruned_shape(teacher.shape)
    except EdgeNLPError:
        return None
    if (shape.hidden, shape.heads, shape.ffn) != (student.shape.hidden, student.shape.heads, student.shape.ffn):
        return None
    return masks


# --------------------------------------------------------------------------- the loss for train_step


class _Pair(nn.Module):
    """The student, made to return what the loss reads: ``(logits, hidden states, ids, mask)``."""

    def __init__(self, student: EncoderClassifier) -> None:
        super().__init__()
        self.student = student
        self.gates = Gates.ones(student.shape, device=next(student.parameters()).device)

    def forward(self, ids: torch.Tensor, mask: torch.Tensor):
        logits, states = masked_forward(self.student, ids, mask, self.gates, hidden_states=True)
        return logits, states, ids, mask


class _Loss(nn.Module):
    """``loss_fn(output, labels)`` for ``train_step``: the distiller's loss plus the label loss; keeps the last parts."""

    def __init__(self, distiller: nn.Module, label_weight: float) -> None:
        super().__init__()
        self.distiller = distiller
        self.label_weight = label_weight
        self.parts: dict = {}

    def forward(self, output, labels: torch.Tensor) -> torch.Tensor:
        logits, states, ids, mask = output
        loss, parts = self.distiller(logits, states, ids, mask)
        if self.label_weight:
            ce = F.cross_entropy(logits, labels)
            loss = loss + self.label_weight * ce
            parts["ce"] = float(ce.detach())
        self.parts = parts
        return loss


@torch.no_grad()
def teacher_kl(student: EncoderClassifier, teacher: EncoderClassifier, data, *, pad_id: int = 0, batch_size: int = 128,
               device: str = "cpu") -> float:
    """Mean KL(teacher || student) of the output distributions (temperature 1) over the rows of ``data``."""
    from edgenlp.finetune.trainer import collate

    was = student.training
    student.eval()
    total, n = 0.0, 0
    for start in range(0, len(data), batch_size):
        ids, mask, _ = (t.to(device) for t in collate(data, list(range(start, min(len(data), start + batch_size))), pad_id=pad_id))
        s, t = student(ids, mask), teacher(ids, mask)
        total += float(F.kl_div(F.log_softmax(s, -1), F.log_softmax(t, -1), log_target=True, reduction="sum"))
        n += ids.shape[0]
    student.train(was)
    return total / max(n, 1)


# --------------------------------------------------------------------------- API


@dataclass
class DistillResult:
    """``model``: the student after distillation (CPU, eval mode); ``info``: recipe + ``distill``; ``report`` (= distill.json)."""

    model: EncoderClassifier
    info: ModelInfo
    report: dict

    def save(self, out_dir: str | Path) -> Path:
        """A model directory every verb accepts, with ``distill.json`` inside (atomic)."""
        from edgenlp.models.registry import model_dir

        out = Path(out_dir)
        with model_dir(self.model, self.info, out) as tmp:
            (tmp / "distill.json").write_text(json.dumps(self.report, indent=2))
        return out


def _copy(model: EncoderClassifier, device: str) -> EncoderClassifier:
    out = EncoderClassifier(model.shape, model.num_labels, labels=model.labels)
    out.load_state_dict(model.state_dict())
    return out.to(device=device, dtype=torch.float32)


def distill(student: EncoderClassifier, info: ModelInfo, teacher: EncoderClassifier, task, config: DistillConfig, *,
            teacher_info: ModelInfo | None = None, masks: MaskDict | None = None, device: str = "auto",
            progress: bool = False, on_step: Callable[[int, int, nn.Module], None] | None = None) -> DistillResult:
    """Train a copy of ``student`` to match ``teacher`` on ``task``'s training rows; neither model is changed.

    ``masks`` (the :class:`MaskDict` that pruned ``teacher`` into ``student``)
    starts the hidden-state projection from the kept dimensions; masks that
    do not fit the pair are ignored. ``device`` is ``auto``, ``cpu`` or
    ``cuda``; the result is on the CPU. ``on_step(done, steps, student)`` runs
    before the first step (``done`` 0) and after every optimizer step (the
    ``sparsify`` step applies its block masks there). Progress goes to the log (every tenth
    of the run) and, with ``progress``, to a bar on stderr. Raises
    :class:`DistillError` for a pair that cannot be distilled (see
    :func:`check_pair`) before any work.

    >>> d = distill(pruned, pruned_info, teacher, load_task("sst2"), DistillConfig(epochs=2))  # doctest: +SKIP
    >>> d.report["dev_before"]["accuracy"], d.report["dev_after"]["accuracy"]                  # doctest: +SKIP
    """
    from edgenlp.finetune.trainer import build_optimizer, encode_split, evaluate, load_tokenizer, lr_factor, train_step
    from edgenlp.prune.common import PruneData, progress_bar
    from edgenlp.prune.distiller import Distiller
    from edgenlp.recipe import Step
    from edgenlp.utils import environment, resolve_device

    if not isinstance(config, DistillConfig):
        raise TypeError(f"config must be a DistillConfig, got {type(config).__name__}")
    check_pair(student, info, teacher, task, teacher_info)
    dev_name = resolve_device(device)
    if config.threads:
        torch.set_num_threads(config.threads)
    torch.manual_seed(config.seed)
    start = time.perf_counter()
    tokenizer = load_tokenizer(info)
    pad_id = tokenizer.pad_token_id or 0
    train_split = task.train.sample(config.train_limit, seed=config.seed) if config.train_limit else task.train
    data = PruneData(encode_split(tokenizer, train_split, task.labels, max_len=config.max_seq_len),
                     encode_split(tokenizer, task.dev, task.labels, max_len=config.max_seq_len), pad_id, task.num_labels,
                     dev_name)
    model = _copy(student, dev_name)
    teach = _copy(teacher, dev_name).eval()
    for p in teach.parameters():
        p.requires_grad_(False)
    measure = dict(pad_id=pad_id, device=dev_name)
    teacher_dev = evaluate(teach, data.dev, num_labels=task.num_labels, **measure)
    dev_before = evaluate(model, data.dev, num_labels=task.num_labels, **measure)
    kl_before = teacher_kl(model, teach, data.dev, **measure)

    used = _masks_for(masks, model, teach)
    pairs = layer_map(model.shape.num_layers, teach.shape.num_layers)
    proj = hidden_projection(model.shape.hidden, teach.shape.hidden, used.hidden if used is not None else None)
    projection = ("identity" if isinstance(proj, nn.Identity) else "kept-dims" if used is not None and used.hidden
                  else "learned")
    distiller = Distiller(teach, config, proj=proj, layer_map=pairs).to(dev_name)
    loss_fn = _Loss(distiller, config.label_weight)
    pair = _Pair(model)
    groups = [{"name": "student", "params": [p for p in model.parameters() if p.numel()], "lr": config.lr,
               "base_lr": config.lr, "weight_decay": 0.0}]
    if list(distiller.proj.parameters()):
        groups.append({"name": "projection", "params": list(distiller.proj.parameters()), "lr": config.lr,
                       "base_lr": config.lr, "weight_decay": 0.0})
    optimizer = build_optimizer(groups, None)

    steps = max(1, int(math.ceil(config.epochs * data.steps_per_epoch(config.batch_size))))
    if config.max_steps is not None:
        steps = min(steps, config.max_steps)
    warmup = int(config.warmup_fraction * steps)
    every = max(1, steps // 10)
    log.info("distill %s from %s on %s: %d steps of %d rows, layer map %s, projection %s", info.source or info.name,
             (teacher_info.source or teacher_info.name) if teacher_info else "teacher", dev_name, steps, config.batch_size,
             pairs, projection)
    model.train()
    trace, losses, done, stopped = [], [], 0, None
    t0 = time.perf_counter()
    if on_step is not None:
        on_step(0, steps, model)
    with progress_bar(progress) as bar:
        task_id = bar.add_task("distill", total=steps, info="") if bar is not None else None
        for step, batch in zip(range(steps), data.batches(rows=None, batch_size=config.batch_size, seed=config.seed)):
            if config.budget_minutes is not None and time.perf_counter() - t0 > 60 * config.budget_minutes:
                stopped = "budget"
                log.info("distill: budget of %g min reached after %d of %d steps", config.budget_minutes, step, steps)
                break
            loss = train_step(pair, optimizer, batch, loss_fn=loss_fn, max_grad_norm=config.max_grad_norm,
                              lr_scale=lr_factor(step, total=steps, warmup=warmup))
            losses.append(loss)
            done = step + 1
            if on_step is not None:
                on_step(done, steps, model)
            parts = loss_fn.parts
            if bar is not None:
                bar.update(task_id, advance=1, info=f"loss {loss:.4f} kd {parts['kd']:.4f} layer {parts['layer']:.4f}")
            if done % every == 0 or done == steps:
                recent = losses[-every:]
                trace.append({"step": done, "loss": round(sum(recent) / len(recent), 5), "kd": round(parts["kd"], 5),
                              "layer": round(parts["layer"], 5)})
                log.info("distill step %d/%d: loss %.4f (kd %.4f, layer %.4f), %.2f steps/s", done, steps, trace[-1]["loss"],
                         parts["kd"], parts["layer"], done / max(time.perf_counter() - t0, 1e-9))
    train_s = time.perf_counter() - t0
    model.eval()
    dev_after = evaluate(model, data.dev, num_labels=task.num_labels, **measure)
    kl_after = teacher_kl(model, teach, data.dev, **measure)
    model = model.cpu()
    for p in model.parameters():
        p.requires_grad_(True)
    wall = time.perf_counter() - start
    report = {
        "version": REPORT_VERSION,
        "config": config.to_dict(),
        "student": {"source": info.source, "shape": {"hidden": model.shape.hidden, "heads": list(model.shape.heads),
                                                     "ffn": list(model.shape.ffn)}},
        "teacher": {"source": teacher_info.source if teacher_info else None, "dev": teacher_dev,
                    "shape": {"hidden": teach.shape.hidden, "heads": list(teach.shape.heads), "ffn": list(teach.shape.ffn)}},
        "task": {**task.to_dict(), "train_rows_used": len(data.train)},
        "layer_map": [list(p) for p in pairs],
        "projection": projection,
        "steps": done,
        "steps_planned": steps,
        "stopped": stopped,
        "dev_before": dev_before,
        "dev_after": dev_after,
        "kl_before": round(kl_before, 6),
        "kl_after": round(kl_after, 6),
        "trace": trace,
        "train_s": round(train_s, 2),
        "wall_s": round(wall, 2),
        "device": dev_name,
        "threads": torch.get_num_threads(),
        "environment": environment(),
    }
    step = Step("distill", config, {"teacher": report["teacher"]["source"], "steps": done, "dev_before": dev_before,
                                    "dev_after": dev_after, "kl_before": report["kl_before"], "kl_after": report["kl_after"]})
    log.info("distill: dev %s -> %s, KL to the teacher %.4f -> %.4f in %.1fs", dev_before, dev_after, kl_before, kl_after, wall)
    return DistillResult(model, replace(info, recipe=(*info.recipe, step)), report)


RECOVERY_KEYS = ("steps", "steps_planned", "stopped", "dev_before", "dev_after", "kl_before", "kl_after", "projection",
                 "layer_map", "train_s", "wall_s", "config")


def recover(result, teacher: EncoderClassifier, teacher_info: ModelInfo | None, task, config: DistillConfig, *,
            device: str = "auto", progress: bool = False):
    """Distil a :class:`~edgenlp.prune.api.PruneResult` from ``teacher`` (the model it pruned); a new ``PruneResult``.

    Its ``report`` (``prune.json``) keeps the pruned model's dev metrics as
    ``dev_pruned``, reports the recovered model's as ``dev_after`` (and the
    drop against it) and the distillation under ``recovery``; its recipe ends
    with the ``prune`` then the ``distill`` step.
    """
    from edgenlp.prune.api import PruneResult

    d = distill(result.model, result.info, teacher, task, config, teacher_info=teacher_info, masks=result.masks,
                device=device, progress=progress)
    report = dict(result.report)
    report["dev_pruned"] = report.get("dev_after")
    report["dev_after"] = d.report["dev_after"]
    before = report.get("dev_before", {}).get("accuracy", float("nan"))
    report["accuracy_drop"] = round(float(before) - float(d.report["dev_after"].get("accuracy", float("nan"))), 6)
    report["recovery"] = {k: d.report[k] for k in RECOVERY_KEYS}
    for key in ("wall_s", "seconds"):
        if key in report:
            report[key] = round(report[key] + d.report["wall_s"], 2)
    return PruneResult(d.model, d.info, result.masks, report)
