"""``edgenlp finetune``: fine-tune a model on a task and write a Hugging Face directory."""

from __future__ import annotations

import json
import logging
import sys

import dataclasses

import click

from edgenlp.errors import EdgeNLPError

log = logging.getLogger(__name__)


def _rank(value: str | None):
    if value is None or value == "auto":
        return value
    try:
        return int(value)
    except ValueError:
        raise EdgeNLPError(f"--rank must be a positive integer or 'auto', got {value!r}") from None


def _rank_overrides(items: tuple[str, ...]) -> tuple[tuple[str, int], ...]:
    out = []
    for item in items:
        pattern, sep, r = item.rpartition("=")
        if not sep or not pattern:
            raise EdgeNLPError(f"--rank-for must look like PATTERN=RANK (e.g. 'layers.*.ffn_*=16'), got {item!r}")
        try:
            out.append((pattern, int(r)))
        except ValueError:
            raise EdgeNLPError(f"--rank-for {item!r}: rank {r!r} is not an integer") from None
    return tuple(out)


def _learning_rates(items: tuple[str, ...]) -> dict[str, float]:
    """``--lr`` values: ``VALUE`` (the body) or ``GROUP=VALUE`` with GROUP in body, head, priming."""
    from edgenlp.finetune.config import LR_GROUPS

    out: dict[str, float] = {}
    for item in items:
        group, sep, value = item.rpartition("=")
        group = group if sep else "body"
        if group not in LR_GROUPS:
            raise EdgeNLPError(f"--lr {item!r}: unknown parameter group {group!r} (groups: {', '.join(LR_GROUPS)})")
        try:
            out[group] = float(value)
        except ValueError:
            raise EdgeNLPError(f"--lr {item!r}: {value!r} is not a number") from None
    return out


@click.command("finetune")
@click.argument("model")
@click.option("--task", required=True, help="sst2, banking77, or a folder with train.tsv and dev.tsv.")
@click.option("--method", default="full", show_default=True, help="full | learner | far | bitfit | freeze-ffn.")
@click.option("--rank", "rank", default=None, help="Learner rank: an integer or 'auto' (default hidden/12).")
@click.option("--rank-for", "rank_for", multiple=True, help="Learner rank per module pattern, PATTERN=RANK (repeatable).")
@click.option("--priming-epochs", type=float, default=None, help="Learner priming length in epochs (fractions allowed; default 1).")
@click.option("--priming-steps", type=int, default=None, help="Learner priming length in steps (instead of --priming-epochs).")
@click.option("--energy", type=float, default=None, help="--rank auto: share of ||dW||^2 each rank must capture (default 0.9).")
@click.option("--rank-budget", type=int, default=None, help="--rank auto: most Learner parameters (default: what the fixed rank uses).")
@click.option("--far-keep", type=float, default=None, help="FAR: fraction of FFN neurons kept trainable (default 0.1).")
@click.option("--far-priming", type=float, default=None, help="FAR: fraction of steps priming the whole model (default 0.1).")
@click.option("--epochs", type=int, default=None,
              help="Total epochs, priming included (default: from the training-set size, at least 600 steps, at most 10 epochs).")
@click.option("--train-limit", type=int, default=None, help="Train on a seeded subset of this many rows.")
@click.option("--max-steps", type=int, default=None, help="Stop after this many optimizer steps.")
@click.option("--batch-size", type=int, default=32, show_default=True)
@click.option("--max-seq-len", type=int, default=128, show_default=True)
@click.option("--lr", "lrs", multiple=True, metavar="[GROUP=]LR",
              help="Learning rate of a parameter group (repeatable): body (the default group; 5e-5 full/far/freeze-ffn, "
                   "1e-3 learner/bitfit), head (classifier + pooler; 2e-3), priming (learner; 5e-5).")
@click.option("--no-early-stop", "no_early_stop", is_flag=True,
              help="Keep the last epoch's weights and run every epoch (default: keep the best dev accuracy).")
@click.option("--patience", type=int, default=2, show_default=True, help="Early stopping: epochs without a better dev accuracy.")
@click.option("--device", default="auto", show_default=True, help="auto | cpu | cuda (training only; export and latency use the CPU).")
@click.option("--priming-lr", type=float, default=None, help="Learner: learning rate of weights trained while priming (default 5e-5).")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--threads", type=int, default=None, help="torch intra-op threads.")
@click.option("--data-dir", type=click.Path(file_okay=False), default=None, help="Folder holding the built-in task folders.")
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False), help="Output model directory.")
@click.option("--json", "json_file", default=None, help="Also write the report here ('-' for stdout).")
@click.option("-q", "--quiet", is_flag=True, help="No progress bar.")
def finetune_cmd(model, task, method, rank, rank_for, priming_epochs, priming_steps, energy, rank_budget, far_keep,
                 far_priming, epochs, train_limit, max_steps, batch_size, max_seq_len, lrs, no_early_stop, patience, device,
                 priming_lr, seed, threads,
                 data_dir, out_dir, json_file, quiet) -> None:
    """Fine-tune MODEL on a task; write a Hugging Face directory with finetune.json.

    \b
    Examples:
      edgenlp finetune minilm-l6 --task sst2 --method learner --train-limit 8000 --epochs 3 --out out/ft
      edgenlp finetune minilm-l6 --task banking77 --method learner --rank auto --priming-epochs 0.5 --out out/b77
      edgenlp finetune minilm-l6 --task sst2 --method far --far-keep 0.1 --out out/far
      edgenlp finetune minilm-l6 --task banking77 --method full --lr 5e-5 --lr head=2e-3 --epochs 2 --out out/full
    """
    from edgenlp.data.tasks import load_task
    from edgenlp.finetune.config import FarConfig, FinetuneConfig, LearnerConfig
    from edgenlp.finetune.trainer import finetune
    from edgenlp.models.registry import load_model
    from edgenlp.utils import atomic_write_json, resolve_device

    device = resolve_device(device)
    lr = _learning_rates(lrs)
    if "priming" in lr:
        if priming_lr is not None:
            raise EdgeNLPError("give the priming learning rate once (--lr priming=... or --priming-lr)")
        priming_lr = lr["priming"]
    learner_opts = {"rank": rank, "rank_for": rank_for, "priming_epochs": priming_epochs, "priming_steps": priming_steps,
                    "energy": energy, "rank_budget": rank_budget, "priming_lr": priming_lr}
    far_opts = {"far_keep": far_keep, "far_priming": far_priming}
    for opts, owner in ((learner_opts, "learner"), (far_opts, "far")):
        used = [k for k, v in opts.items() if v not in (None, ())]
        if used and method != owner:
            flags = ", ".join("--" + k.replace("_", "-") for k in used)
            raise EdgeNLPError(f"{flags} only apply to --method {owner} (got --method {method})")
    try:
        learner = None
        if method == "learner":
            kw = {"rank": _rank(rank), "ranks": _rank_overrides(rank_for), "priming_steps": priming_steps,
                  "energy": energy, "budget": rank_budget, "priming_lr": priming_lr, "priming_epochs": priming_epochs}
            learner = LearnerConfig(**{k: v for k, v in kw.items() if v is not None})
        far = None
        if method == "far":
            kw = {"keep": far_keep, "priming_fraction": far_priming}
            far = FarConfig(**{k: v for k, v in kw.items() if v is not None})
        config = FinetuneConfig(method=method, epochs=epochs, max_steps=max_steps, train_limit=train_limit,
                                batch_size=batch_size, lr=lr.get("body"), head_lr=lr.get("head"),
                                early_stop=not no_early_stop, patience=patience, seed=seed, max_seq_len=max_seq_len, threads=threads,
                                learner=learner, far=far)
    except ValueError as exc:
        raise EdgeNLPError(f"invalid option: {exc}") from None
    data = load_task(task, data_dir=data_dir)
    net, info = load_model(model, labels=data.labels, seed=seed)
    if max_seq_len > info.shape.max_positions:
        source = click.get_current_context().get_parameter_source("max_seq_len")
        if source is not click.core.ParameterSource.DEFAULT:  # an explicit length the model cannot take
            raise EdgeNLPError(f"--max-seq-len {max_seq_len} exceeds the model's {info.shape.max_positions} positions")
        config = dataclasses.replace(config, max_seq_len=info.shape.max_positions)  # the default, capped
    show = not quiet and sys.stderr.isatty()
    result = finetune(net, info, data, config, device=device, show_progress=show)
    out = result.save(out_dir, info)
    if json_file == "-":
        click.echo(json.dumps(result.report, indent=2))
    elif json_file:
        atomic_write_json(json_file, result.report)
    dev = result.report["dev"]
    tp = result.report["trainable_params"]
    es = result.report["early_stop"]
    kept = f" (epoch {es['best_epoch']} of {es['epochs_run']})" if es["enabled"] and es["epochs_run"] > 1 else ""
    click.echo(f"{method}: dev accuracy {dev.get('accuracy', float('nan')):.4f}{kept}"
               + (f", macro-F1 {dev['macro_f1']:.4f}" if "macro_f1" in dev else "")
               + f"; trainable {tp['count']:,} ({tp['percent']:.2f}%); wrote {out}", err=True)
