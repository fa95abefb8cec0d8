"""``edgenlp models``: list the known models."""

from __future__ import annotations

import json

import click

from edgenlp.cli.options import json_options


@click.command("models")
@json_options(file=False, help="Print JSON instead of a table.")
def models_cmd(as_json: bool) -> None:
    """List named models (and their shapes); any local Hugging Face directory also works as MODEL.

    \b
    Examples:
      edgenlp models
      edgenlp models --json
    """
    from edgenlp.models.registry import list_models

    rows = []
    for m in list_models():
        shape = m.shape
        if shape is None:  # packaged weights: read the shape from their config
            from edgenlp.models.registry import _minilm_dir, shape_from_hf_config

            shape = shape_from_hf_config(json.loads((_minilm_dir() / "config.json").read_text()))
        rows.append({"name": m.name, "family": shape.family, "layers": shape.num_layers, "hidden": shape.hidden,
                     "heads": shape.heads[0], "ffn": shape.ffn[0], "weights": "pretrained" if m.package else "random",
                     "description": m.description})
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    click.echo(f"{'name':<16} {'family':<10} {'L':>3} {'H':>5} {'heads':>5} {'FFN':>5}  weights     description")
    for r in rows:
        click.echo(f"{r['name']:<16} {r['family']:<10} {r['layers']:>3} {r['hidden']:>5} {r['heads']:>5} {r['ffn']:>5}  "
                   f"{r['weights']:<11} {r['description']}")
    click.echo("\nAny local Hugging Face BERT/DistilBERT directory (e.g. `edgenlp finetune` output) is accepted as MODEL.")
