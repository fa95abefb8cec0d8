"""Structured masks as data, model sizes, and the masked forward pass.

A :class:`MaskDict` names what a pruned model keeps: per layer the kept
attention heads and FFN neurons plus two sublayer flags (attention on/off, FFN
on/off), and the kept hidden dimensions (one set shared by the embeddings,
every layer and the pooler input). It is plain JSON, written by the mask
learning stage (:mod:`edgenlp.prune.methods`) and read by surgery
(:func:`edgenlp.prune.surgery.apply_masks`)::

    {"type": "MaskDict", "version": 1, "method": "fast",
     "model": {"hidden": 384, "heads": [12, ...], "ffn": [1536, ...]},
     "hidden": null,                               # null = every hidden dim kept
     "layers": [{"heads": [0, 3, 7], "neurons": [...], "attention": true, "ffn": true}, ...],
     "sparsity": {"encoder_params": 0.5, ...}}

:func:`masked_forward` runs an :class:`EncoderClassifier` with (soft or hard)
gates on the same structures, the reference that surgery must reproduce and
the forward pass that CoFi and the importance methods differentiate through.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from edgenlp.errors import EdgeNLPError
from edgenlp.models.arithmetic import encoder_flops, encoder_params, total_params  # also imported from here (prune.common)
from edgenlp.models.encoder import EncoderClassifier, EncoderShape

MASK_VERSION = 1


class MaskError(EdgeNLPError):
    """A mask dict that does not fit the model, or cannot be read."""


# --------------------------------------------------------------------------- sizes


def size_report(original: EncoderShape, pruned: EncoderShape, *, num_labels: int, seq_len: int,
                attention_weight: float | None = None) -> dict:
    """Sizes of both shapes and the achieved sparsity (fraction removed) in each measure.

    The counts are :mod:`edgenlp.models.arithmetic`'s (encoder params, every
    parameter, encoder FLOPs for one sequence of ``seq_len`` tokens). With
    ``attention_weight`` also ``latency``: the FLOPs with the attention core
    weighted so (what a ``latency`` pruning target measures).
    """

    def sizes(s: EncoderShape) -> dict:
        out = {"encoder_params": int(encoder_params(s.hidden, s.head_dim, s.heads, s.ffn)),
               "total_params": int(total_params(s, num_labels)),
               "flops": int(encoder_flops(s.hidden, s.head_dim, s.heads, s.ffn, seq_len=seq_len))}
        if attention_weight is not None:
            out["latency"] = int(encoder_flops(s.hidden, s.head_dim, s.heads, s.ffn, seq_len=seq_len,
                                               attention_weight=attention_weight))
        return out

    a, b = sizes(original), sizes(pruned)
    return {"original": a, "pruned": b, "seq_len": seq_len,
            "sparsity": {k: round(1.0 - b[k] / a[k], 6) if a[k] else 0.0 for k in a}}


# --------------------------------------------------------------------------- the mask dict


def _indices(values: Any, limit: int, what: str) -> tuple[int, ...]:
    if not isinstance(values, (list, tuple)):
        raise MaskError(f"{what}: expected a list of indices, got {type(values).__name__}")
    out = []
    for v in values:
        if isinstance(v, bool) or not isinstance(v, int):
            raise MaskError(f"{what}: index {v!r} is not an integer")
        out.append(int(v))
    if len(set(out)) != len(out):
        raise MaskError(f"{what}: repeated indices")
    out.sort()
    if out and (out[0] < 0 or out[-1] >= limit):
        bad = next(v for v in out if v < 0 or v >= limit)
        raise MaskError(f"{what}: index {bad} out of range 0..{limit - 1}")
    return tuple(out)


@dataclass(frozen=True)
class LayerMask:
    """What one layer keeps: head and neuron indices, and whether each sublayer stays."""

    heads: tuple[int, ...]
    neurons: tuple[int, ...]
    attention: bool = True
    ffn: bool = True

    def kept_heads(self) -> tuple[int, ...]:
        return self.heads if self.attention else ()

    def kept_neurons(self) -> tuple[int, ...]:
        return self.neurons if self.ffn else ()

    def to_dict(self) -> dict:
        return {"heads": list(self.heads), "neurons": list(self.neurons), "attention": self.attention, "ffn": self.ffn}


@dataclass(frozen=True)
class MaskDict:
    """Named structured masks for one model shape (see the module docstring for the JSON form).

    ``hidden`` is None when every hidden dimension is kept. ``model`` records
    the shape the masks were made for (hidden, heads, ffn), which
    :meth:`check` compares against the model they are applied to.
    """

    layers: tuple[LayerMask, ...]
    model: dict
    hidden: tuple[int, ...] | None = None
    method: str = ""
    sparsity: dict = field(default_factory=dict)

    @classmethod
    def full(cls, shape: EncoderShape, *, method: str = "") -> "MaskDict":
        """Keep everything (the identity mask)."""
        layers = tuple(LayerMask(tuple(range(h)), tuple(range(f))) for h, f in zip(shape.heads, shape.ffn))
        return cls(layers, shape_summary(shape), None, method)

    # --- shape of the result

    def pruned_shape(self, shape: EncoderShape) -> EncoderShape:
        """The shape surgery produces from ``shape`` (which must fit, see :meth:`check`)."""
        from dataclasses import replace

        hidden = shape.hidden if self.hidden is None else len(self.hidden)
        if hidden == 0:
            raise MaskError("the mask keeps no hidden dimension")
        return replace(shape, hidden=hidden, heads=tuple(len(l.kept_heads()) for l in self.layers),
                       ffn=tuple(len(l.kept_neurons()) for l in self.layers),
                       pooler=shape.pooler_width)

    def check(self, shape: EncoderShape) -> None:
        """Raise :class:`MaskError` unless these masks fit a model of ``shape``."""
        want = shape_summary(shape)
        if self.model and self.model != want:
            raise MaskError(f"masks were made for a model with {_describe(self.model)}, "
                            f"this model has {_describe(want)}")
        if len(self.layers) != shape.num_layers:
            raise MaskError(f"masks have {len(self.layers)} layers, the model has {shape.num_layers}")
        for i, (layer, h, f) in enumerate(zip(self.layers, shape.heads, shape.ffn)):
            _indices(list(layer.heads), h, f"layer {i} heads")
            _indices(list(layer.neurons), f, f"layer {i} neurons")
        if self.hidden is not None:
            _indices(list(self.hidden), shape.hidden, "hidden")
            if not self.hidden:
                raise MaskError("the mask keeps no hidden dimension")

    # --- JSON

    def to_dict(self) -> dict:
        return {"type": "MaskDict", "version": MASK_VERSION, "method": self.method, "model": dict(self.model),
                "hidden": None if self.hidden is None else list(self.hidden),
                "layers": [l.to_dict() for l in self.layers], "sparsity": dict(self.sparsity)}

    @classmethod
    def from_dict(cls, d: Any, *, where: str = "masks") -> "MaskDict":
        if not isinstance(d, dict) or d.get("type") != "MaskDict":
            raise MaskError(f"{where}: not a MaskDict (expected an object with type 'MaskDict')")
        if not isinstance(d.get("version"), int) or d["version"] > MASK_VERSION:
            raise MaskError(f"{where}: MaskDict version {d.get('version')!r} is newer than this edgenlp reads ({MASK_VERSION})")
        if not isinstance(d.get("layers"), list):
            raise MaskError(f"{where}: 'layers' must be a list")
        layers = []
        for i, l in enumerate(d["layers"]):
            if not isinstance(l, dict):
                raise MaskError(f"{where}: layers[{i}] must be an object")
            for flag in ("attention", "ffn"):
                if not isinstance(l.get(flag, True), bool):
                    raise MaskError(f"{where}: layers[{i}].{flag} must be true or false")
            layers.append(LayerMask(_indices(l.get("heads", []), 1 << 30, f"{where}: layers[{i}].heads"),
                                    _indices(l.get("neurons", []), 1 << 30, f"{where}: layers[{i}].neurons"),
                                    attention=l.get("attention", True), ffn=l.get("ffn", True)))
        hidden = d.get("hidden")
        hidden = None if hidden is None else _indices(hidden, 1 << 30, f"{where}: hidden")
        return cls(tuple(layers), dict(d.get("model") or {}), hidden, str(d.get("method", "")), dict(d.get("sparsity") or {}))

    def save(self, path: str | Path) -> Path:
        from edgenlp.utils import atomic_write_json

        return atomic_write_json(path, self.to_dict())

    @classmethod
    def load(cls, path: str | Path) -> "MaskDict":
        p = Path(path)
        try:
            return cls.from_dict(json.loads(p.read_text()), where=str(p))
        except (OSError, json.JSONDecodeError) as exc:
            raise MaskError(f"{p}: cannot read masks ({exc})") from exc


def shape_summary(shape: EncoderShape) -> dict:
    return {"hidden": shape.hidden, "heads": list(shape.heads), "ffn": list(shape.ffn)}


def _describe(s: dict) -> str:
    return f"hidden {s.get('hidden')}, heads {s.get('heads')}, ffn {s.get('ffn')}"


# --------------------------------------------------------------------------- gates and the masked forward


@dataclass
class Gates:
    """Multiplicative gates on a model's structures (1 = keep, 0 = remove, soft values allowed).

    ``head[i]``: ``[heads_i]``; ``neuron[i]``: ``[ffn_i]``; ``attn``/``ffn``: ``[layers]``;
    ``hidden``: ``[hidden]`` or None (no hidden gate).
    """

    head: list[torch.Tensor]
    neuron: list[torch.Tensor]
    attn: torch.Tensor
    ffn: torch.Tensor
    hidden: torch.Tensor | None = None

    @classmethod
    def ones(cls, shape: EncoderShape, *, hidden: bool = False, requires_grad: bool = False,
             device: torch.device | str = "cpu") -> "Gates":
        def t(n):
            return torch.ones(n, requires_grad=requires_grad, device=device)

        return cls([t(h) for h in shape.heads], [t(f) for f in shape.ffn], t(shape.num_layers), t(shape.num_layers),
                   t(shape.hidden) if hidden else None)

    @classmethod
    def from_masks(cls, masks: MaskDict, shape: EncoderShape, *, device: torch.device | str = "cpu") -> "Gates":
        """Binary gates equivalent to ``masks``."""
        g = cls.ones(shape, hidden=masks.hidden is not None, device=device)
        with torch.no_grad():
            for i, layer in enumerate(masks.layers):
                g.head[i].zero_()[list(layer.heads)] = 1.0
                g.neuron[i].zero_()[list(layer.neurons)] = 1.0
                g.attn[i] = float(layer.attention)
                g.ffn[i] = float(layer.ffn)
            if masks.hidden is not None:
                g.hidden.zero_()[list(masks.hidden)] = 1.0
        return g


def _masked_norm(norm: torch.nn.LayerNorm, x: torch.Tensor, keep: torch.Tensor | None) -> torch.Tensor:
    """LayerNorm whose statistics cover only the dimensions where ``keep`` is nonzero."""
    if keep is None:
        return norm(x)
    on = (keep != 0).to(x.dtype)
    n = on.sum()
    mean = (x * on).sum(-1, keepdim=True) / n
    var = (((x - mean) * on) ** 2).sum(-1, keepdim=True) / n
    return (x - mean) / torch.sqrt(var + norm.eps) * norm.weight + norm.bias


def masked_forward(model: EncoderClassifier, input_ids: torch.Tensor, attention_mask: torch.Tensor, gates: Gates,
                   *, hidden_states: bool = False):
    """Logits of ``model`` with ``gates`` applied (CoFi's masked model).

    Head gates scale each head's context before the output projection, neuron
    gates the FFN activations, the sublayer gates scale the whole sublayer
    output (bias included), and the hidden gate scales every hidden state
    (layer norms then normalize over the kept dimensions only). With binary
    gates this is exactly the model surgery produces. With ``hidden_states``
    returns ``(logits, [embedding output, layer outputs...])``.
    """
    hz = gates.hidden
    emb = model.embeddings
    seq = input_ids.shape[1]
    x = emb.word(input_ids) + emb.position.weight[:seq]
    if emb.token_type is not None:
        x = x + emb.token_type.weight[:1]
    x = emb.dropout(_masked_norm(emb.norm, x, hz))
    if hz is not None:
        x = x * hz
    bias = model.mask_bias(attention_mask, x.dtype)
    states = [x]
    b, s, _ = x.shape
    for i, layer in enumerate(model.layers):
        h, d = layer.num_heads, layer.head_dim
        if h:
            q = layer.query(x).view(b, s, h, d).transpose(1, 2)
            k = layer.key(x).view(b, s, h, d).transpose(1, 2)
            v = layer.value(x).view(b, s, h, d).transpose(1, 2)
            scores = q @ k.transpose(-1, -2) * (1.0 / math.sqrt(d)) + bias
            ctx = layer.attn_dropout(torch.softmax(scores, dim=-1)) @ v  # [b, h, s, d]
            ctx = ctx * gates.head[i].view(1, h, 1, 1)
            a = layer.attn_out(ctx.transpose(1, 2).reshape(b, s, h * d))
        else:
            a = layer.attn_out.bias.expand_as(x)
        a = a * gates.attn[i]
        if hz is not None:
            a = a * hz
        x = _masked_norm(layer.attn_norm, x + layer.dropout(a), hz)
        if hz is not None:
            x = x * hz
        if layer.ffn_in.out_features:
            f = layer.ffn_out(layer.act(layer.ffn_in(x)) * gates.neuron[i])
        else:
            f = layer.ffn_out.bias.expand_as(x)
        f = f * gates.ffn[i]
        if hz is not None:
            f = f * hz
        x = _masked_norm(layer.ffn_norm, x + layer.dropout(f), hz)
        if hz is not None:
            x = x * hz
        states.append(x)
    cls = x[:, 0]
    logits = model.classifier(model.head_dropout(model.pooler_act(model.pooler(cls))))
    return (logits, states) if hidden_states else logits


@torch.no_grad()
def fold_gates(model: EncoderClassifier, gates: Gates) -> EncoderClassifier:
    """Scale ``model``'s weights in place so that its plain forward equals ``masked_forward`` with ``gates``
    wherever a gate is nonzero (soft values allowed); returns ``model``.

    After folding, surgery with the binary masks "gate != 0" gives a model whose
    logits equal ``masked_forward(model_before, ..., gates)``: CoFi's pruned
    model keeps the learned scale of every unit it keeps. Head gates scale the
    head's columns of the attention output projection, neuron gates the FFN
    output columns, sublayer gates the whole output projection (bias
    included), and the hidden gate every writer of the hidden stream (output
    projection rows and biases, layer-norm weights and biases).
    """
    hz = gates.hidden
    emb = model.embeddings
    if hz is not None:
        emb.norm.weight.mul_(hz)
        emb.norm.bias.mul_(hz)
    for i, layer in enumerate(model.layers):
        if layer.num_heads:
            cols = gates.head[i].repeat_interleave(layer.head_dim)
            layer.attn_out.weight.mul_(cols.view(1, -1))
        layer.attn_out.weight.mul_(gates.attn[i])
        layer.attn_out.bias.mul_(gates.attn[i])
        if layer.ffn_in.out_features:
            layer.ffn_out.weight.mul_(gates.neuron[i].view(1, -1))
        layer.ffn_out.weight.mul_(gates.ffn[i])
        layer.ffn_out.bias.mul_(gates.ffn[i])
        if hz is not None:
            for lin in (layer.attn_out, layer.ffn_out):
                lin.weight.mul_(hz.view(-1, 1))
                lin.bias.mul_(hz)
            for norm in (layer.attn_norm, layer.ffn_norm):
                norm.weight.mul_(hz)
                norm.bias.mul_(hz)
    return model
