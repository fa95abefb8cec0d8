"""The fine-tuning loop shared by every method.

:func:`finetune` tokenizes the task once, batches it in a seeded order with
per-batch dynamic padding, runs the method's phases with AdamW (linear warmup
then linear decay over the whole run; optimizer state carries across phases
for parameters that keep training; the task head in its own group at its own
learning rate), evaluates on dev after every epoch, keeps the best-dev weights
(early stopping) and returns the collapsed model with a report (the content
of ``finetune.json``).
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, replace
from pathlib import Path

import torch
from torch import nn

from edgenlp.data.tasks import Split, TaskData
from edgenlp.finetune.config import FinetuneConfig
from edgenlp.finetune.methods import METHOD_TYPES, Phase
from edgenlp.metrics import classification_report
from edgenlp.models.encoder import EncoderClassifier, ModelInfo
from edgenlp.utils import atomic_write_json, environment, peak_rss_mb, progress_display

log = logging.getLogger(__name__)

REPORT_VERSION = 2  # 2: lr per group, early_stop, device, epochs_planned; "dev" is the kept (best) epoch's


@dataclass
class FinetuneResult:
    """``model``: the fine-tuned model, plain ``nn.Linear`` layers only, eval mode; ``report``: ``finetune.json``."""

    model: EncoderClassifier
    report: dict

    def save(self, out_dir: str | Path, info: ModelInfo) -> Path:
        """Write a Hugging Face model directory with ``finetune.json`` inside (both atomically)."""
        from edgenlp.models.registry import save_pretrained

        from edgenlp.finetune.config import FinetuneConfig
        from edgenlp.recipe import Step

        step = Step("finetune", FinetuneConfig.from_dict(self.report["config"]), {"dev": self.report.get("dev", {})})
        out = save_pretrained(self.model, replace(info, recipe=(*info.recipe, step)), out_dir)
        atomic_write_json(Path(out) / "finetune.json", self.report)
        return Path(out)


# --------------------------------------------------------------------------- data


@dataclass
class Encoded:
    ids: list[list[int]]
    labels: list[int]

    def __len__(self) -> int:
        return len(self.ids)


def load_tokenizer(info: ModelInfo):
    """The model's WordPiece tokenizer (its ``vocab.txt``, or the default BERT vocabulary)."""
    from edgenlp.models.registry import default_vocab_file
    from edgenlp.models.tokenizer import build_tokenizer

    return build_tokenizer(Path(info.vocab_file) if info.vocab_file else default_vocab_file(), info.tokenizer)


def encode_split(tokenizer, split: Split, labels: tuple[str, ...], *, max_len: int) -> Encoded:
    from edgenlp.models.tokenizer import token_ids

    return Encoded(token_ids(tokenizer, split.texts, max_len=max_len), split.label_ids(labels))


def collate(data: Encoded, index: list[int], *, pad_id: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Ids, mask and labels for rows ``index``, padded to the longest row of the batch."""
    rows = [data.ids[i] for i in index]
    length = max(len(r) for r in rows)
    ids = torch.full((len(rows), length), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), length), dtype=torch.long)
    for j, r in enumerate(rows):
        ids[j, : len(r)] = torch.tensor(r, dtype=torch.long)
        mask[j, : len(r)] = 1
    return ids, mask, torch.tensor([data.labels[i] for i in index], dtype=torch.long)


@torch.no_grad()
def predict(model: nn.Module, data: Encoded, *, batch_size: int = 128, pad_id: int = 0, device: str = "cpu") -> list[int]:
    """The predicted label of every row of ``data`` (row order), in batches of similar length, eval mode."""
    was_training = model.training
    model.eval()
    order = sorted(range(len(data)), key=lambda i: len(data.ids[i]))  # less padding; the order of rows is restored
    pred = [0] * len(data)
    for start in range(0, len(order), batch_size):
        index = order[start : start + batch_size]
        ids, mask, _ = collate(data, index, pad_id=pad_id)
        for i, p in zip(index, model(ids.to(device), mask.to(device)).argmax(-1).tolist()):
            pred[i] = p
    model.train(was_training)
    return pred


def evaluate(model: nn.Module, data: Encoded, *, num_labels: int, batch_size: int = 128, pad_id: int = 0,
             device: str = "cpu") -> dict:
    """Accuracy (and macro-F1 for more than two labels) over ``data`` (:func:`predict`)."""
    pred = predict(model, data, batch_size=batch_size, pad_id=pad_id, device=device)
    return classification_report(pred, data.labels, num_labels=num_labels)


# --------------------------------------------------------------------------- loop helpers


def lr_factor(step: int, *, total: int, warmup: int) -> float:
    """Linear warmup over ``warmup`` steps, then linear decay to 0 at ``total``."""
    if step < warmup:
        return (step + 1) / warmup
    return max(0.0, (total - step) / max(1, total - warmup))


def build_optimizer(groups: list[dict], previous: torch.optim.Optimizer | None) -> torch.optim.AdamW:
    """AdamW over ``groups``; moments of parameters also in ``previous`` carry over."""
    opt = torch.optim.AdamW(groups, lr=groups[0]["lr"] if groups else 1e-3)
    if previous is not None:
        for group in opt.param_groups:
            for p in group["params"]:
                if p in previous.state:
                    opt.state[p] = previous.state[p]
    return opt


def train_step(model: nn.Module, optimizer: torch.optim.Optimizer, batch: tuple[torch.Tensor, torch.Tensor, torch.Tensor], *,
               loss_fn: nn.Module, max_grad_norm: float, lr_scale: float = 1.0) -> float:
    """One training step, the one :func:`finetune` takes: returns the batch's loss.

    Sets every group's learning rate to its ``base_lr`` x ``lr_scale`` (the
    schedule's factor), runs forward and ``loss_fn`` on ``batch`` (ids, mask,
    labels, already on the model's device), backward, clips the gradient norm
    of the optimizer's parameters to ``max_grad_norm``, steps the optimizer and
    clears the gradients. The loss comes back as a Python float, which waits
    for an accelerator to finish the step. ``optimizer`` is what
    :func:`build_optimizer` returns for a method phase's groups.
    """
    ids, mask, labels = batch
    for group in optimizer.param_groups:
        group["lr"] = group["base_lr"] * lr_scale
    loss = loss_fn(model(ids, mask), labels)
    loss.backward()
    params = [p for g in optimizer.param_groups for p in g["params"]]
    torch.nn.utils.clip_grad_norm_(params, max_grad_norm)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return float(loss.detach())


def count_trainable(groups: list[dict]) -> int:
    return sum(p.numel() for g in groups for p in g["params"])


def describe_groups(groups: list[dict]) -> list[dict]:
    """Per named group: the base learning rate and parameter count (decay / no-decay halves summed)."""
    out: dict[str, dict] = {}
    for g in groups:
        d = out.setdefault(g["name"], {"name": g["name"], "lr": g["base_lr"], "params": 0})
        d["params"] += sum(p.numel() for p in g["params"])
    return list(out.values())


def _progress(show: bool):
    """A rich bar on a terminal, plain lines on a redirected stderr (:func:`edgenlp.utils.progress_display`)."""
    return progress_display(show, _rich_bar)


def _rich_bar():
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("loss {task.fields[loss]:.4f}"),
        TextColumn("{task.fields[eps]:.1f} ex/s"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=Console(stderr=True),
        transient=False,
    )


# --------------------------------------------------------------------------- public API


def finetune(
    model: EncoderClassifier,
    info: ModelInfo,
    task: TaskData,
    config: FinetuneConfig,
    *,
    device: str = "cpu",
    show_progress: bool = False,
) -> FinetuneResult:
    """Fine-tune ``model`` (in place) on ``task`` with ``config.method``.

    Returns a :class:`FinetuneResult` whose model has the base architecture
    (Learners merged, FAR layers folded back), on the CPU, in eval mode. With
    ``config.early_stop`` (the default) it holds the weights of the epoch with
    the best dev accuracy (validation accuracy, with ``config.val_rows``: then dev is scored once, on the weights
    returned), and training ends after
    ``config.patience`` epochs without improvement (never in the first half
    of the planned steps: a new head can sit on a plateau for a while). ``device`` is
    ``"auto"``, ``"cpu"`` or ``"cuda"`` (:func:`edgenlp.utils.resolve_device`).
    Raises :class:`edgenlp.errors.EdgeNLPError` for a run that cannot work with
    this data (for example priming longer than the run) and ``ValueError`` for
    labels that do not match the model's head.

    >>> from edgenlp.models.registry import load_model                       # doctest: +SKIP
    >>> data = load_task("sst2")                                              # doctest: +SKIP
    >>> model, info = load_model("minilm-l6", labels=data.labels)             # doctest: +SKIP
    >>> res = finetune(model, info, data, FinetuneConfig(method="learner"))  # doctest: +SKIP
    >>> res.report["dev"]["accuracy"]                                         # doctest: +SKIP
    """
    from edgenlp.finetune.methods import plain_state_dict
    from edgenlp.utils import resolve_device

    if tuple(model.labels) != tuple(task.labels):
        raise ValueError(f"model labels {model.labels[:5]}... do not match task labels {task.labels[:5]}...")
    device = resolve_device(device)
    if config.threads:
        torch.set_num_threads(config.threads)
    torch.manual_seed(config.seed)  # dropout
    start_wall = time.perf_counter()

    tokenizer = load_tokenizer(info)
    pad_id = tokenizer.pad_token_id or 0
    tuned, watched, watch = task, task.dev, "dev"  # the split early stopping watches, and its name in the report
    if config.val_rows is not None:
        tuned, watched = task.hold_out(config.val_rows, seed=config.subset_seed)
        watch = "validation"
    train_split = tuned.train.sample(config.train_limit, seed=config.subset_seed)
    train = encode_split(tokenizer, train_split, task.labels, max_len=config.max_seq_len)
    scored = encode_split(tokenizer, watched, task.labels, max_len=config.max_seq_len)
    metric = "accuracy"  # early stopping keeps the best accuracy on the watched split

    steps_per_epoch = math.ceil(len(train) / config.batch_size)
    planned_epochs = config.epochs_for(len(train))
    total_steps = planned_epochs * steps_per_epoch
    if config.max_steps is not None:
        total_steps = min(total_steps, config.max_steps)
    warmup = int(config.warmup_fraction * total_steps)
    total_params = model.param_count()

    model.to(device)
    method = METHOD_TYPES[config.method](model, config, total_steps=total_steps, steps_per_epoch=steps_per_epoch)
    phases = method.phases()
    boundaries = []  # (first step, phase)
    first = 0
    for phase in phases:
        if phase.steps > 0:
            boundaries.append((first, phase))
        first += phase.steps
    log.info("%s on %s: %d train rows, %d steps (%d/epoch, %d epochs planned), phases %s", config.method, device,
             len(train), total_steps, steps_per_epoch, planned_epochs, ", ".join(f"{p.name}={p.steps}" for _, p in boundaries))

    order_gen = torch.Generator().manual_seed(config.seed)
    loss_fn = nn.CrossEntropyLoss()
    model.train()
    optimizer: torch.optim.Optimizer | None = None
    current: Phase | None = None
    phase_stats: list[dict] = []
    epochs: list[dict] = []
    best: dict | None = None  # {"epoch", "score", "state"}: the best-dev plain weights so far
    stopped_early = False
    step = 0
    show = _progress(show_progress)
    with show as progress:
        bar = progress.add_task(config.method, total=total_steps, loss=float("nan"), eps=0.0) if progress else None
        epoch = 0
        while step < total_steps:
            epoch += 1
            perm = torch.randperm(len(train), generator=order_gen).tolist()
            epoch_time, epoch_examples, loss_sum, loss_n = 0.0, 0, 0.0, 0
            for start in range(0, len(perm), config.batch_size):
                if step >= total_steps:
                    break
                if boundaries and boundaries[0][0] == step:
                    _, current = boundaries.pop(0)
                    groups = current.enter()
                    model.to(device)  # modules a phase adds (Learners) start on the CPU
                    optimizer = build_optimizer(groups, optimizer)
                    model.zero_grad(set_to_none=True)
                    phase_stats.append({"name": current.name, "steps": current.steps, "first_step": step,
                                        "trainable_params": count_trainable(groups),
                                        "trainable_percent": round(100.0 * count_trainable(groups) / total_params, 3),
                                        "lr_groups": describe_groups(groups), "train_s": 0.0})
                    log.info("step %d: phase %s, %d trainable parameters, lr %s", step, current.name,
                             count_trainable(groups), {g["name"]: g["lr"] for g in phase_stats[-1]["lr_groups"]})
                index = perm[start : start + config.batch_size]
                ids, mask, labels = (t.to(device) for t in collate(train, index, pad_id=pad_id))
                t0 = time.perf_counter()
                loss_value = train_step(model, optimizer, (ids, mask, labels), loss_fn=loss_fn,
                                        max_grad_norm=config.max_grad_norm,
                                        lr_scale=lr_factor(step, total=total_steps, warmup=warmup))
                dt = time.perf_counter() - t0  # train_step returns a float, so an accelerator has finished the step
                phase_stats[-1]["train_s"] += dt
                epoch_time += dt
                epoch_examples += len(index)
                loss_sum += loss_value * len(index)
                loss_n += len(index)
                step += 1
                if progress is not None:
                    progress.update(bar, advance=1, loss=loss_value, eps=epoch_examples / max(epoch_time, 1e-9),
                                    description=f"{config.method} e{epoch} {current.name}")
            epoch_metrics = evaluate(model, scored, num_labels=task.num_labels, batch_size=config.eval_batch_size,
                                     pad_id=pad_id, device=device)
            model.train()
            epochs.append({"epoch": epoch, "steps": step, "wall_s": round(epoch_time, 3),
                           "examples_per_s": round(epoch_examples / max(epoch_time, 1e-9), 2),
                           "train_loss": round(loss_sum / max(loss_n, 1), 5), watch: epoch_metrics})
            log.info("epoch %d: loss %.4f, %s %s, %.1fs", epoch, epochs[-1]["train_loss"], watch, epoch_metrics, epoch_time)
            if config.early_stop:
                score = epoch_metrics[metric]
                if best is None or score > best["score"]:
                    best = {"epoch": epoch, "score": score, "state": plain_state_dict(model)}
                elif epoch - best["epoch"] >= config.patience and total_steps > step >= total_steps // 2:
                    log.info("early stop after epoch %d: %s %s has not improved on epoch %d (%.4f) for %d epochs",
                             epoch, watch, metric, best["epoch"], best["score"], config.patience)
                    stopped_early = True
                    break

    extra = method.finish()
    best_epoch = len(epochs)
    if best is not None:
        best_epoch = best["epoch"]
        if best_epoch != len(epochs):
            model.load_state_dict(best["state"])
            log.info("restored the weights of epoch %d (%s %s %.4f)", best_epoch, watch, metric, best["score"])
        best = None
    per_epoch = [e[watch] for e in epochs]
    watched_report = {watch: per_epoch[best_epoch - 1] if epochs else {}, f"{watch}_last_epoch": per_epoch[-1] if epochs else {},
                      f"{watch}_per_epoch": per_epoch}
    if watch != "dev":  # dev is scored once, on the weights returned
        watched_report["dev"] = evaluate(model, encode_split(tokenizer, task.dev, task.labels, max_len=config.max_seq_len),
                                         num_labels=task.num_labels, batch_size=config.eval_batch_size, pad_id=pad_id,
                                         device=device)
        log.info("dev (scored once, on the weights returned): %s", watched_report["dev"])
    model.to("cpu")
    for p in model.parameters():
        p.requires_grad_(True)
    model.eval()
    for s in phase_stats:
        s["train_s"] = round(s["train_s"], 3)
        s["step_s"] = round(s["train_s"] / max(1, s["steps"]), 5)
    trained_examples = sum(e["examples_per_s"] * e["wall_s"] for e in epochs)
    train_time = sum(e["wall_s"] for e in epochs)
    final_phase = phase_stats[-1] if phase_stats else {"trainable_params": 0}
    lr_used = {}
    for s in phase_stats:
        for g in s["lr_groups"]:
            lr_used.setdefault(g["name"], g["lr"])
    report = {
        "version": REPORT_VERSION,
        "method": config.method,
        "seed": config.seed,
        "config": {**config.to_dict(), "resolved_head_lr": method.head_lr},  # the rate used: it follows the budget
        "model": info.to_dict(),
        "task": {**task.to_dict(), "train_rows_used": len(train), "validation_rows": len(scored) if watch != "dev" else 0,
                 "early_stop_watches": watch, "primary_metric": task.primary_metric},
        "device": device,
        "steps": step,
        "steps_planned": total_steps,
        "steps_per_epoch": steps_per_epoch,
        "epochs_planned": planned_epochs,
        "lr": lr_used,
        "early_stop": {"enabled": config.early_stop, "patience": config.patience, "stopped_early": stopped_early,
                       "best_epoch": best_epoch, "epochs_run": len(epochs)},
        "trainable_params": {
            "count": final_phase["trainable_params"],
            "percent": round(100.0 * final_phase["trainable_params"] / total_params, 3),
            "peak_count": max((s["trainable_params"] for s in phase_stats), default=0),
            "total": total_params,
        },
        "phases": phase_stats,
        "epochs": epochs,
        "wall_s_per_epoch": [e["wall_s"] for e in epochs],
        "examples_per_s": round(trained_examples / max(train_time, 1e-9), 2),
        "peak_rss_mb": round(peak_rss_mb(), 1),
        **watched_report,
        "total_wall_s": round(time.perf_counter() - start_wall, 2),
        "threads": torch.get_num_threads(),
        "environment": environment(),
        config.method.replace("-", "_"): extra,
    }
    return FinetuneResult(model, report)
