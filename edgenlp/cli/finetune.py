"""``edgenlp finetune``: fine-tune a model on a task and write a Hugging Face directory.

The options are the fields of :class:`FinetuneConfig` and of the method's own
config (:class:`LearnerConfig`, :class:`FarConfig` with ``--far-`` flags); an
option of another method is an error.
"""

from __future__ import annotations

import dataclasses
import logging

import click

from edgenlp.cli.options import (Spelling, build_config, config_options, device_option, emit_json, flags_of, given,
                                 json_options, json_request, out_option, quiet_option, task_options)
from edgenlp.errors import EdgeNLPError
from edgenlp.finetune.config import (DEFAULT_HEAD_LR, DEFAULT_LR, LR_GROUPS, METHOD_CONFIGS, METHODS, FarConfig, FinetuneConfig,
                                     LearnerConfig, rates_by_method)

log = logging.getLogger(__name__)


class RankType(click.ParamType):
    """A Learner rank: a positive integer or ``auto``."""

    name = "rank"

    def get_metavar(self, param, ctx=None) -> str:
        return "INTEGER|auto"

    def convert(self, value, param, ctx):
        if value is None or value == "auto" or isinstance(value, int):
            return value
        try:
            return int(value)
        except ValueError:
            self.fail(f"--rank must be a positive integer or 'auto', got {value!r}", param, ctx)


class PatternRank(click.ParamType):
    """``PATTERN=RANK`` (``layers.*.ffn_*=16``) -> ``(pattern, rank)``."""

    name = "pattern=rank"

    def convert(self, value, param, ctx):
        if isinstance(value, tuple):
            return value
        pattern, sep, r = str(value).rpartition("=")
        if not sep or not pattern:
            self.fail(f"--rank-for must look like PATTERN=RANK (e.g. 'layers.*.ffn_*=16'), got {value!r}", param, ctx)
        try:
            return pattern, int(r)
        except ValueError:
            self.fail(f"--rank-for {value!r}: rank {r!r} is not an integer", param, ctx)


def _learning_rates(items: tuple[str, ...]) -> dict[str, float]:
    """``--lr`` values: ``VALUE`` (the body) or ``GROUP=VALUE`` with GROUP in body, head, priming."""
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


# --lr GROUP=VALUE sets these fields (the body's is the default group)
LR_FIELDS = {"body": ("", "lr"), "head": ("", "head_lr"), "priming": ("learner", "priming_lr")}
LR_HELP = (f"Learning rate of a parameter group (repeatable): body (the default group; {rates_by_method(DEFAULT_LR)}), "
           f"head (classifier + pooler; {DEFAULT_HEAD_LR:g}), priming (learner; same as --priming-lr, "
           "from the task).")

LEARNER_SPELLINGS = {
    "rank": Spelling(type=RankType()),
    "ranks": Spelling(name="rank-for", type=PatternRank(), multiple=True, metavar="PATTERN=RANK"),
    "budget": Spelling(name="rank-budget"),
}
FAR_SPELLINGS = {"priming_fraction": Spelling(name="far-priming")}


@click.command("finetune")
@click.argument("model")
@task_options()
@config_options(FinetuneConfig, spellings={"method": Spelling(type=click.STRING, metavar="|".join(METHODS))},
                exclude=("lr", "head_lr"))
@click.option("--lr", "lrs", multiple=True, metavar="[GROUP=]LR", help=LR_HELP)
@config_options(LearnerConfig, group="learner", label="learner", spellings=LEARNER_SPELLINGS)
@config_options(FarConfig, group="far", prefix="far-", label="far", spellings=FAR_SPELLINGS)
@device_option()
@out_option("Output model directory.")
@json_options(legacy_file=True)
@quiet_option
@click.pass_context
def finetune_cmd(ctx, model, task, data_dir, lrs, device, out_dir, as_json, json_out, quiet, **_) -> None:
    """Fine-tune MODEL on a task; write a Hugging Face directory with finetune.json.

    \b
    Examples:
      edgenlp finetune minilm-l6 --task sst2 --method learner --train-limit 8000 --epochs 3 --out out/ft
      edgenlp finetune minilm-l6 --task banking77 --method learner --rank auto --priming-epochs 0.5 --out out/b77
      edgenlp finetune minilm-l6 --task sst2 --method far --far-keep 0.1 --out out/far
      edgenlp finetune minilm-l6 --task sst2 --train-limit 8000 --val-rows 1000 --epochs 3 --out out/val
      edgenlp finetune minilm-l6 --task banking77 --method full --lr 5e-5 --lr head=2e-3 --epochs 2 --out out/full
    """
    from edgenlp.data.tasks import load_task
    from edgenlp.finetune.trainer import finetune
    from edgenlp.models.registry import load_model
    from edgenlp.utils import resolve_device

    device = resolve_device(device)
    fields = {group: given(ctx, group) for group in ("", "learner", "far")}
    for group_name, value in _learning_rates(lrs).items():
        group, name = LR_FIELDS[group_name]
        if name in fields[group]:
            raise EdgeNLPError(f"give the {group_name} learning rate once (--lr {group_name}=... or "
                               f"{' '.join(flags_of(ctx, [name], group))})")
        fields[group][name] = value
    method = fields[""].get("method", FinetuneConfig().method)
    for owner, (group, _) in METHOD_CONFIGS.items():
        if fields[group] and method != owner:
            flags = flags_of(ctx, fields[group], group)
            raise EdgeNLPError(f"{', '.join(flags)} only apply to --method {owner} (got --method {method})")
    nested = {group: build_config(cls, fields[group]) for owner, (group, cls) in METHOD_CONFIGS.items()
              if owner == method}
    config = build_config(FinetuneConfig, {**fields[""], **nested})
    data = load_task(task, data_dir=data_dir)
    net, info = load_model(model, labels=data.labels, seed=config.seed)
    if config.max_seq_len > info.shape.max_positions:
        if "max_seq_len" in fields[""]:  # an explicit length the model cannot take
            raise EdgeNLPError(f"--max-seq-len {config.max_seq_len} exceeds the model's {info.shape.max_positions} positions")
        config = dataclasses.replace(config, max_seq_len=info.shape.max_positions)  # the default, capped
    stdout, json_file = json_request(as_json, json_out)
    show = not quiet  # a bar on a terminal, plain progress lines in a log (edgenlp.utils.progress_display)
    result = finetune(net, info, data, config, device=device, show_progress=show)
    out = result.save(out_dir, info)
    emit_json(result.report, stdout=stdout, out_file=json_file)
    dev = result.report["dev"]
    tp = result.report["trainable_params"]
    es = result.report["early_stop"]
    kept = f" (epoch {es['best_epoch']} of {es['epochs_run']})" if es["enabled"] and es["epochs_run"] > 1 else ""
    val = result.report.get("validation")
    held = f"validation accuracy {val.get('accuracy', float('nan')):.4f}{kept}, " if val is not None else ""
    click.echo(f"{method}: {held}dev accuracy {dev.get('accuracy', float('nan')):.4f}{'' if held else kept}"
               + (f", macro-F1 {dev['macro_f1']:.4f}" if "macro_f1" in dev else "")
               + f"; trainable {tp['count']:,} ({tp['percent']:.2f}%); wrote {out}", err=True)
