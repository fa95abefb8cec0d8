"""Block-sparse linear layers as PyTorch ops (``torch.ops.edgenlp.*``) with the native kernels' packed layout.

Two ops, the Python side of ``runtime/ops/sparse_linear_op.cpp`` (whose
ExecuTorch kernels run them in ``.pte`` programs):

- ``edgenlp::sparse_linear(input, row_start, col, values, bias, n, block_rows, block_cols)``:
  fp32 weights, blocks of ``block_rows x block_cols`` (1x4, 1x8 or 4x1) along K;
- ``edgenlp::sparse_linear_qd8(input, row_start, col, values, scale, row_sum, bias, n, block_rows, block_cols)``:
  int8 weights per output channel with activations quantized per token at
  every call (the contract of XNNPACK's ``qd8-f32-qc8w`` GEMMs).

The packed arrays are exactly what ``runtime/kernels`` reads
(``include/edgenlp_kernels/sparse_linear.h``); :func:`pack_f32` and
:func:`pack_qc8w` write them in the order the C++ ``pack_*`` functions do (a
test compares the two byte for byte). The eager implementations here are the
reference: they unpack the weights and compute densely (for int8, with the
per-token activation quantization of the kernels' 8-bit ISAs; the AVX2 kernel
uses 7-bit activations, within the same tolerance).

:func:`register_ops` defines the ops once per process (no import side effect):
the export path and every loader of a sparse program call it.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

BLOCKS: dict[str, tuple[int, int]] = {"1x4": (1, 4), "1x8": (1, 8), "4x1": (4, 1)}
MAX_DIM = 32767  # columns are stored as int16 (read as uint16 by the kernels)

_lock = threading.Lock()
_library: torch.library.Library | None = None

F32_SCHEMA = ("sparse_linear(Tensor input, Tensor row_start, Tensor col, Tensor values, Tensor bias, int n, "
              "int block_rows, int block_cols) -> Tensor")
QD8_SCHEMA = ("sparse_linear_qd8(Tensor input, Tensor row_start, Tensor col, Tensor values, Tensor scale, "
              "Tensor row_sum, Tensor bias, int n, int block_rows, int block_cols) -> Tensor")


def parse_block(block: str | tuple[int, int]) -> tuple[int, int]:
    if isinstance(block, tuple):
        if block not in BLOCKS.values():
            raise ValueError(f"block must be one of {', '.join(BLOCKS)}, got {block[0]}x{block[1]}")
        return block
    if block not in BLOCKS:
        raise ValueError(f"block must be one of {', '.join(BLOCKS)}, got {block!r}")
    return BLOCKS[block]


def block_name(block: tuple[int, int]) -> str:
    return f"{block[0]}x{block[1]}"


def qc8w_tile(block: tuple[int, int]) -> tuple[int, int]:
    """(tile rows, tile groups of 4 columns) the int8 kernels store a block shape in: 4x1 blocks share 4x4 tiles."""
    return block[0], max(4, block[1]) // 4


# --------------------------------------------------------------------------- packing


def _tiles(w: np.ndarray, rows: int, cols: int) -> tuple[np.ndarray, np.ndarray]:
    """``w`` [n][k] cut into [row blocks][column blocks][rows][cols] (zero padded) and which tiles hold a non-zero."""
    n, k = w.shape
    nrb, kb = -(-n // rows), -(-k // cols)
    padded = np.zeros((nrb * rows, kb * cols), dtype=w.dtype)
    padded[:n, :k] = w
    t = padded.reshape(nrb, rows, kb, cols).transpose(0, 2, 1, 3)
    return t, (t != 0).any(axis=(2, 3))


def _csr(t: np.ndarray, keep: np.ndarray, cols: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rb, cb = np.nonzero(keep)  # row-major: row block by row block, columns ascending (the C++ loop order)
    row_start = np.zeros(keep.shape[0] + 1, dtype=np.int32)
    np.cumsum(keep.sum(axis=1), out=row_start[1:])
    return row_start, (cb * cols).astype(np.int16), np.ascontiguousarray(t[rb, cb])


def _check_dims(n: int, k: int) -> None:
    if not (1 <= n <= MAX_DIM and 1 <= k <= MAX_DIM):
        raise ValueError(f"sparse linear size {n}x{k} is outside 1..{MAX_DIM}")


def _scatter(row_start: np.ndarray, col: np.ndarray, values: np.ndarray, n: int, k: int) -> np.ndarray:
    """The [n][k] matrix of ``values`` [blocks][rows][width] placed at their row blocks and columns (zeros elsewhere)."""
    _, rows, width = values.shape
    nrb = row_start.shape[0] - 1
    out = np.zeros((nrb * rows, -(-k // 8) * 8 + width), dtype=values.dtype)
    rb = np.repeat(np.arange(nrb), np.diff(row_start))
    for b, (r, c) in enumerate(zip(rb, col.astype(np.int64) & 0xFFFF)):
        out[r * rows:(r + 1) * rows, c:c + width] = values[b]
    return out[:n, :k]


@dataclass(frozen=True)
class PackedF32:
    n: int
    k: int
    block: tuple[int, int]
    row_start: np.ndarray  # int32 [row blocks + 1]
    col: np.ndarray  # int16 [blocks]
    values: np.ndarray  # float32 [blocks][rows][cols]
    bias: np.ndarray  # float32 [row blocks * rows]

    @property
    def blocks(self) -> int:
        return int(self.col.shape[0])

    def dense(self) -> np.ndarray:
        """The weight matrix [n][k] the arrays encode."""
        return _scatter(self.row_start, self.col, self.values, self.n, self.k)


@dataclass(frozen=True)
class PackedQC8W:
    n: int
    k: int
    block: tuple[int, int]
    row_start: np.ndarray  # int32 [row blocks + 1]
    col: np.ndarray  # int16 [tiles]
    values: np.ndarray  # int8 [tiles][tile rows][4 * tile groups]
    scale: np.ndarray  # float32 [row blocks * tile rows]
    row_sum: np.ndarray  # int32, Σ_k q[n][k]
    bias: np.ndarray  # float32

    @property
    def tiles(self) -> int:
        return int(self.col.shape[0])

    def dense_q(self) -> np.ndarray:
        """The int8 weight matrix [n][k] the arrays encode."""
        return _scatter(self.row_start, self.col, self.values, self.n, self.k)


def pack_f32(weight: np.ndarray, bias: np.ndarray | None, block: str | tuple[int, int] = "1x4") -> PackedF32:
    """The non-zero blocks of ``weight`` [n][k] (float32), as ``pack_f32`` in runtime/kernels writes them."""
    rows, cols = parse_block(block)
    w = np.ascontiguousarray(weight, dtype=np.float32)
    n, k = w.shape
    _check_dims(n, k)
    t, keep = _tiles(w, rows, cols)
    row_start, col, values = _csr(t, keep, cols)
    b = np.zeros(t.shape[0] * rows, dtype=np.float32)
    if bias is not None:
        b[:n] = np.asarray(bias, dtype=np.float32)
    return PackedF32(n, k, (rows, cols), row_start, col, values.astype(np.float32), b)


def pack_qc8w(q: np.ndarray, scale: np.ndarray, bias: np.ndarray | None,
              block: str | tuple[int, int] = "1x4") -> PackedQC8W:
    """int8 ``q`` [n][k] in [-127, 127] with per-row ``scale`` [n], as ``pack_qc8w`` in runtime/kernels writes them."""
    bshape = parse_block(block)
    q = np.ascontiguousarray(q, dtype=np.int8)
    n, k = q.shape
    _check_dims(n, k)
    if (q == -128).any():
        raise ValueError("int8 sparse weights are symmetric: -128 is out of range (clamp to -127)")
    rows, groups = qc8w_tile(bshape)
    t, keep = _tiles(q, rows, 4 * groups)
    row_start, col, values = _csr(t, keep, 4 * groups)
    padded = t.shape[0] * rows
    s = np.zeros(padded, dtype=np.float32)
    s[:n] = np.asarray(scale, dtype=np.float32).reshape(-1)
    rs = np.zeros(padded, dtype=np.int32)
    rs[:n] = q.astype(np.int32).sum(axis=1)
    b = np.zeros(padded, dtype=np.float32)
    if bias is not None:
        b[:n] = np.asarray(bias, dtype=np.float32)
    return PackedQC8W(n, k, bshape, row_start, col, values.astype(np.int8), s, rs, b)


def packed_bytes(n: int, k: int, sparsity: float, precision: str, block: str | tuple[int, int] = "1x4") -> int:
    """Bytes of the arrays :func:`pack_f32` (``precision`` ``"fp32"``) or :func:`pack_qc8w` (``"int8"``) write for an
    ``n`` x ``k`` linear (with a bias) whose ``floor(sparsity x blocks)`` zero blocks are what
    :func:`edgenlp.prune.sparsity.block_masks` drops.

    Exact where a stored tile is one block (fp32, and int8 1x4 / 1x8); for int8 4x1, whose 4x4 tiles hold four
    blocks, an upper bound (every kept block in a tile of its own). The cost model sizes candidates with it.
    """
    if not 0.0 <= sparsity < 1.0:
        raise ValueError(f"sparsity must be in [0, 1), got {sparsity!r}")
    bshape = parse_block(block)
    if precision == "fp32":
        rows, cols, value_bytes, per_row = bshape[0], bshape[1], 4, 4  # values; bias
    elif precision == "int8":
        rows, groups = qc8w_tile(bshape)
        cols, value_bytes, per_row = 4 * groups, 1, 12  # int8 values; scale, row_sum, bias
    else:
        raise ValueError(f"sparse linears are fp32 or int8, got {precision!r}")
    blocks = -(-n // bshape[0]) * -(-k // bshape[1])
    kept_blocks = blocks - int(sparsity * blocks)
    nrb, tiles = -(-n // rows), -(-n // rows) * -(-k // cols)
    kept = min(tiles, kept_blocks)
    return int(4 * (nrb + 1) + kept * (2 + rows * cols * value_bytes) + per_row * nrb * rows)


def block_sparsity(weight: torch.Tensor | np.ndarray, block: str | tuple[int, int] = "1x4") -> float:
    """Fraction of ``block``-shaped blocks of ``weight`` [n][k] that are all zero."""
    rows, cols = parse_block(block)
    w = weight.detach().cpu().numpy() if isinstance(weight, torch.Tensor) else np.asarray(weight)
    _, keep = _tiles(w, rows, cols)
    return 1.0 - float(keep.mean())


# --------------------------------------------------------------------------- reference implementations


def _dense_from(row_start: torch.Tensor, col: torch.Tensor, values: torch.Tensor, n: int, k: int,
                rows: int, cols: int) -> torch.Tensor:
    """Scatter the blocks into a dense [n][k] matrix (torch ops only: runs under tracing and on fake tensors)."""
    nrb = row_start.shape[0] - 1
    kp = (k + 7) // 8 * 8 + cols
    counts = row_start[1:] - row_start[:-1]
    rb = torch.repeat_interleave(torch.arange(nrb), counts.to(torch.int64), output_size=col.shape[0])
    c0 = col.to(torch.int64) & 0xFFFF
    r_idx = (rb[:, None, None] * rows + torch.arange(rows)[None, :, None]).expand(-1, rows, cols)
    c_idx = (c0[:, None, None] + torch.arange(cols)[None, None, :]).expand(-1, rows, cols)
    dense = torch.zeros(nrb * rows, kp, dtype=values.dtype)
    dense[r_idx.reshape(-1), c_idx.reshape(-1)] = values.reshape(-1)
    return dense[:n, :k]


def sparse_linear_reference(input, row_start, col, values, bias, n, block_rows, block_cols):
    k = input.shape[-1]
    w = _dense_from(row_start, col, values.reshape(-1, block_rows, block_cols), n, k, block_rows, block_cols)
    return torch.nn.functional.linear(input, w, bias[:n])


def quantize_tokens(x: torch.Tensor, qmax: int = 255) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-token asymmetric quantization of the kernels' contract: (q, scale, zero point), each token its own."""
    lo = torch.clamp(x.amin(dim=-1, keepdim=True), max=0.0)
    hi = torch.clamp(x.amax(dim=-1, keepdim=True), min=0.0)
    s = (hi - lo) / qmax
    s = torch.where((s > 0) & torch.isfinite(s), s, torch.ones_like(s))
    z = torch.clamp(torch.round(-lo / s), 0, qmax)
    q = torch.clamp(torch.round(x * (1.0 / s)) + z, 0, qmax)
    return q, s, z


def sparse_linear_qd8_reference(input, row_start, col, values, scale, row_sum, bias, n, block_rows, block_cols, *,
                                qmax: int = 255):
    """``qmax`` 127 gives the 7-bit activations of the AVX2 kernel (``edgenlp_ops_act_qmax()`` says which runs)."""
    k = input.shape[-1]
    rows, groups = qc8w_tile((block_rows, block_cols))
    q = _dense_from(row_start, col, values.to(torch.float32).reshape(-1, rows, 4 * groups), n, k, rows, 4 * groups)
    xq, s, z = quantize_tokens(input, qmax)
    acc = torch.nn.functional.linear(xq - z, q)  # exact in fp32 for these sizes (|sum| < 2^24)
    return acc * (s * scale[:n]) + bias[:n]


def _f32_impl(input, row_start, col, values, bias, n, block_rows, block_cols):
    return sparse_linear_reference(input, row_start, col, values, bias, n, block_rows, block_cols)


def _qd8_impl(input, row_start, col, values, scale, row_sum, bias, n, block_rows, block_cols):
    return sparse_linear_qd8_reference(input, row_start, col, values, scale, row_sum, bias, n, block_rows, block_cols)


def _f32_out(input, row_start, col, values, bias, n, block_rows, block_cols, *, out):
    out.copy_(_f32_impl(input, row_start, col, values, bias, n, block_rows, block_cols))
    return out


def _qd8_out(input, row_start, col, values, scale, row_sum, bias, n, block_rows, block_cols, *, out):
    out.copy_(_qd8_impl(input, row_start, col, values, scale, row_sum, bias, n, block_rows, block_cols))
    return out


def _meta(input, *args):
    n = args[-3]
    return input.new_empty((*input.shape[:-1], n))


def _out_schema(schema: str) -> str:
    name, rest = schema.split("(", 1)
    args = rest.rsplit(") -> ", 1)[0]
    return f"{name}.out({args}, *, Tensor(a!) out) -> Tensor(a!)"


def register_ops() -> None:
    """Define ``torch.ops.edgenlp.sparse_linear`` and ``sparse_linear_qd8`` (and their ``.out``) once per process."""
    global _library
    with _lock:
        if _library is not None:
            return
        lib = torch.library.Library("edgenlp", "FRAGMENT")
        for schema, impl, out in ((F32_SCHEMA, _f32_impl, _f32_out), (QD8_SCHEMA, _qd8_impl, _qd8_out)):
            name = schema.split("(", 1)[0]
            lib.define(schema)
            lib.define(_out_schema(schema))
            lib.impl(name, impl, "CompositeExplicitAutograd")
            lib.impl(name, _meta, "Meta")
            lib.impl(f"{name}.out", out, "CompositeExplicitAutograd")
        _library = lib


# --------------------------------------------------------------------------- modules


def _buffer(a: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(a).copy())


class SparseLinear(nn.Module):
    """A linear layer whose weight is held block-sparse (fp32) and runs ``edgenlp::sparse_linear``."""

    def __init__(self, packed: PackedF32) -> None:
        super().__init__()
        register_ops()
        self.in_features, self.out_features, self.block = packed.k, packed.n, packed.block
        for name in ("row_start", "col", "values", "bias"):
            self.register_buffer(name, _buffer(getattr(packed, name)))

    @classmethod
    def from_linear(cls, linear: nn.Linear, block: str | tuple[int, int] = "1x4") -> SparseLinear:
        b = None if linear.bias is None else linear.bias.detach().cpu().numpy()
        return cls(pack_f32(linear.weight.detach().cpu().numpy(), b, block))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.edgenlp.sparse_linear(x, self.row_start, self.col, self.values, self.bias,
                                               self.out_features, self.block[0], self.block[1])

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, block={block_name(self.block)}, "
                f"blocks={self.col.shape[0]}")


class SparseLinearQD8(nn.Module):
    """A linear layer with block-sparse int8 weights (per output channel) and per-token int8 activations."""

    def __init__(self, packed: PackedQC8W) -> None:
        super().__init__()
        register_ops()
        self.in_features, self.out_features, self.block = packed.k, packed.n, packed.block
        for name in ("row_start", "col", "values", "scale", "row_sum", "bias"):
            self.register_buffer(name, _buffer(getattr(packed, name)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.edgenlp.sparse_linear_qd8(x, self.row_start, self.col, self.values, self.scale,
                                                   self.row_sum, self.bias, self.out_features, self.block[0],
                                                   self.block[1])

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, block={block_name(self.block)}, "
                f"tiles={self.col.shape[0]}, int8")
