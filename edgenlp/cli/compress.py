"""``edgenlp compress``: the main job, end to end, under a device's budgets."""

from __future__ import annotations

import click

from edgenlp.compress.config import PRESET_NAMES
from edgenlp.errors import EdgeNLPError


@click.command("compress")
@click.option("--model", default="minilm-l6", show_default=True, help="Registered model name or model directory.")
@click.option("--task", default="sst2", show_default=True, help="Built-in task or a folder with train.tsv and dev.tsv.")
@click.option("--target", default="pixel-7", show_default=True, help="Device target name (`edgenlp targets`) or a TOML file.")
@click.option("--latency-ms", type=float, default=None, help="Latency budget (default: the target's).")
@click.option("--memory-mb", type=float, default=None, help="Peak memory budget (default: the target's).")
@click.option("--size-mb", type=float, default=None, help="Bundle size budget (default: the target's).")
@click.option("--seq-len", type=int, default=None, help="Sequence length the latency budget is for (default: the target's).")
@click.option("--threads", type=int, default=None, help="Threads the latency budget is for (default: the target's).")
@click.option("--max-drop", type=float, default=1.0, show_default=True,
              help="Largest dev-accuracy drop (points) against the uncompressed fine-tuned model.")
@click.option("--preset", type=click.Choice(PRESET_NAMES), default="quick", show_default=True,
              help="quick: minutes on a CPU (bounded fine-tune, retraining-free pruning); full: the whole training set, CoFi.")
@click.option("--finetune-method", default="learner", show_default=True, help="Fine-tuning method of the first stage.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--device", default="auto", show_default=True, help="Training device: auto | cpu | cuda.")
@click.option("--data-dir", type=click.Path(file_okay=False), default=None, help="Where the built-in tasks' data lives.")
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False), help="Run folder (rerun to resume).")
@click.option("-q", "--quiet", is_flag=True, help="No progress bars.")
def compress_cmd(model, task, target, latency_ms, memory_mb, size_mb, seq_len, threads, max_drop, preset,
                 finetune_method, seed, device, data_dir, out_dir, quiet):
    """Fine-tune, prune, quantize and export MODEL for TASK so that it fits TARGET; verify and report.

    Stages (one folder each under --out; a rerun skips the finished ones whose
    inputs did not change): finetune -> baseline profile -> plan -> prune ->
    quantize + export -> verify. Writes DIR/bundle/, DIR/report.md and
    DIR/compress.json.

    \b
    Examples:
      edgenlp compress --out out/compress                      # MiniLM + SST-2 for pixel-7, quick preset
      edgenlp compress --task banking77 --target raspberry-pi-5 --size-mb 20 --out out/b77-pi5
      edgenlp compress --target host --latency-ms 12 --max-drop 1.0 --out out/host
    """
    from edgenlp.compress.config import CompressConfig
    from edgenlp.compress.pipeline import compress
    from edgenlp.utils import resolve_device

    try:
        config = CompressConfig(model=model, task=task, target=target, latency_ms=latency_ms, memory_mb=memory_mb,
                                size_mb=size_mb, seq_len=seq_len, threads=threads, max_drop=max_drop, preset=preset,
                                finetune_method=finetune_method, seed=seed)
    except ValueError as exc:
        raise EdgeNLPError(f"invalid option: {exc}") from None
    resolve_device(device)  # a bad --device fails before any work
    res = compress(config, out_dir, data_dir=data_dir, device=device, progress=not quiet,
                   echo=lambda msg: click.echo(msg, err=True))
    s = res.summary
    checks = s["predicted"]
    click.echo(f"\n{config.model} on {config.task} for {s['target'].get('name', config.target)}: {res.bundle}")
    click.echo(f"  chosen: {s['chosen']}")
    acc = checks["accuracy"]
    click.echo(f"  dev accuracy {acc['measured']:.4f} (uncompressed {acc['reference']:.4f}, drop {acc['drop_points']:.2f} points)")
    lat = checks["latency_ms"]
    click.echo(f"  latency {lat['predicted']} ms predicted{' (estimated)' if lat['estimated'] else ''} vs budget "
               f"{lat['budget']}; host {lat['host_measured']} ms, {s['host_speedup_vs_uncompressed']}x the uncompressed model")
    click.echo(f"  size {checks['size_mb']['measured']} MB (budget {checks['size_mb']['budget']}); "
               f"memory {checks['memory_mb']['predicted']} MB predicted (budget {checks['memory_mb']['budget']})")
    click.echo(f"  report: {res.out / 'report.md'}   wall time {s['wall_s']} s")
