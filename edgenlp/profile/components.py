"""The profiler's component vocabulary and the model's expected linear sequence.

Rows of every profile, in table order:

``embedding``   word/position/type gathers, their adds and the embedding norm
``attn_qkv``    the query, key and value projections
``attn_core``   head split/merge, QKᵀ, scaling, mask add, softmax, AV
``attn_out``    the attention output projection
``ffn``         intermediate linear, activation, output linear
``other``       residual adds, the per-layer norms, pooler and classifier head

Which module belongs to which row comes from the canonical names of
:mod:`edgenlp.models.families` (``LAYER_LINEARS``/``LAYER_NORMS``).

A :class:`LinearPlan` lists the linear layers in execution order. Runtimes
that report one event per operator (ExecuTorch/XNNPACK, ONNX Runtime, a
native runner) are attributed by anchoring on those linears: see
:mod:`edgenlp.profile.attribution`.
"""

from __future__ import annotations

from dataclasses import dataclass

from edgenlp.models.families import LAYER_LINEARS, LAYER_NORMS

COMPONENTS = ("embedding", "attn_qkv", "attn_core", "attn_out", "ffn", "other")

# canonical layer part -> component row
PART_COMPONENT = {
    "query": "attn_qkv",
    "key": "attn_qkv",
    "value": "attn_qkv",
    "attn_out": "attn_out",
    "ffn_in": "ffn",
    "ffn_out": "ffn",
    "attn_norm": "other",
    "ffn_norm": "other",
}
HEAD_PARTS = ("pooler", "classifier")  # EncoderClassifier attributes; counted in ``other``


def part_component(part: str) -> str:
    """The component row of a canonical layer part (``query`` -> ``attn_qkv``)."""
    missing = set(LAYER_LINEARS + LAYER_NORMS) - set(PART_COMPONENT)
    if missing:  # the family table grew a part this module does not know
        raise KeyError(f"profile has no component for layer parts {sorted(missing)}")
    return PART_COMPONENT[part]


@dataclass(frozen=True)
class LinearAnchor:
    """One linear layer the runtime will execute: its module name, component and layer index."""

    module: str  # "layers.3.query", "pooler"
    part: str  # canonical part or head part
    component: str
    layer: int | None  # None for the classification head


@dataclass(frozen=True)
class LinearPlan:
    """The linear layers of a model in execution order."""

    anchors: tuple[LinearAnchor, ...]
    num_layers: int

    @classmethod
    def from_shape(cls, heads: tuple[int, ...], ffn: tuple[int, ...]) -> "LinearPlan":
        """Plan for an :class:`~edgenlp.models.encoder.EncoderLayer` stack of these per-layer sizes.

        A layer with 0 heads runs no attention linears and a layer with an
        FFN width of 0 no FFN linears (the encoder adds the bias only).
        """
        anchors: list[LinearAnchor] = []
        for i, (h, f) in enumerate(zip(heads, ffn)):
            parts: list[str] = []
            if h > 0:
                parts += [p for p in LAYER_LINEARS if part_component(p) in ("attn_qkv", "attn_out")]
            if f > 0:
                parts += [p for p in LAYER_LINEARS if part_component(p) == "ffn"]
            anchors += [LinearAnchor(f"layers.{i}.{p}", p, part_component(p), i) for p in parts]
        anchors += [LinearAnchor(p, p, "other", None) for p in HEAD_PARTS]
        return cls(tuple(anchors), len(heads))

    @classmethod
    def from_model(cls, model) -> "LinearPlan":
        heads = tuple(int(layer.num_heads) for layer in model.layers)
        ffn = tuple(int(layer.ffn_in.out_features) for layer in model.layers)
        return cls.from_shape(heads, ffn)

    def __len__(self) -> int:
        return len(self.anchors)
