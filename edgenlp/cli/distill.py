"""``edgenlp distill``: recovery distillation of a (pruned) student from its teacher into a new model directory.

The options are the fields of :class:`~edgenlp.prune.config.DistillConfig`.
"""

from __future__ import annotations

from pathlib import Path

import click

from edgenlp.cli.options import (build_config, config_options, device_option, emit_json, given, json_options,
                                 json_request, out_option, quiet_option, task_options)
from edgenlp.prune.config import DistillConfig


@click.command("distill")
@click.argument("student_dir", type=click.Path(file_okay=False))
@click.option("--teacher", "teacher_dir", required=True, type=click.Path(file_okay=False),
              help="The model STUDENT_DIR learns from (the unpruned fine-tuned model it was pruned from).")
@task_options(help="The task the teacher was fine-tuned on: a built-in task or a folder with train.tsv and dev.tsv.")
@config_options(DistillConfig)
@device_option()
@out_option("Output model directory.")
@json_options()
@quiet_option
@click.pass_context
def distill_cmd(ctx, student_dir, teacher_dir, task, data_dir, device, out_dir, as_json, json_out, quiet, **_) -> None:
    """Distil STUDENT_DIR from --teacher on --task (logit KL + hidden states); write a model directory with distill.json.

    The hidden states are matched layer by layer (the layer the pruning kept
    each student layer from); where hidden dimensions were pruned a learned
    projection maps them back (started from STUDENT_DIR/masks.json when the
    student was written by `edgenlp prune`).

    \b
    Examples:
      edgenlp distill out/fast50 --teacher out/ft --task sst2 --out out/fast50-distilled
      edgenlp distill out/cofi70 --teacher out/ft --task sst2 --epochs 2 --budget-minutes 20 --out out/cofi70-d
    """
    from edgenlp.data.tasks import load_task
    from edgenlp.models.registry import load_model
    from edgenlp.prune.masks import MaskDict
    from edgenlp.prune.recovery import distill
    from edgenlp.utils import resolve_device

    config = build_config(DistillConfig, given(ctx))
    resolve_device(device)
    stdout, json_file = json_request(as_json, json_out)
    data = load_task(task, data_dir=data_dir)
    student, info = load_model(student_dir)
    teacher, teacher_info = load_model(teacher_dir)
    mask_file = Path(student_dir) / "masks.json"
    masks = MaskDict.load(mask_file) if mask_file.is_file() else None
    show = not quiet  # a bar on a terminal, plain progress lines in a log (edgenlp.utils.progress_display)
    result = distill(student, info, teacher, data, config, teacher_info=teacher_info, masks=masks, device=device,
                     progress=show)
    out = result.save(out_dir)
    emit_json(result.report, stdout=stdout, out_file=json_file)
    r = result.report
    acc = lambda d: d.get("accuracy", float("nan"))  # noqa: E731
    click.echo(f"distill: {r['steps']} steps in {r['train_s']:.0f}s; dev accuracy {acc(r['dev_before']):.4f} -> "
               f"{acc(r['dev_after']):.4f} (teacher {acc(r['teacher']['dev']):.4f}); KL to the teacher "
               f"{r['kl_before']:.4f} -> {r['kl_after']:.4f}; wrote {out}", err=True)
