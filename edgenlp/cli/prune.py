"""``edgenlp prune``: structured pruning of a fine-tuned model into a smaller model directory.

The options are the fields of the method configs (:mod:`edgenlp.prune.config`);
``--method`` picks the class, and an option of another method is an error.
"""

from __future__ import annotations

import click

from edgenlp.cli.options import (Spelling, build_config, config_options, device_option, emit_json, flags_of, given,
                                 json_options, json_request, out_option, quiet_option, task_options)
from edgenlp.errors import EdgeNLPError
from edgenlp.prune.config import DEFAULT_METHOD, METHOD_CONFIGS, CofiConfig, DistillConfig, FastConfig, ImportanceConfig

# Flags whose name is not the field's (the rest are the field names with dashes).
SPELLINGS = {
    "mask_file": Spelling(name="masks", type=click.Path(dir_okay=False)),
    "prune_hidden": Spelling(name="hidden"),  # --no-hidden: keep every hidden dimension
}
# Recovery fields taken from the pruning config rather than given again (--seed, --threads, --train-limit, ...).
RECOVER_SHARED = ("batch_size", "max_seq_len", "train_limit", "seed", "threads")


@click.command("prune")
@click.argument("model_dir", type=click.Path(file_okay=False))
@task_options(help="The task MODEL_DIR was fine-tuned on: a built-in task or a folder with train.tsv and dev.tsv.")
@click.option("--method", type=click.Choice(list(METHOD_CONFIGS)), default=DEFAULT_METHOD, show_default=True,
              help="cofi: learned L0 masks + distillation; fast: retraining-free (Kwon et al.); importance: baseline.")
@config_options(CofiConfig, FastConfig, ImportanceConfig, spellings=SPELLINGS)
@click.option("--recover", is_flag=True, help="Then distil the pruned model from MODEL_DIR (the `distill` step; "
                                               "--recover-* options, batch size, rows, seed and threads as for pruning).")
@config_options(DistillConfig, group="recover", prefix="recover-", label="recover", exclude=RECOVER_SHARED)
@device_option()
@out_option("Output model directory.")
@json_options(legacy_file=True)
@quiet_option
@click.pass_context
def prune_cmd(ctx, model_dir, task, data_dir, method, recover, device, out_dir, as_json, json_out, quiet, **_) -> None:
    """Prune a fine-tuned MODEL_DIR to a smaller dense model; write a model directory with prune.json and masks.json.

    \b
    Examples:
      edgenlp prune out/ft --task sst2 --method fast --target-sparsity 0.5 --out out/fast50
      edgenlp prune out/ft --task sst2 --method cofi --target-sparsity 0.7 --epochs 2 --budget-minutes 30 --out out/cofi70
      edgenlp prune out/ft --task sst2 --method importance --target-sparsity 0.3 --target flops --seq-len 128 --out out/imp
      edgenlp prune out/ft --task sst2 --masks out/fast50/masks.json --out out/again
      edgenlp prune out/ft --task sst2 --method fast --target-sparsity 0.5 --recover --recover-epochs 2 --out out/fast50r
    """
    from edgenlp.data.tasks import load_task
    from edgenlp.models.registry import load_model
    from edgenlp.prune.api import prune
    from edgenlp.utils import resolve_device

    cls = METHOD_CONFIGS[method]
    fields = given(ctx)
    other = [name for name in fields if name not in cls.field_names()]
    if other:
        raise EdgeNLPError(f"{', '.join(flags_of(ctx, other))} do not apply to --method {method}")
    config = build_config(cls, fields)
    recover_fields = given(ctx, "recover")
    if recover_fields and not recover:
        raise EdgeNLPError(f"{', '.join(flags_of(ctx, recover_fields, 'recover'))} need --recover")
    recovery = build_config(DistillConfig, {**{k: getattr(config, k) for k in RECOVER_SHARED}, **recover_fields}) \
        if recover else None
    resolve_device(device)
    stdout, json_file = json_request(as_json, json_out)
    data = load_task(task, data_dir=data_dir)
    net, info = load_model(model_dir)
    show = not quiet  # a bar on a terminal, plain progress lines in a log (edgenlp.utils.progress_display)
    result = prune(net, info, data, config, device=device, progress=show)
    if recovery is not None:
        from edgenlp.prune.recovery import recover as recover_pruned

        result = recover_pruned(result, net, info, data, recovery, device=device, progress=show)
    out = result.save(out_dir)
    emit_json(result.report, stdout=stdout, out_file=json_file)
    r = result.report
    click.echo(f"{method}: encoder params -{100 * r['achieved']['encoder_params']:.1f}% "
               f"(FLOPs@{config.seq_len} -{100 * r['achieved']['flops']:.1f}%), hidden {r['shape']['hidden']}, "
               f"heads {r['shape']['heads']}, ffn {r['shape']['ffn']}; dev accuracy "
               f"{r['dev_before'].get('accuracy', float('nan')):.4f} -> {r['dev_after'].get('accuracy', float('nan')):.4f}"
               f"{' (recovered from ' + format(r['dev_pruned'].get('accuracy', float('nan')), '.4f') + ')' if recovery else ''}"
               f" in {r['wall_s']:.0f}s; wrote {out}", err=True)
