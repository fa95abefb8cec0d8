"""Swap a model's block-sparse linears for the ``edgenlp::sparse_linear`` ops before it lowers to ExecuTorch.

The recipe's ``sparsify`` step (:mod:`edgenlp.prune.sparsity`) names the
linears it made block-sparse and the block shape. :func:`sparse_plan` reads
that from a recipe; :func:`to_sparse_ops` returns a copy of the model in which
each of those linears is

- fp32 (``nn.Linear``): a :class:`~edgenlp.sparse.ops.SparseLinear`;
- int8 per channel (a torchao ``IntxUnpackedToInt8Tensor`` weight, as
  :func:`edgenlp.quantize.api.quantize_model` makes it): a
  :class:`~edgenlp.sparse.ops.SparseLinearQD8` on the same int8 values and
  scales (-128 clamped to -127, the kernels' symmetric range);

when at least ``min_sparsity`` of its blocks are zero (below that the dense
XNNPACK GEMM is the faster kernel). int4 linears stay dense. The rest of each
layer stays in XNNPACK: the partitioner cuts around the custom ops.
"""

from __future__ import annotations

import copy
import logging
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch
from torch import nn

from edgenlp.sparse.ops import SparseLinear, SparseLinearQD8, block_sparsity, pack_f32, pack_qc8w

log = logging.getLogger(__name__)

# Below these block sparsities the dense XNNPACK GEMM of the same precision wins inside a whole bundle on the
# measured host (tools/bench/results/sparse-bundles.md, MiniLM, 1x4, AVX2: fp32 1.03x the dense fp32 bundle at
# 70%, 1.45x at 80%; int8 1.31-1.40x the dense int8 bundle at 50%).
MIN_SPARSITY = {"fp32": 0.8, "int8": 0.5}


@dataclass(frozen=True)
class SparsePlan:
    block: str
    linears: tuple[str, ...]


def sparse_plan(steps: Sequence) -> SparsePlan | None:
    """The last ``sparsify`` step of a recipe as a plan, or None."""
    for step in reversed(tuple(steps)):
        if step.type == "sparsify":
            return SparsePlan(step.config.block, tuple(step.result.get("linears", ())))
    return None


def _int8_weight(w) -> tuple[np.ndarray, np.ndarray] | None:
    """(q [n][k] int8, scale [n]) of a per-channel int8 torchao weight, or None for any other kind."""
    if type(w).__name__ != "IntxUnpackedToInt8Tensor" or getattr(w, "target_dtype", None) != torch.int8:
        return None
    if tuple(w.block_size) != (1, w.shape[1]) or bool((w.zero_point != 0).any()):
        return None
    q = torch.clamp(w.qdata, -127, 127).to(torch.int8).numpy()
    return q, w.scale.detach().reshape(-1).float().numpy()


def to_sparse_ops(model: nn.Module, plan: SparsePlan, *, min_sparsity: dict[str, float] | None = None
                  ) -> tuple[nn.Module, dict[str, dict]]:
    """A copy of ``model`` with the plan's sparse-enough linears as sparse ops; and what was done per linear.

    The report maps each planned linear to ``{"precision", "sparsity", "op"}``
    (``op`` None where it stayed dense, with ``"reason"``).
    """
    bounds = {**MIN_SPARSITY, **(min_sparsity or {})}
    out = copy.deepcopy(model)
    modules = dict(out.named_modules())
    report: dict[str, dict] = {}
    for name in plan.linears:
        lin = modules.get(name)
        if not isinstance(lin, nn.Linear):
            report[name] = {"op": None, "reason": "not a linear in this model"}
            continue
        w = lin.weight
        bias = None if lin.bias is None else lin.bias.detach().float().numpy()
        int8 = _int8_weight(w)
        if int8 is None and type(w) not in (torch.Tensor, nn.Parameter):
            report[name] = {"op": None, "precision": "other", "reason": "only fp32 and int8 per-channel weights"}
            continue
        precision = "int8" if int8 is not None else "fp32"
        dense = int8[0] if int8 is not None else w.detach().float().numpy()
        sp = block_sparsity(dense, plan.block)
        entry = {"precision": precision, "sparsity": round(sp, 4)}
        if sp < bounds[precision] - 1e-3:  # floor(sparsity x blocks) zero blocks reads a hair under the target
            report[name] = {**entry, "op": None, "reason": f"block sparsity {sp:.2f} < {bounds[precision]:.2f}"}
            continue
        if int8 is not None:
            new: nn.Module = SparseLinearQD8(pack_qc8w(int8[0], int8[1], bias, plan.block))
            op = "edgenlp::sparse_linear_qd8"
        else:
            new = SparseLinear(pack_f32(dense, bias, plan.block))
            op = "edgenlp::sparse_linear"
        parent, _, attr = name.rpartition(".")
        setattr(modules[parent] if parent else out, attr, new)
        report[name] = {**entry, "op": op, "packed_bytes": int(sum(b.numel() * b.element_size() for b in new.buffers()))}
    swapped = sum(1 for r in report.values() if r.get("op"))
    log.info("sparse ops: %d of %d planned linears (%s blocks)", swapped, len(plan.linears), plan.block)
    return out, report
