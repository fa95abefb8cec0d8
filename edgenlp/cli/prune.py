"""``edgenlp prune``: structured pruning of a fine-tuned model into a smaller model directory."""

from __future__ import annotations

import json
import sys

import click

from edgenlp.errors import EdgeNLPError


@click.command("prune")
@click.argument("model_dir", type=click.Path(file_okay=False))
@click.option("--task", required=True, help="The task MODEL_DIR was fine-tuned on: sst2, banking77, or a task folder.")
@click.option("--method", type=click.Choice(["cofi", "fast", "importance"]), default="fast", show_default=True,
              help="cofi: learned L0 masks + distillation; fast: retraining-free (Kwon et al.); importance: baseline.")
@click.option("--target-sparsity", type=float, default=0.5, show_default=True, help="Fraction of the size to remove, in [0, 1).")
@click.option("--target", type=click.Choice(["params", "flops"]), default="params", show_default=True,
              help="What the sparsity measures: encoder parameters or encoder FLOPs at --seq-len.")
@click.option("--seq-len", type=int, default=128, show_default=True, help="Sequence length of the FLOPs measure.")
@click.option("--epochs", type=float, default=None, help="cofi: mask-learning epochs (default 2).")
@click.option("--finetune-epochs", type=float, default=None, help="Distilled fine-tune of the pruned model (default: 1 for cofi, 0 otherwise).")
@click.option("--budget-minutes", type=float, default=None, help="cofi: stop mask learning after this many minutes.")
@click.option("--train-limit", type=int, default=None, help="Use a seeded subset of this many training rows.")
@click.option("--samples", type=int, default=None, help="fast/importance: training rows for gradients (default 1024).")
@click.option("--ffn-multiple", type=int, default=1, show_default=True,
              help="Keep FFN widths that this divides (or 0, or the full width); 32 suits int4 groups and GEMM tiles.")
@click.option("--batch-size", type=int, default=32, show_default=True)
@click.option("--lr", type=float, default=None, help="Weight learning rate for cofi and fine-tuning (default 5e-5).")
@click.option("--no-hidden", is_flag=True, help="cofi: do not prune hidden dimensions.")
@click.option("--masks", "mask_file", type=click.Path(dir_okay=False), default=None,
              help="Apply this masks.json (a MaskDict) instead of learning masks.")
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto", show_default=True,
              help="Where gradients and training run (auto = CUDA when present). Export and latency stay on the CPU.")
@click.option("--threads", type=int, default=None, help="torch intra-op threads.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--data-dir", type=click.Path(file_okay=False), default=None, help="Folder holding the built-in task folders.")
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False), help="Output model directory.")
@click.option("--json", "json_file", default=None, help="Also write prune.json here ('-' for stdout).")
@click.option("-q", "--quiet", is_flag=True, help="No progress bar.")
def prune_cmd(model_dir, task, method, target_sparsity, target, seq_len, epochs, finetune_epochs, budget_minutes,
              train_limit, samples, ffn_multiple, batch_size, lr, no_hidden, mask_file, device, threads, seed, data_dir, out_dir,
              json_file, quiet) -> None:
    """Prune a fine-tuned MODEL_DIR to a smaller dense model; write a model directory with prune.json and masks.json.

    \b
    Examples:
      edgenlp prune out/ft --task sst2 --method fast --target-sparsity 0.5 --out out/fast50
      edgenlp prune out/ft --task sst2 --method cofi --target-sparsity 0.7 --epochs 2 --budget-minutes 30 --out out/cofi70
      edgenlp prune out/ft --task sst2 --method importance --target-sparsity 0.3 --target flops --seq-len 128 --out out/imp
      edgenlp prune out/ft --task sst2 --masks out/fast50/masks.json --out out/again
    """
    from edgenlp.data.tasks import load_task
    from edgenlp.models.registry import load_model
    from edgenlp.prune.api import prune
    from edgenlp.prune.config import PruneConfig
    from edgenlp.utils import atomic_write_json, resolve_device

    kw = {"samples": samples, "lr": lr, "epochs": epochs, "finetune_epochs": finetune_epochs,
          "budget_minutes": budget_minutes, "train_limit": train_limit, "threads": threads}
    try:
        config = PruneConfig(method=method, target_sparsity=target_sparsity, target=target, seq_len=seq_len,
                             batch_size=batch_size, ffn_multiple=ffn_multiple, prune_hidden=not no_hidden, seed=seed, mask_file=mask_file,
                             **{k: v for k, v in kw.items() if v is not None})
    except ValueError as exc:
        raise EdgeNLPError(f"invalid option: {exc}") from None
    resolve_device(device)
    data = load_task(task, data_dir=data_dir)
    net, info = load_model(model_dir)
    show = not quiet and sys.stderr.isatty()
    result = prune(net, info, data, config, device=device, progress=show)
    out = result.save(out_dir)
    if json_file == "-":
        click.echo(json.dumps(result.report, indent=2))
    elif json_file:
        atomic_write_json(json_file, result.report)
    r = result.report
    click.echo(f"{method}: encoder params -{100 * r['achieved']['encoder_params']:.1f}% "
               f"(FLOPs@{seq_len} -{100 * r['achieved']['flops']:.1f}%), hidden {r['shape']['hidden']}, "
               f"heads {r['shape']['heads']}, ffn {r['shape']['ffn']}; dev accuracy "
               f"{r['dev_before'].get('accuracy', float('nan')):.4f} -> {r['dev_after'].get('accuracy', float('nan')):.4f}"
               f" in {r['wall_s']:.0f}s; wrote {out}", err=True)
