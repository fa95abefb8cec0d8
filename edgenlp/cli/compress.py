"""``edgenlp compress``: the main job, end to end, under a device's budgets."""

from __future__ import annotations

import click

from edgenlp.cli.options import build_config, config_options, data_dir_option, device_option, given, out_option
from edgenlp.compress.config import CompressConfig
from edgenlp.executor import ExecutorConfig


@click.command("compress")
@config_options(CompressConfig)
@config_options(ExecutorConfig, group="executor", exclude=("cpus_per_task", "gpus_per_task", "ray_cpus"))
@data_dir_option
@device_option()
@out_option("Run folder (rerun to resume).")
@click.option("-q", "--quiet", is_flag=True, help="No progress bars.")
@click.pass_context
def compress_cmd(ctx, data_dir, device, out_dir, quiet, **_):
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
      edgenlp compress --workers 2 --out out/compress                # candidate builds in 2 local processes
      edgenlp compress --ray 10.0.0.5:6379 --out /shared/compress     # ... on a Ray cluster (pip install 'edgenlp[ray]')
    """
    from edgenlp.compress.pipeline import compress
    from edgenlp.compress.verify import held_text
    from edgenlp.utils import resolve_device

    config = build_config(CompressConfig, given(ctx))
    executor = build_config(ExecutorConfig, given(ctx, "executor"))
    resolve_device(device)  # a bad --device fails before any work
    res = compress(config, out_dir, data_dir=data_dir, device=device, progress=not quiet,
                   echo=lambda msg: click.echo(msg, err=True), executor=executor)
    s = res.summary
    checks = s["predicted"]
    click.echo(f"\n{config.model} on {config.task} for {s['target'].get('name', config.target)}: {res.bundle}")
    click.echo(f"  chosen: {s['chosen']}")
    if s.get("why"):
        click.echo(f"  why (plan): {s['why']['reason']}")
    m = s.get("measured")
    if m:
        click.echo(f"  measured: {len(m['rows'])} candidate(s) on {m['val_rows']} validation rows; chose {m['why']}")
    acc = checks["accuracy"]
    click.echo(f"  dev accuracy {acc['measured']:.4f} (uncompressed {acc['reference']:.4f}, drop {acc['drop_points']:.2f} points)")
    lat = checks["latency_ms"]
    click.echo(f"  latency {lat['predicted']} ms predicted{' (estimated)' if lat['estimated'] else ''} vs budget "
               f"{lat['budget']}; host {lat['host_measured']} ms{held_text(lat)}, {s['host_speedup_vs_uncompressed']}x the "
               "uncompressed model")
    click.echo(f"  size {checks['size_mb']['measured']} MB (budget {checks['size_mb']['budget']}); "
               f"memory {checks['memory_mb']['predicted']} MB predicted (budget {checks['memory_mb']['budget']})")
    click.echo(f"  report: {res.out / 'report.md'}   wall time {s['wall_s']} s")
