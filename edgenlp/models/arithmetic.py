"""Sizes of an encoder shape: parameters, stored weight bytes, FLOPs and activation bytes.

The one place these formulas live. The profiler (:mod:`edgenlp.profile.analytic`,
which applies them to the modules it finds), the pruner's budget
(:mod:`edgenlp.prune.masks`), the quantizer's size prediction
(:mod:`edgenlp.quantize.schemes`) and the cost model
(:mod:`edgenlp.targets.costmodel`) call these functions instead of writing the
arithmetic out again.

Notation: ``b`` batch, ``s`` sequence length; per layer ``h`` heads of
``d`` (attention width ``A = h·d``) and FFN width ``F``; hidden ``H``, pooler
width ``P`` (``shape.pooler_width``), ``L`` labels, vocabulary ``V``.

* **Parameters.** A linear ``in → out`` has ``in·out + out`` (weight and
  bias), a layer norm ``2·width``. The embedding component is the word,
  position and token-type tables and the embedding norm; ``other`` is the two
  norms of every layer, the pooler and the classifier.
* **FLOPs** count matrix multiplications only, a multiply-add being 2 FLOPs,
  as :class:`torch.utils.flop_counter.FlopCounterMode` does: a linear
  ``2·tokens·in·out`` (the head runs on the [CLS] token only, ``tokens = b``),
  the attention core ``2·(2·b·h·s²·d)`` for QKᵀ and AV. Gathers, adds, norms,
  softmax and activations count 0.
* **Activation bytes** are the sizes of each component's outputs, summed over
  layers (traffic, not peak): embedding ``b·s·H``; QKV ``3·b·s·A``; attention
  core the probabilities ``b·h·s²`` plus the context ``b·s·A``; output
  projection ``b·s·H``; FFN ``b·s·F + b·s·H``; other the two norm outputs per
  layer, the pooler's ``b·P`` and the logits ``b·L``. A linear with no weights
  (0 heads, 0 FFN width) does not run and writes nothing.
* **Stored weight bytes** (:func:`weight_bytes`): fp32 (32 bits) takes 4 bytes
  per weight. A ``rows × cols`` weight of ``bits``-bit integers takes
  ``⌈rows·cols·bits/8⌉`` bytes plus one fp32 scale per row (per output
  channel, ``group_size=None``) or per group of ``group_size`` columns of each
  row (``rows·⌈cols/group_size⌉`` scales). :class:`StorageMarker` names such a
  format. Biases stay fp32 (:func:`linear_bytes`).

Counting functions take plain ints. :func:`encoder_params` and
:func:`encoder_flops` also take float tensors for the head and FFN counts (the
pruner differentiates its expected size through them).

Example::

    shape = EncoderShape.uniform(num_layers=6, hidden=384, num_heads=12, ffn=1536)
    sum(component_params(shape, num_labels=2).values())   # 22,713,986 (MiniLM-L6 with a 2-label head)
    linear_bytes(384, 1536, 4, group_size=32)              # 374,784: int4 weight, group scales, fp32 bias
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from edgenlp.models.encoder import EncoderShape

COMPONENTS = ("embedding", "attn_qkv", "attn_core", "attn_out", "ffn", "other")  # the profiler's rows, in table order
FP32_BYTES = 4
PRECISION_BITS = {"fp32": 32, "int8": 8, "int4": 4}


# --------------------------------------------------------------------------- stored bytes


@dataclass(frozen=True)
class StorageMarker:
    """Weights stored as ``bits``-bit integers with an fp32 scale per output channel (``group_size=None``) or per group."""

    bits: int
    group_size: int | None = None
    scale_bytes: int = 4

    def __post_init__(self) -> None:
        if self.bits not in (2, 4, 8, 16):
            raise ValueError(f"bits must be one of 2, 4, 8, 16, got {self.bits}")
        if self.group_size is not None and self.group_size <= 0:
            raise ValueError(f"group_size must be positive or None, got {self.group_size}")
        if self.scale_bytes <= 0:
            raise ValueError(f"scale_bytes must be positive, got {self.scale_bytes}")

    @property
    def format(self) -> str:
        return f"int{self.bits}" + (f"-g{self.group_size}" if self.group_size else "")

    def weight_bytes(self, rows: int, cols: int) -> int:
        """Stored bytes of a ``rows × cols`` weight in this format (scales included, no bias)."""
        return weight_bytes(rows, cols, self.bits, group_size=self.group_size, scale_bytes=self.scale_bytes)


def weight_bytes(rows: int, cols: int, bits: int, *, group_size: int | None = None, scale_bytes: int = 4) -> int:
    """Stored bytes of a ``rows × cols`` weight at ``bits`` (32: fp32, no scales; else packed integers + scales).

    Scales are one per row (``group_size=None``) or one per ``group_size``
    columns of each row, ``scale_bytes`` each. ``rows`` is a linear's output
    features or an embedding table's tokens.

    >>> weight_bytes(1536, 384, 8)                  # int8, one scale per output channel
    595968
    >>> weight_bytes(1536, 384, 4, group_size=32)   # int4, 12 groups per row
    368640
    """
    if bits == 32:
        return rows * cols * FP32_BYTES
    groups = 1 if group_size is None else math.ceil(cols / group_size)
    return math.ceil(rows * cols * bits / 8) + rows * groups * scale_bytes


def linear_bytes(fin: int, fout: int, bits: int, *, group_size: int | None = None) -> int:
    """Stored bytes of one linear ``fin → fout``: its weight at ``bits`` and its fp32 bias.

    ``group_size`` applies to 4-bit weights only; 8-bit weights have one scale
    per output channel (the quantizer's schemes). A linear without weights (a
    pruned-away block) stores only its bias.
    """
    bias = fout * FP32_BYTES
    if fin * fout == 0:
        return bias
    return weight_bytes(fout, fin, bits, group_size=group_size if bits == 4 else None) + bias


# --------------------------------------------------------------------------- parameters


def linear_params(fin, fout):
    """Weight and bias of a linear ``fin → fout``."""
    return fin * fout + fout


def norm_params(width):
    """Scale and shift of a layer norm."""
    return 2 * width


def embedding_params(shape: EncoderShape) -> int:
    """Word, position and token-type tables and the embedding norm."""
    return (shape.vocab_size + shape.max_positions + shape.type_vocab_size) * shape.hidden + norm_params(shape.hidden)


def encoder_params(hidden, head_dim: int, heads: Sequence, ffn: Sequence):
    """Parameters of the transformer layers (linears + layer norms; no embeddings or head).

    Takes ints or float tensors (the expected number of kept heads/neurons).
    """
    total = 0
    for h, f in zip(heads, ffn):
        inner = h * head_dim
        total = total + 3 * linear_params(hidden, inner) + linear_params(inner, hidden)  # Q, K, V, out
        total = total + linear_params(hidden, f) + linear_params(f, hidden)  # FFN in, out
        total = total + 2 * norm_params(hidden)  # two layer norms
    return total


def head_params(shape: EncoderShape, num_labels: int) -> int:
    """Pooler ``H → P`` and classifier ``P → L``."""
    return linear_params(shape.hidden, shape.pooler_width) + linear_params(shape.pooler_width, num_labels)


def total_params(shape: EncoderShape, num_labels: int) -> int:
    """Every parameter of an :class:`~edgenlp.models.encoder.EncoderClassifier` of ``shape``."""
    return embedding_params(shape) + encoder_params(shape.hidden, shape.head_dim, shape.heads, shape.ffn) + head_params(shape, num_labels)


def component_params(shape: EncoderShape, *, num_labels: int) -> dict[str, int]:
    """Parameters per profiler component (:data:`COMPONENTS`); ``num_labels=0`` leaves the classifier out."""
    H = shape.hidden
    out = dict.fromkeys(COMPONENTS, 0)
    out["embedding"] = embedding_params(shape)
    for h, F in zip(shape.heads, shape.ffn):
        A = h * shape.head_dim
        out["attn_qkv"] += 3 * linear_params(H, A)
        out["attn_out"] += linear_params(A, H)
        out["ffn"] += linear_params(H, F) + linear_params(F, H)
        out["other"] += 2 * norm_params(H)
    out["other"] += head_params(shape, num_labels)
    return out


# --------------------------------------------------------------------------- FLOPs


def linear_flops(fin: int, fout: int, *, tokens: int) -> int:
    """A linear ``fin → fout`` applied to ``tokens`` rows: ``2·tokens·fin·fout``."""
    return 2 * tokens * fin * fout


def attention_flops(heads: int, head_dim: int, *, seq_len: int, batch: int = 1) -> int:
    """QKᵀ and AV of ``heads`` heads: ``2·(2·b·h·s²·d)``."""
    return 2 * (2 * batch * heads * seq_len * seq_len * head_dim)


def encoder_flops(hidden, head_dim: int, heads: Sequence, ffn: Sequence, *, seq_len: int, attention_weight: float = 1):
    """FLOPs of the transformer layers for one sequence of ``seq_len`` tokens (no head).

    Per layer the four attention linears, the attention core and the two FFN
    linears, i.e. ``4·linear_flops(H, A) + attention_flops + 2·linear_flops(H, F)``,
    written as one expression; takes ints or float tensors like :func:`encoder_params`.
    ``attention_weight`` counts each attention-core FLOP as that many linear
    FLOPs (a latency proxy: on a CPU running int8 linears the fp32 attention
    core and its softmax cost several times more per FLOP).
    """
    s = seq_len
    total = 0
    for h, f in zip(heads, ffn):
        inner = h * head_dim
        total = total + 2 * (4 * s * hidden * inner + attention_weight * 2 * s * s * inner + 2 * s * hidden * f)
    return total


def component_flops(shape: EncoderShape, *, seq_len: int, batch: int = 1, num_labels: int) -> dict[str, int]:
    """FLOPs per profiler component for ``batch`` sequences of ``seq_len`` tokens (``num_labels=0``: no classifier)."""
    H, P, tokens = shape.hidden, shape.pooler_width, batch * seq_len
    out = dict.fromkeys(COMPONENTS, 0)
    for h, F in zip(shape.heads, shape.ffn):
        A = h * shape.head_dim
        out["attn_qkv"] += 3 * linear_flops(H, A, tokens=tokens)
        out["attn_core"] += attention_flops(h, shape.head_dim, seq_len=seq_len, batch=batch)
        out["attn_out"] += linear_flops(A, H, tokens=tokens)
        out["ffn"] += linear_flops(H, F, tokens=tokens) + linear_flops(F, H, tokens=tokens)
    out["other"] = linear_flops(H, P, tokens=batch) + linear_flops(P, num_labels, tokens=batch)
    return out


# --------------------------------------------------------------------------- activations


def linear_activations(fin: int, fout: int, *, tokens: int) -> int:
    """Elements a linear writes: ``tokens·fout``, none when it has no weights (it does not run)."""
    return tokens * fout if fin * fout else 0


def attention_activations(heads: int, head_dim: int, *, seq_len: int, batch: int = 1) -> int:
    """Elements the attention core writes: probabilities ``b·h·s²`` and context ``b·s·h·d`` (none without heads)."""
    b, s = batch, seq_len
    return b * heads * s * s + b * s * heads * head_dim if heads else 0


def component_activation_bytes(shape: EncoderShape, *, seq_len: int, batch: int = 1, num_labels: int,
                               bytes_per_element: int = FP32_BYTES) -> dict[str, int]:  # fmt: skip
    """Bytes of the outputs each profiler component writes, summed over layers (see the module docstring)."""
    H, P, tokens = shape.hidden, shape.pooler_width, batch * seq_len
    out = dict.fromkeys(COMPONENTS, 0)
    out["embedding"] = tokens * H
    for h, F in zip(shape.heads, shape.ffn):
        A = h * shape.head_dim
        out["attn_qkv"] += 3 * linear_activations(H, A, tokens=tokens)
        out["attn_core"] += attention_activations(h, shape.head_dim, seq_len=seq_len, batch=batch)
        out["attn_out"] += linear_activations(A, H, tokens=tokens)
        out["ffn"] += linear_activations(H, F, tokens=tokens) + linear_activations(F, H, tokens=tokens)
        out["other"] += 2 * tokens * H  # the two layer norms
    out["other"] += linear_activations(H, P, tokens=batch) + linear_activations(P, num_labels, tokens=batch)
    return {c: n * bytes_per_element for c, n in out.items()}
