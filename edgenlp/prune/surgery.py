"""Surgery: apply a :class:`~edgenlp.prune.masks.MaskDict` and return a smaller plain model.

Which parameters belong to Q/K/V/out, the FFN and the layer norms comes from
:data:`edgenlp.models.families.LAYER_LINEARS` / ``LAYER_NORMS``: the query,
key and value projections lose the output rows of removed heads, the attention
output projection the matching input columns; the FFN input projection loses
the rows of removed neurons, the output projection the columns; every linear
reading the hidden stream loses the columns of removed hidden dimensions and
every linear writing it the rows, as do the embeddings and layer norms. A
removed sublayer has no heads (or neurons) and a zero output bias, which is
what the masked model computes for it.
"""

from __future__ import annotations

import torch

from edgenlp.models.encoder import EncoderClassifier
from edgenlp.models.families import LAYER_LINEARS, LAYER_NORMS
from edgenlp.prune.masks import MaskDict

# Roles of the canonical linears: which side of each is split by heads / neurons,
# and which side touches the hidden stream.
ATTN_IN, ATTN_OUT, FFN_IN, FFN_OUT = LAYER_LINEARS[:3], LAYER_LINEARS[3], LAYER_LINEARS[4], LAYER_LINEARS[5]


def _rows_cols(weight: torch.Tensor, rows, cols) -> torch.Tensor:
    if rows is not None:
        weight = weight.index_select(0, rows)
    if cols is not None:
        weight = weight.index_select(1, cols)
    return weight.clone()


def apply_masks(model: EncoderClassifier, masks: MaskDict) -> EncoderClassifier:
    """A new :class:`EncoderClassifier` of the pruned shape; ``model`` is not changed.

    Exact: its logits equal ``masked_forward(model, ..., Gates.from_masks(masks))``
    (up to float rounding). Raises :class:`~edgenlp.prune.masks.MaskError` when
    the masks do not fit the model.
    """
    masks.check(model.shape)
    shape = masks.pruned_shape(model.shape)
    dev = model.pooler.weight.device
    out = EncoderClassifier(shape, model.num_labels, labels=model.labels).to(device=dev, dtype=model.pooler.weight.dtype)
    src, dst = model.state_dict(), {}
    hid = None if masks.hidden is None else torch.tensor(masks.hidden, dtype=torch.long, device=dev)
    hd = model.shape.head_dim

    def put(name: str, *, rows=None, cols=None, bias_rows=None, zero_bias: bool = False) -> None:
        dst[f"{name}.weight"] = _rows_cols(src[f"{name}.weight"], rows, cols)
        b = src[f"{name}.bias"]
        b = b.index_select(0, bias_rows).clone() if bias_rows is not None else b.clone()
        dst[f"{name}.bias"] = torch.zeros_like(b) if zero_bias else b

    for part in ("word", "position", "token_type"):
        key = f"embeddings.{part}.weight"
        if key in src:
            dst[key] = _rows_cols(src[key], None, hid)
    for s in ("weight", "bias"):
        key = f"embeddings.norm.{s}"
        dst[key] = src[key].clone() if hid is None else src[key].index_select(0, hid).clone()

    for i, layer in enumerate(masks.layers):
        heads = layer.kept_heads()
        inner = torch.tensor([h * hd + j for h in heads for j in range(hd)], dtype=torch.long, device=dev)
        neurons = torch.tensor(layer.kept_neurons(), dtype=torch.long, device=dev)
        for part in ATTN_IN:
            put(f"layers.{i}.{part}", rows=inner, cols=hid, bias_rows=inner)
        put(f"layers.{i}.{ATTN_OUT}", rows=hid, cols=inner, bias_rows=hid, zero_bias=not layer.attention)
        put(f"layers.{i}.{FFN_IN}", rows=neurons, cols=hid, bias_rows=neurons)
        put(f"layers.{i}.{FFN_OUT}", rows=hid, cols=neurons, bias_rows=hid, zero_bias=not layer.ffn)
        for part in LAYER_NORMS:
            for s in ("weight", "bias"):
                key = f"layers.{i}.{part}.{s}"
                dst[key] = src[key].clone() if hid is None else src[key].index_select(0, hid).clone()
    put("pooler", cols=hid)
    put("classifier")
    missing = set(out.state_dict()) ^ set(dst)
    if missing:  # a module this function does not know about: refuse rather than leave it random
        raise ValueError(f"surgery does not cover {sorted(missing)[:3]}")
    out.load_state_dict(dst)
    return out.train(model.training)
