"""What the cost model prices: per-layer precisions, latency features, file size and peak memory of a shape.

Every count comes from :mod:`edgenlp.models.arithmetic` (FLOPs of a linear and
of the attention core, stored bytes of a linear or an embedding table at a
precision); this module arranges them into the features each component's
latency is linear in (see :mod:`edgenlp.targets.costmodel`).
"""

from __future__ import annotations

from typing import Sequence

from edgenlp.models import arithmetic
from edgenlp.models.arithmetic import FP32_BYTES, PRECISION_BITS, attention_flops, linear_flops
from edgenlp.models.encoder import EncoderShape
from edgenlp.targets.target import PRECISIONS

COMPONENT_FEATURES: dict[str, tuple[str, ...]] = {
    "embedding": ("act", "one"),
    "attn_qkv": ("flops", "wbytes", "calls"),
    "attn_core": ("flops", "probs", "calls"),
    "attn_out": ("flops", "wbytes", "calls"),
    "ffn": ("flops", "wbytes", "act", "calls"),
    "other": ("act", "flops", "calls"),
    "runtime_overhead": ("one", "calls"),
}
LINEAR_COMPONENTS = ("attn_qkv", "attn_out", "ffn")
FEATURE_KIND = {"flops": "compute", "act": "vector", "probs": "vector", "calls": "call", "one": "call", "wbytes": "memory"}
INT4_GROUP = 32  # default in-features per int4 scale (QuantizeConfig.group_size's default, what calibration measures)
# the reference encoder for rates derived from a fit (and the planner's default shape)
MINILM_L6 = EncoderShape(family="bert", vocab_size=30522, hidden=384, heads=(12,) * 6, head_dim=32, ffn=(1536,) * 6)
Bits = str | tuple[str, ...]
MIXED = "mixed"


def resolve_mixed(bits: Bits, num_layers: int) -> Bits:
    """``"mixed"`` -> int8 in the first and last layer, int4 in between; anything else unchanged."""
    if bits != MIXED:
        return bits
    if num_layers <= 2:
        return ("int8",) * num_layers
    return ("int8",) + ("int4",) * (num_layers - 2) + ("int8",)


def layer_bits(shape: EncoderShape, bits: Bits) -> tuple[str, ...]:
    """Per-layer precision from ``"fp32"|"int8"|"int4"|"mixed"`` or a per-layer tuple."""
    bits = resolve_mixed(bits, shape.num_layers)
    per = (bits,) * shape.num_layers if isinstance(bits, str) else tuple(bits)
    if len(per) != shape.num_layers:
        raise ValueError(f"bits has {len(per)} entries for {shape.num_layers} layers")
    bad = [b for b in per if b not in PRECISIONS]
    if bad:
        raise ValueError(f"bits must be among {PRECISIONS}, got {bad[0]!r}")
    return per


def dominant(per: Sequence[str]) -> str:
    """The most common precision (ties: the narrower one)."""
    if not per:
        return "fp32"
    order = {p: i for i, p in enumerate(PRECISIONS)}
    return max(set(per), key=lambda p: (per.count(p), order[p]))


def weight_bytes(fin: int, fout: int, precision: str, *, group_size: int = INT4_GROUP) -> float:
    """Stored bytes of one linear that runs: its weight at ``precision`` (+ fp32 scales) and its fp32 bias.

    :func:`edgenlp.models.arithmetic.linear_bytes`, except that a linear
    without weights (pruned away) counts 0: it does not run, and
    :func:`size_bytes` adds the output bias a removed block keeps.
    """
    if fin * fout == 0:
        return 0.0
    return float(arithmetic.linear_bytes(fin, fout, PRECISION_BITS[precision], group_size=group_size))


def sparse_runs(precision: str, block_sparsity: float) -> bool:
    """Whether a linear at ``precision`` with ``block_sparsity`` of its blocks zero runs edgenlp's block-sparse op in the
    ExecuTorch program (:data:`edgenlp.sparse.convert.MIN_SPARSITY`: below it, export keeps the dense GEMM)."""
    from edgenlp.sparse.convert import MIN_SPARSITY

    return block_sparsity > 0 and precision in MIN_SPARSITY and block_sparsity >= MIN_SPARSITY[precision] - 1e-9


def stored_linear_bytes(fin: int, fout: int, precision: str, *, block_sparsity: float = 0.0, group_size: int = INT4_GROUP,
                        block: str = "1x4") -> float:  # fmt: skip
    """:func:`weight_bytes`, or the packed arrays' bytes (:func:`edgenlp.sparse.ops.packed_bytes`) of a linear that runs
    the block-sparse op."""
    if fin * fout and sparse_runs(precision, block_sparsity):
        from edgenlp.sparse.ops import packed_bytes

        return float(packed_bytes(fout, fin, block_sparsity, precision, block))
    return weight_bytes(fin, fout, precision, group_size=group_size)


def features(shape: EncoderShape, *, seq_len: int, bits: Bits, num_labels: int = 2,
             group_size: int = INT4_GROUP) -> dict[tuple[str, str], dict[str, float]]:  # fmt: skip
    """``{(component, precision): {feature: value}}`` for one sequence of ``seq_len`` tokens (batch 1).

    Linear components are split by the precision of their layer; the other
    components use the model's dominant precision. The head is priced as a
    pooler of the hidden width.
    """
    s, H, d = seq_len, shape.hidden, shape.head_dim
    per = layer_bits(shape, bits)
    dom = dominant(per)
    out: dict[tuple[str, str], dict[str, float]] = {}

    def add(comp: str, prec: str, **vals: float) -> None:
        row = out.setdefault((comp, prec), {f: 0.0 for f in COMPONENT_FEATURES[comp]})
        for k, v in vals.items():
            row[k] += v

    def wbytes(fin: int, fout: int, prec: str) -> float:
        return weight_bytes(fin, fout, prec, group_size=group_size)

    add("embedding", dom, act=s * H, one=1)
    for h, F, prec in zip(shape.heads, shape.ffn, per):
        A = h * d
        if A:
            add("attn_qkv", prec, flops=3 * linear_flops(H, A, tokens=s), wbytes=3 * wbytes(H, A, prec), calls=3)
            add("attn_out", prec, flops=linear_flops(A, H, tokens=s), wbytes=wbytes(A, H, prec), calls=1)
            add("attn_core", dom, flops=attention_flops(h, d, seq_len=s), probs=h * s * s, calls=1)
        if F:
            add("ffn", prec, flops=linear_flops(H, F, tokens=s) + linear_flops(F, H, tokens=s),
                wbytes=wbytes(H, F, prec) + wbytes(F, H, prec), act=s * F, calls=2)  # fmt: skip
        add("other", dom, act=2 * s * H, calls=1)
    add("other", dom, flops=linear_flops(H, H, tokens=1) + linear_flops(H, num_labels, tokens=1))
    add("runtime_overhead", dom, one=1, calls=shape.num_layers)
    return out


def size_bytes(shape: EncoderShape, *, bits: Bits, embeddings: str | None, num_labels: int = 2, group_size: int = INT4_GROUP,
               block_sparsity: float = 0.0) -> float:
    """The model file's weight bytes (what dominates a bundle's size).

    The word table at ``embeddings`` (one scale per row at int8 and int4, as
    :func:`edgenlp.quantize.schemes.weight_bytes` stores it), the rest of the embeddings and every norm in fp32,
    each layer's linears at its precision (a removed block keeps its output
    bias; with ``block_sparsity``, a linear that runs the block-sparse op
    counts its packed arrays), the head at the dominant precision as a pooler
    of the hidden width.
    """
    H = shape.hidden
    per = layer_bits(shape, bits)
    emb = PRECISION_BITS[embeddings or "fp32"]
    total = float(arithmetic.weight_bytes(shape.vocab_size, H, emb))  # per-row scales
    total += FP32_BYTES * float(arithmetic.embedding_params(shape) - shape.vocab_size * H)  # positions, token types, norm

    def linear(fin: int, fout: int, prec: str) -> float:
        if fin * fout and sparse_runs(prec, block_sparsity):
            return stored_linear_bytes(fin, fout, prec, block_sparsity=block_sparsity)
        return float(arithmetic.linear_bytes(fin, fout, PRECISION_BITS[prec], group_size=group_size))

    for h, F, prec in zip(shape.heads, shape.ffn, per):
        A = h * shape.head_dim
        total += 3 * linear(H, A, prec) + linear(A, H, prec)
        total += linear(H, F, prec) + linear(F, H, prec)
        total += FP32_BYTES * float(2 * arithmetic.norm_params(H))  # two layer norms
    dom = dominant(per)
    total += weight_bytes(H, H, dom, group_size=group_size) + weight_bytes(H, num_labels, dom, group_size=group_size)
    return total


def peak_memory_bytes(shape: EncoderShape, *, bits: Bits, embeddings: str | None, seq_len: int, runtime: str,
                      base_mb: float, num_labels: int = 2, group_size: int = INT4_GROUP,
                      block_sparsity: float = 0.0) -> float:  # fmt: skip
    """Resident peak: runtime base + file weights + packed copy of the linears + largest layer's activations.

    A block-sparse linear (ExecuTorch only: ONNX Runtime runs it dense) is read from the file as packed, and
    not packed again.
    """
    H, s = shape.hidden, seq_len
    per = layer_bits(shape, bits)
    sparsity = block_sparsity if runtime != "onnx" else 0.0
    linear = sparse = 0.0
    for h, F, prec in zip(shape.heads, shape.ffn, per):
        A = h * shape.head_dim
        parts = 3 * stored_linear_bytes(H, A, prec, block_sparsity=sparsity, group_size=group_size)
        parts += stored_linear_bytes(A, H, prec, block_sparsity=sparsity, group_size=group_size)
        parts += stored_linear_bytes(H, F, prec, block_sparsity=sparsity, group_size=group_size)
        parts += stored_linear_bytes(F, H, prec, block_sparsity=sparsity, group_size=group_size)
        if sparse_runs(prec, sparsity):
            sparse += parts
        else:
            linear += parts
    act_layer = max((4.0 * max(s * F, h * s * s + 3 * s * h * shape.head_dim) for h, F in zip(shape.heads, shape.ffn)), default=0.0)
    act = act_layer + 4.0 * 3 * s * H
    emb_rows = 4.0 * s * H
    if runtime == "onnx":  # the whole model is read into memory, then linears are prepacked
        file_bytes = size_bytes(shape, bits=bits, embeddings=embeddings, num_labels=num_labels, group_size=group_size)
        return base_mb * 2**20 + file_bytes + linear + act
    return base_mb * 2**20 + 2 * linear + sparse + emb_rows + act


def bundle_precision(recipe, num_layers: int) -> tuple[Bits, str | None]:
    """(per-layer bits, embedding scheme) from a recipe's ``quantize`` step (fp32 without one).

    Reads the step's config as a dict (``scheme``, ``layer_bits`` of
    ``(module, 32|8|4)``, ``embeddings``) so it does not depend on the
    quantization package being importable.
    """
    from edgenlp.models.families import LAYER_LINEARS

    cfg = None
    for step in recipe or ():
        if getattr(step, "type", None) == "quantize":
            c = step.config
            cfg = c.to_dict() if hasattr(c, "to_dict") else dict(c)
    if not cfg:
        return "fp32", None
    name = {32: "fp32", 8: "int8", 4: "int4"}
    default = {"int8": "int8", "int4": "int4"}.get(cfg.get("scheme"), "int8")
    explicit = {str(n): int(b) for n, b in cfg.get("layer_bits") or ()}
    per = []
    for i in range(num_layers):
        widths = [name.get(explicit[f"layers.{i}.{p}"], default) if f"layers.{i}.{p}" in explicit else default for p in LAYER_LINEARS]
        per.append(dominant(widths))
    return tuple(per), cfg.get("embeddings")
