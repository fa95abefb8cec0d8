"""``edgenlp sparsify``: block sparsity by gradual magnitude pruning under distillation, into a new model directory.

The options are the fields of :class:`~edgenlp.prune.config.SparsifyConfig`.
"""

from __future__ import annotations

import click

from edgenlp.cli.options import (build_config, config_options, device_option, emit_json, given, json_options,
                                 json_request, out_option, quiet_option, task_options)
from edgenlp.prune.config import SparsifyConfig


@click.command("sparsify")
@click.argument("model_dir", type=click.Path(file_okay=False))
@click.option("--teacher", "teacher_dir", default=None, type=click.Path(file_okay=False),
              help="The model MODEL_DIR learns from (default: MODEL_DIR itself, dense).")
@task_options(help="The task MODEL_DIR was fine-tuned on: a built-in task or a folder with train.tsv and dev.tsv.")
@config_options(SparsifyConfig)
@device_option()
@out_option("Output model directory.")
@json_options()
@quiet_option
@click.pass_context
def sparsify_cmd(ctx, model_dir, teacher_dir, task, data_dir, device, out_dir, as_json, json_out, quiet, **_) -> None:
    """Zero --sparsity of every encoder linear's weight blocks while MODEL_DIR distils from its dense self.

    The blocks (--block 1x4, 1x8 or 4x1) are the ones the block-sparse kernels
    skip: `edgenlp export` then runs those linears as edgenlp's sparse ops in
    model.pte (fp32, or int8 after `--quant int8`), where they are sparse
    enough to beat the dense GEMM. model.onnx stays dense.

    \b
    Examples:
      edgenlp sparsify out/ft --task sst2 --sparsity 0.8 --out out/sparse80
      edgenlp sparsify out/fast50 --teacher out/ft --task sst2 --block 4x1 --epochs 1 --budget-minutes 20 --out out/s
    """
    from edgenlp.data.tasks import load_task
    from edgenlp.models.registry import load_model
    from edgenlp.prune.sparsity import sparsify
    from edgenlp.utils import resolve_device

    config = build_config(SparsifyConfig, given(ctx))
    resolve_device(device)
    stdout, json_file = json_request(as_json, json_out)
    data = load_task(task, data_dir=data_dir)
    model, info = load_model(model_dir)
    teacher, teacher_info = load_model(teacher_dir) if teacher_dir else (None, None)
    show = not quiet  # a bar on a terminal, plain progress lines in a log (edgenlp.utils.progress_display)
    result = sparsify(model, info, data, config, teacher=teacher, teacher_info=teacher_info, device=device,
                      progress=show)
    out = result.save(out_dir)
    emit_json(result.report, stdout=stdout, out_file=json_file)
    r, d = result.report, result.report["distill"]
    acc = lambda m: m.get("accuracy", float("nan"))  # noqa: E731
    click.echo(f"sparsify: {r['block']} blocks, {100 * r['mean_sparsity']:.1f}% zero in {len(r['linears'])} linears "
               f"after {d['steps']} steps; dev accuracy {acc(d['dev_before']):.4f} -> {acc(d['dev_after']):.4f}; "
               f"wrote {out}", err=True)
