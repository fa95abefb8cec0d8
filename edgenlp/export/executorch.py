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
from edgenlp.export.lowering import Lowering, shared_provenance

log = logging.getLogger(__name__)

# Why an op stays outside XNNPACK in our graph, for the manifest's delegation report.
NOT_DELEGATED_REASONS = {
    "aten.embedding.default": "token-embedding gather: XNNPACK has no gather op (runs as a portable kernel)",
    "dim_order_ops._to_dim_order_copy.default": "attention-mask dtype conversion int64 -> float32: XNNPACK converts no dtypes",
    "aten._to_copy.default": "dtype conversion: XNNPACK converts no dtypes",
    "quantized_decomposed.embedding_byte.default": "int8 word-embedding gather (ExecuTorch quantized kernel): XNNPACK has no gather op",
    "quantized_decomposed.embedding_4bit.default": "int4 word-embedding gather (ExecuTorch quantized kernel): XNNPACK has no gather op",
    "edgenlp.sparse_linear.default": "block-sparse fp32 linear: edgenlp's kernel (libedgenlp_ops.so), faster than a dense GEMM at this sparsity",
    "edgenlp.sparse_linear_qd8.default": "block-sparse int8 linear: edgenlp's kernel (libedgenlp_ops.so), faster than a dense GEMM at this sparsity",
}


@dataclass(frozen=True)
class MethodReport:
    name: str
    seq_len: int
    delegate_calls: int
    delegated_nodes: int
    non_delegated: dict[str, int]
    linears: dict[str, int] = field(default_factory=dict)  # delegated linears by weight precision (fp32, int8, int4)

    def to_dict(self) -> dict:
        out = {
            "name": self.name,
            "seq_len": self.seq_len,
            "delegate_calls": self.delegate_calls,
            "delegated_nodes": self.delegated_nodes,
            "non_delegated_ops": self.non_delegated,
            "delegated_linears": self.linears,
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
    stages: dict[str, float] = field(default_factory=dict)  # seconds per stage (export per bucket, lower, serialize)
    lowering_processes: int = 1  # processes that lowered the methods at once (edgenlp.export.lowering)

    def manifest_entry(self) -> dict:
        return {
            "methods": [m.to_dict() for m in self.methods],
            "backend": "xnnpack",
            "delegate_calls_per_method": max(m.delegate_calls for m in self.methods),
            "lower_seconds": round(self.seconds, 2),
            "lowering_processes": self.lowering_processes,
            "stage_seconds": {k: round(v, 3) for k, v in self.stages.items()},
        }


def _target_name(node) -> str:
    """``namespace.op.overload`` of an edge or emitted op (emitted ops are plain OpOverloads)."""
    if isinstance(node.target, torch._ops.OpOverload):
        return str(node.target)
    return str(getattr(node.target, "__name__", node.target))


def _weight_precision(node) -> str:
    """fp32/int8/int4 of a delegated linear, from what produces its weight (a torchao dequantize or a parameter)."""
    w = node.args[1] if len(node.args) > 1 else None
    if isinstance(w, torch.fx.Node) and "dequantize_affine" in _target_name(w):
        qmin = w.args[5] if len(w.args) > 5 else w.kwargs.get("quant_min")
        return "int4" if qmin is not None and qmin >= -8 else "int8"
    return "fp32"


def delegated_linears(edge_gm: torch.fx.GraphModule) -> dict[str, int]:
    """Linears inside the XNNPACK delegates of a lowered edge graph, counted by weight precision."""
    out = Counter()
    for node in edge_gm.graph.nodes:
        if node.op == "call_function" and _target_name(node) == "executorch_call_delegate":
            lowered = getattr(edge_gm, node.args[0].target)
            for inner in lowered.original_module.graph_module.graph.nodes:
                if inner.op == "call_function" and _target_name(inner).startswith("aten.linear"):
                    out[_weight_precision(inner)] += 1
    return dict(out)


def _method_report(name: str, seq_len: int, final_gm: torch.fx.GraphModule, *, delegated: int,
                   linears: dict[str, int]) -> MethodReport:
    """Delegate calls and the ops left outside XNNPACK in the program as emitted (after quant fusion)."""
    ops = Counter()
    calls = 0
    for node in final_gm.graph.nodes:
        if node.op != "call_function":
            continue
        target = _target_name(node)
        if target == "executorch_call_delegate":
            calls += 1
        elif target not in ("getitem", "alloc"):
            ops[target[: -len(".out")] + ".default" if target.endswith(".out") else target] += 1
    return MethodReport(name, seq_len, calls, delegated, dict(ops), linears)


def xnnpack_kernel_family(cpu: dict | None = None) -> str:
    """Which family of XNNPACK's dynamically quantized (QD8) kernels this host runs.

    ``x86-avx512vnni``, ``x86-avxvnni``, ``x86-avx2``, ``x86-sse`` (older x86),
    ``arm-i8mm``, ``arm-dotprod`` or ``arm-neon``, from ``cpu``
    (:func:`edgenlp.utils.cpu_info`, this host's by default). The families
    round activations differently (see :mod:`edgenlp.quantize.rounding`).
    """
    from edgenlp.utils import cpu_info

    cpu = cpu if cpu is not None else cpu_info()
    isa = set(cpu.get("isa", []))
    if str(cpu.get("machine", "")).lower() in ("aarch64", "arm64"):
        return "arm-i8mm" if "i8mm" in isa else "arm-dotprod" if "asimddp" in isa else "arm-neon"
    if isa & {"avx512_vnni", "avx512vnni"}:
        return "x86-avx512vnni"
    if "avx_vnni" in isa:
        return "x86-avxvnni"
    return "x86-avx2" if "avx2" in isa else "x86-sse"


def is_quantized(model: torch.nn.Module) -> bool:
    """Whether any weight of ``model`` is a quantized tensor subclass (torchao) rather than a plain tensor."""
    return any(type(p) not in (torch.Tensor, torch.nn.Parameter) for p in model.parameters())


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
    processes: int | None = None,
) -> PteResult:
    """Export ``model`` once per bucket and lower all methods into one ExecuTorch program.

    ``prepared=True`` means ``model`` already went through :func:`prepare`.
    The methods are lowered in ``processes`` processes at once
    (:class:`edgenlp.export.lowering.Lowering`; default: one per usable
    core, at most one per bucket). An ETRecord needs one joint lowering, so
    ``generate_etrecord=True`` lowers in this process.
    A quantized model (weights held as torchao quantized tensors, e.g. from
    :func:`edgenlp.quantize.api.quantize_model`) lowers to XNNPACK's quantized
    kernels, and its program goes through ExecuTorch's quant-fusion pass, which
    turns dequantize + embedding into the quantized embedding kernels.
    """
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import ExecutorchBackendConfig, to_edge_transform_and_lower

    start = time.perf_counter()
    stages: dict[str, float] = {}
    m = model if prepared else prepare(model)
    quantized = is_quantized(m)
    vocab = m.shape.vocab_size if hasattr(m, "shape") else 1000
    programs = {}
    with Lowering(len(buckets), 1 if generate_etrecord else processes) as lowering:  # helpers start importing now
        for seq in buckets:
            t = time.perf_counter()
            with torch.no_grad():
                programs[f"forward_{seq}"] = torch.export.export(m, example_inputs(seq, vocab_size=vocab), strict=False)
            stages[f"torch_export_{seq}"] = time.perf_counter() - t
        if generate_etrecord:
            t = time.perf_counter()
            with shared_provenance():
                edge = to_edge_transform_and_lower(programs, partitioner=[XnnpackPartitioner()], generate_etrecord=True)
            stages["edge_lower_partition"] = time.perf_counter() - t
        else:
            edge, lower_stages = lowering.lower(programs)
            stages.update(lower_stages)
    edge_gms = {name: edge.exported_program(name).graph_module for name in programs}
    linears = {name: delegated_linears(gm) for name, gm in edge_gms.items()}
    delegated = {}
    for name, gm in edge_gms.items():
        try:
            from executorch.devtools.backend_debug import get_delegation_info

            delegated[name] = get_delegation_info(gm).num_delegated_nodes
        except Exception:  # pragma: no cover - devtools API drift
            delegated[name] = -1
    t = time.perf_counter()
    et = edge.to_executorch(ExecutorchBackendConfig(do_quant_fusion_and_const_prop=quantized))
    buffer = et.buffer
    stages["to_executorch_serialize"] = time.perf_counter() - t
    reports = [
        _method_report(name, seq, et.exported_program(name).graph_module, delegated=delegated[name], linears=linears[name])
        for name, seq in zip(programs, buckets)
    ]
    etrecord = et.get_etrecord() if generate_etrecord else None
    seconds = time.perf_counter() - start
    for r in reports:
        log.info("%s: %d delegate call(s), outside XNNPACK: %s", r.name, r.delegate_calls, r.non_delegated or "none")
    log.info("lowering stages (s): %s", {k: round(v, 2) for k, v in stages.items()})
    return PteResult(buffer, reports, seconds, etrecord, stages, lowering.processes)
