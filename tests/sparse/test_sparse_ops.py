"""edgenlp's block-sparse linear ops: packing, the eager reference, the ExecuTorch kernels (libedgenlp_ops.so)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from edgenlp.run.executorch import ops_library_path, sparse_act_qmax
from edgenlp.sparse.ops import (BLOCKS, SparseLinear, SparseLinearQD8, block_sparsity, pack_f32, pack_qc8w,
                                quantize_tokens, register_ops, sparse_linear_qd8_reference)

needs_ops = pytest.mark.skipif(not ops_library_path().is_file(),
                               reason="libedgenlp_ops.so not built (bash runtime/build.sh)")


def sparse_weight(n, k, block, sparsity, seed=0):
    """[n][k] float32 with ``sparsity`` of its ``block`` blocks zero (odd sizes: partial blocks at the edges)."""
    rows, cols = BLOCKS[block]
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((n, k)).astype(np.float32)
    nrb, kb = -(-n // rows), -(-k // cols)
    keep = rng.random((nrb, kb)) >= sparsity
    mask = np.repeat(np.repeat(keep, rows, axis=0), cols, axis=1)[:n, :k]
    return w * mask


def int8_weight(w):
    scale = np.abs(w).max(axis=1) / 127.0
    scale[scale == 0] = 1.0
    q = np.clip(np.round(w / scale[:, None]), -127, 127).astype(np.int8)
    return q, scale.astype(np.float32)


@pytest.mark.parametrize("block", list(BLOCKS))
@pytest.mark.parametrize("n,k", [(1, 1), (7, 13), (37, 45), (64, 96)])
def test_packing_round_trips_and_counts_blocks(block, n, k):
    w = sparse_weight(n, k, block, 0.7, seed=n * k)
    p = pack_f32(w, np.arange(n, dtype=np.float32), block)
    np.testing.assert_array_equal(p.dense(), w)
    rows, cols = BLOCKS[block]
    assert p.row_start[0] == 0 and p.row_start[-1] == p.blocks and (np.diff(p.row_start) >= 0).all()
    assert (p.col % cols == 0).all() and p.values.shape == (p.blocks, rows, cols)
    assert p.blocks == round((1 - block_sparsity(w, block)) * (-(-n // rows)) * (-(-k // cols)))
    np.testing.assert_array_equal(p.bias[:n], np.arange(n))
    assert not p.bias[n:].any()
    q, s = int8_weight(w)
    pq = pack_qc8w(q, s, None, block)
    np.testing.assert_array_equal(pq.dense_q(), q)
    np.testing.assert_array_equal(pq.row_sum[:n], q.astype(np.int32).sum(axis=1))
    assert (pq.col % 4 == 0).all()


def test_int8_packing_refuses_minus_128():
    with pytest.raises(ValueError, match="-128"):
        pack_qc8w(np.full((2, 4), -128, dtype=np.int8), np.ones(2, np.float32), None)


@pytest.mark.parametrize("block", list(BLOCKS))
def test_eager_ops_equal_dense_linears(block):
    register_ops()
    w = sparse_weight(37, 45, block, 0.8, seed=3)
    lin = torch.nn.Linear(45, 37)
    with torch.no_grad():
        lin.weight.copy_(torch.from_numpy(w))
    x = torch.randn(2, 13, 45)
    with torch.no_grad():
        torch.testing.assert_close(SparseLinear.from_linear(lin, block)(x), lin(x), atol=1e-5, rtol=1e-5)
        q, s = int8_weight(w)
        got = SparseLinearQD8(pack_qc8w(q, s, lin.bias.numpy(), block))(x)
        # the same arithmetic written out: per-token asymmetric 8-bit activations x per-channel int8 weights
        xq, sx, zx = quantize_tokens(x)
        want = ((xq - zx) @ torch.from_numpy(q.astype(np.float32)).T) * sx * torch.from_numpy(s) + lin.bias
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-5)


class _Ops(torch.nn.Module):
    """Every op and block shape side by side on one input (no XNNPACK partition: lowers in seconds)."""

    def __init__(self, n, k, sparsity):
        super().__init__()
        mods = []
        for i, block in enumerate(BLOCKS):
            w = sparse_weight(n, k, block, sparsity, seed=10 + i)
            b = np.linspace(-1, 1, n).astype(np.float32)
            mods.append(SparseLinear(pack_f32(w, b, block)))
            mods.append(SparseLinearQD8(pack_qc8w(*int8_weight(w), b, block)))
        self.ops = torch.nn.ModuleList(mods)

    def forward(self, x):
        return torch.cat([m(x) for m in self.ops], dim=-1)


def _program(module, x):
    from executorch.exir import to_edge

    ep = torch.export.export(module.eval(), (x,), strict=False)
    return to_edge(ep).to_executorch().buffer


def _run(buffer, x):
    from executorch.runtime import Runtime

    from edgenlp.run.executorch import register_edgenlp_ops

    assert register_edgenlp_ops(required=True)
    return Runtime.get().load_program(buffer).load_method("forward").execute([x])[0]


@needs_ops
@pytest.mark.parametrize("m,n,k,sparsity", [(13, 37, 45, 0.7), (1, 8, 5, 0.0), (40, 24, 64, 0.99)])
def test_executorch_kernels_equal_the_eager_reference(m, n, k, sparsity):
    torch.manual_seed(0)
    module = _Ops(n, k, sparsity)
    x = torch.randn(1, m, k)
    with torch.no_grad():
        want = module(x)
    got = _run(_program(module, x), x)
    qmax = sparse_act_qmax()
    assert got.shape == want.shape
    for i, mod in enumerate(module.ops):
        g, w = got[..., i * n:(i + 1) * n], want[..., i * n:(i + 1) * n]
        if isinstance(mod, SparseLinear):
            torch.testing.assert_close(g, w, atol=1e-4, rtol=1e-5)
        else:  # the reference at the activation range of the kernel that ran (AVX2: 7 bits)
            with torch.no_grad():
                w = sparse_linear_qd8_reference(x, mod.row_start, mod.col, mod.values, mod.scale, mod.row_sum, mod.bias,
                                                n, *mod.block, qmax=qmax)
            torch.testing.assert_close(g, w, atol=1e-4, rtol=1e-4)


@needs_ops
@pytest.mark.parametrize("corrupt", [
    lambda m: m.row_start.__setitem__(-1, m.row_start[-1] + 1),
    lambda m: m.row_start.__setitem__(0, 1),
    lambda m: m.col.__setitem__(0, 4000),
    lambda m: m.col.__setitem__(0, 1),
])
def test_a_malformed_sparse_header_fails_the_call_not_the_process(corrupt):
    module = torch.nn.Sequential(SparseLinear(pack_f32(sparse_weight(12, 16, "1x4", 0.5), None, "1x4")))
    x = torch.randn(1, 3, 16)
    corrupt(module[0])
    buffer = _program(module, x)
    with pytest.raises(Exception):
        _run(buffer, x)


@pytest.mark.parametrize("block", ["1x4", "1x8", "4x1"])
def test_packed_bytes_is_what_packing_writes(block):
    """The cost model's count of a sparse linear's bytes equals the arrays pack_f32 / pack_qc8w write (int8 4x1: a bound)."""
    import numpy as np
    from torch import nn

    from edgenlp.prune.sparsity import block_masks
    from edgenlp.sparse.ops import pack_f32, pack_qc8w, packed_bytes

    torch.manual_seed(0)
    for n, k in [(37, 53), (64, 96), (5, 9)]:
        for s in (0.0, 0.5, 0.7, 0.93):
            holder = nn.Module()
            holder.lin = nn.Linear(k, n)
            keep = block_masks(holder, s, block, ("lin",))["lin"]
            w, b = (holder.lin.weight.detach() * keep).numpy(), holder.lin.bias.detach().numpy()
            p = pack_f32(w, b, block)
            assert sum(a.nbytes for a in (p.row_start, p.col, p.values, p.bias)) == packed_bytes(n, k, s, "fp32", block)
            q = np.clip(np.round(w * 50), -127, 127)
            q = np.where(keep.numpy(), np.where(q == 0, 1, q), 0).astype(np.int8)  # zero exactly where the mask is
            pq = pack_qc8w(q, np.ones(n, np.float32), b, block)
            got = sum(a.nbytes for a in (pq.row_start, pq.col, pq.values, pq.scale, pq.row_sum, pq.bias))
            want = packed_bytes(n, k, s, "int8", block)
            assert got == want if block != "4x1" else got <= want, (n, k, s, got, want)
