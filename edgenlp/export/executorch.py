"""Lowering to ExecuTorch (.pte) with the XNNPACK partitioner.

One program holds one method per sequence-length bucket (``forward_32``,
``forward_128``, ...). Each method takes ``input_ids`` and ``attention_mask``
(int64 ``[1, L]``) and returns logits (float32 ``[1, num_labels]``). A runtime
picks the smallest bucket that fits the text and pads; the additive mask makes
the result independent of the padding. XNNPACK stores each weight once, so
extra buckets cost little size (a 2-bucket MiniLM program is 91 MB vs 90 MB).

Why buckets rather than a dynamic dimension: with ``torch.export.Dim`` the
partitioner splits the graph into dozens of partitions plus ``view_copy`` ops,
costs more memory and is no faster (see ``../shared/RUNTIME_NOTES.md``).
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from dataclasses import dataclass, field

import torch

from edgenlp.export.graph import example_inputs, prepare

log = logging.getLogger(__name__)

# Why an op stays outside XNNPACK in our graph, for the manifest's delegation report.
NOT_DELEGATED_REASONS = {
    "aten.embedding.default": "token-embedding gather: XNNPACK has no gather op (runs as a portable kernel)",
    "dim_order_ops._to_dim_order_copy.default": "attention-mask dtype conversion int64 -> float32: XNNPACK converts no dtypes",
    "aten._to_copy.default": "dtype conversion: XNNPACK converts no dtypes",
}


@dataclass(frozen=True)
class MethodReport:
    name: str
    seq_len: int
    delegate_calls: int
    delegated_nodes: int
    non_delegated: dict[str, int]

    def to_dict(self) -> dict:
        out = {
            "name": self.name,
            "seq_len": self.seq_len,
            "delegate_calls": self.delegate_calls,
            "delegated_nodes": self.delegated_nodes,
            "non_delegated_ops": self.non_delegated,
        }
        reasons = {op: NOT_DELEGATED_REASONS.get(op, "not supported by the XNNPACK partitioner") for op in self.non_delegated}
        if reasons:
            out["why_not_delegated"] = reasons
        return out


@dataclass
class PteResult:
    buffer: bytes
    methods: list[MethodReport]
    seconds: float
    etrecord: object | None = field(default=None, repr=False)

    def manifest_entry(self) -> dict:
        return {
            "methods": [m.to_dict() for m in self.methods],
            "backend": "xnnpack",
            "delegate_calls_per_method": max(m.delegate_calls for m in self.methods),
            "lower_seconds": round(self.seconds, 2),
        }


def _method_report(name: str, seq_len: int, graph_module: torch.fx.GraphModule) -> MethodReport:
    ops = Counter()
    calls = 0
    for node in graph_module.graph.nodes:
        if node.op != "call_function":
            continue
        target = str(getattr(node.target, "__name__", node.target))
        if target == "executorch_call_delegate":
            calls += 1
        elif target != "getitem":
            ops[target] += 1
    try:
        from executorch.devtools.backend_debug import get_delegation_info

        delegated = get_delegation_info(graph_module).num_delegated_nodes
    except Exception:  # pragma: no cover - devtools API drift
        delegated = -1
    return MethodReport(name, seq_len, calls, delegated, dict(ops))


def default_buckets(max_seq_len: int) -> tuple[int, ...]:
    """Powers of two from 16 below ``max_seq_len``, plus ``max_seq_len`` itself."""
    out = [b for b in (16, 32, 64, 128, 256) if b < max_seq_len]
    return tuple(out + [max_seq_len])


def to_pte(
    model: torch.nn.Module,
    *,
    buckets: tuple[int, ...],
    generate_etrecord: bool = False,
    prepared: bool = False,
) -> PteResult:
    """Export ``model`` once per bucket and lower all methods into one ExecuTorch program.

    ``prepared=True`` means ``model`` already went through :func:`prepare`.
    """
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower

    start = time.perf_counter()
    m = model if prepared else prepare(model)
    vocab = m.shape.vocab_size if hasattr(m, "shape") else 1000
    programs = {}
    for seq in buckets:
        with torch.no_grad():
            programs[f"forward_{seq}"] = torch.export.export(m, example_inputs(seq, vocab_size=vocab), strict=False)
    edge = to_edge_transform_and_lower(programs, partitioner=[XnnpackPartitioner()], generate_etrecord=generate_etrecord)
    reports = [
        _method_report(name, seq, edge.exported_program(name).graph_module)
        for name, seq in zip(programs, buckets)
    ]
    et = edge.to_executorch()
    etrecord = et.get_etrecord() if generate_etrecord else None
    seconds = time.perf_counter() - start
    for r in reports:
        log.info("%s: %d delegate call(s), outside XNNPACK: %s", r.name, r.delegate_calls, r.non_delegated or "none")
    return PteResult(et.buffer, reports, seconds, etrecord)
