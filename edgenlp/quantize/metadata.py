"""Consistency checks of a quantized bundle's metadata (one :class:`BundleError` line each)."""

from __future__ import annotations

from edgenlp.errors import BundleError
from edgenlp.models.families import FAMILIES, LAYER_LINEARS


def expected_linears(shape: dict) -> set[str]:
    """Linear names a model of this manifest shape has (zero-width linears excluded)."""
    heads, ffn = shape.get("heads", []), shape.get("ffn", [])
    names = set()
    for i, (h, f) in enumerate(zip(heads, ffn)):
        if h:
            names.update(f"layers.{i}.{p}" for p in ("query", "key", "value", "attn_out"))
        if f:
            names.update(f"layers.{i}.{p}" for p in ("ffn_in", "ffn_out"))
    assert {n.rsplit(".", 1)[-1] for n in names} <= set(LAYER_LINEARS)
    family = FAMILIES.get(shape.get("family"))
    names.update(family.head if family else ("pooler", "classifier"))
    return names


def check_quantization(bundle) -> None:
    """The ``quantization`` key, the recipe's quantize step and the vocabulary map agree with the model."""
    where = f"{bundle.path / 'manifest.json'}"
    q = bundle.manifest.get("quantization")
    shape = (bundle.manifest.get("model") or {}).get("shape") or {}
    steps = [s for s in bundle.recipe if s.type == "quantize"]
    if q is not None:
        if not isinstance(q, dict) or not isinstance(q.get("linears"), dict):
            raise BundleError(f"{where}: 'quantization' must be an object with a 'linears' map")
        if not steps:
            raise BundleError(f"{where}: 'quantization' is present but the recipe has no quantize step")
        bits = steps[-1].config.layer_bits
        if dict(bits) != q["linears"]:
            raise BundleError(f"{where}: quantization.linears disagrees with the recipe's quantize step")
        want = expected_linears(shape)
        if set(q["linears"]) != want:
            extra = sorted(set(q["linears"]) - want) or sorted(want - set(q["linears"]))
            raise BundleError(f"{where}: quantization.linears does not match the model's linears (e.g. {extra[0]!r})")
        bad = [k for k, v in q["linears"].items() if v not in (32, 8, 4)]
        if bad:
            raise BundleError(f"{where}: quantization.linears[{bad[0]!r}] must be 32, 8 or 4")
        if q.get("embeddings") != steps[-1].config.embeddings:
            raise BundleError(f"{where}: quantization.embeddings disagrees with the recipe's quantize step")
    name = bundle.manifest["tokenizer"].get("id_map")
    if name:
        if name not in bundle.manifest["files"]:
            raise BundleError(f"{where}: tokenizer.id_map {name!r} is not a listed bundle file")
        bundle.id_map  # noqa: B018  (reads and checks the map against the model's table)
