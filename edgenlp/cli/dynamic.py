"""``edgenlp dynamic`` (exits and token pruning), and the dynamic-bundle options of ``run`` and ``eval``."""

from __future__ import annotations

import click

from edgenlp.cli.options import (build_config, config_options, device_option, emit_json, given, json_options,
                                 out_option, task_options)
from edgenlp.dynamic.config import DynamicConfig
from edgenlp.errors import EdgeNLPError


def parse_exits(value: str) -> tuple[int, ...] | None:
    """``all`` -> None (every layer), ``none`` -> (), ``2,4`` -> (2, 4)."""
    v = str(value).strip().lower()
    if v == "all":
        return None
    if v == "none":
        return ()
    try:
        layers = tuple(int(p) for p in v.split(",") if p.strip())
    except ValueError:
        raise EdgeNLPError(f"--exits must be all, none or layer numbers like 2,4, got {value!r}") from None
    if not layers:
        raise EdgeNLPError(f"--exits must be all, none or layer numbers like 2,4, got {value!r}")
    return layers


def parse_tokens(value: str) -> tuple[str, float]:
    """``none`` / ``ltp`` / ``keep:R`` -> (mode, keep ratio)."""
    v = str(value).strip().lower()
    if v in ("none", "ltp"):
        return v, 1.0
    if v.startswith("keep:"):
        try:
            return "keep", float(v[5:])
        except ValueError:
            pass
    raise EdgeNLPError(f"--tokens must be ltp, keep:R (a ratio in (0, 1]) or none, got {value!r}")


def dynamic_options(f):
    """``--static``, ``--exit-threshold`` and ``--keep`` for ``run`` and ``eval`` on a dynamic bundle."""
    opts = [
        click.option("--static", "static", is_flag=True, default=False,
                     help="Dynamic bundle: run every layer on every token (no exit, no pruning)."),
        click.option("--exit-threshold", "exit_threshold", type=float, default=None,
                     help="Dynamic bundle: override the exit threshold (maxprob/entropy in [0, 1], patience 1..exits)."),
        click.option("--keep", "keep", type=float, default=None,
                     help="Dynamic bundle: keep this fraction of the tokens after each token layer, in (0, 1] (1 = no pruning)."),
    ]
    for o in reversed(opts):
        f = o(f)
    return f


def dynamic_kwargs(static: bool, exit_threshold, keep) -> dict:
    """The runner options, or {} when none was given; --static with an override is an error."""
    if static and (exit_threshold is not None or keep is not None):
        raise EdgeNLPError("--static runs every layer and token: give it without --exit-threshold or --keep")
    out = {"static": True} if static else {}
    if exit_threshold is not None:
        out["exit_threshold"] = exit_threshold
    if keep is not None:
        out["keep"] = keep
    return out


@click.command("dynamic")
@click.argument("model")
@task_options(help="The task MODEL was fine-tuned on: sst2, banking77, imdb, or a task folder.")
@click.option("--exits", "exits", default="all", show_default=True, help="Layers with an exit: all, none, or layer numbers like 2,4.")
@click.option("--tokens", "tokens", default="none", show_default=True,
              help="Token pruning: ltp (learned per-layer thresholds), keep:R (keep a ratio R per layer) or none.")
@config_options(DynamicConfig, exclude=("exits", "tokens", "keep_ratio"))
@device_option()
@out_option("Output model directory.")
@json_options(help="Print the training and calibration report as JSON on stdout.")
@click.pass_context
def dynamic_cmd(ctx, model, task, data_dir, exits, tokens, device, out_dir, as_json, json_out, **_) -> None:
    """Add early exits and token pruning to a fine-tuned MODEL; write a model directory `edgenlp export` lowers to a dynamic bundle.

    Exit heads are distilled from the final classifier with the backbone
    frozen (so with exits off the model is exactly MODEL); token thresholds
    are learned per layer; the exit threshold and the token thresholds'
    scale are calibrated on training rows held out for it (never dev) to the
    cheapest setting whose drop, plus --margin-se standard errors of it, is
    within --max-drop points.

    \b
    Examples:
      edgenlp dynamic out/ft-sst2 --task sst2 --exits all --rule maxprob --max-drop 0.5 --out out/sst2-dyn
      edgenlp dynamic out/ft-imdb --task imdb --exits none --tokens ltp --max-drop 1 --max-seq-len 256 --out out/imdb-ltp
      edgenlp dynamic out/ft-b77 --task banking77 --exits 2,4,6 --rule patience --tokens keep:0.7 --out out/b77-dyn
      edgenlp export out/sst2-dyn --task sst2 --out out/sst2-dyn-bundle
    """
    from dataclasses import replace

    from edgenlp.data.tasks import load_task
    from edgenlp.dynamic.api import make_dynamic
    from edgenlp.dynamic.calibrate import drop_text
    from edgenlp.models.registry import load_model
    from edgenlp.utils import resolve_device

    mode, ratio = parse_tokens(tokens)
    fields = {**given(ctx), "exits": parse_exits(exits), "tokens": mode, "keep_ratio": ratio}
    config = build_config(DynamicConfig, fields)
    resolve_device(device)
    data = load_task(task, data_dir=data_dir)
    net, info = load_model(model)
    if config.max_seq_len > net.shape.max_positions:
        if "max_seq_len" in fields:
            raise EdgeNLPError(f"--max-seq-len {config.max_seq_len} exceeds the model's {net.shape.max_positions} positions")
        config = replace(config, max_seq_len=net.shape.max_positions)  # the default, capped at the model's positions
    try:
        config.exit_layers(net.shape.num_layers)
    except ValueError as exc:
        raise EdgeNLPError(f"--exits: {exc}") from None
    result = make_dynamic(net, info, data, config, device=device)
    out = result.save(out_dir)
    emit_json(result.report, stdout=as_json, out_file=json_out)
    spec, chosen = result.model.spec, result.report["validation"]["chosen"]
    tok = {"none": "no token pruning", "keep": f"keep {spec.keep_ratio:g} of the tokens per layer",
           "ltp": "learned token thresholds " + ", ".join(f"{t:.2f}" for t in spec.token_thresholds if t is not None)}[spec.tokens]
    click.echo(f"exits {list(spec.exits)}, {spec.rule} threshold {spec.threshold:g}; {tok}; validation "
               f"({chosen.get('mean_exit_layer', 0):.2f} mean exit layer) accuracy drop {drop_text(chosen)} points at "
               f"{chosen['cost']:.2f}x the static FLOPs; wrote {out}", err=True)
