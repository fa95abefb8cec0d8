"""Lowering a quantized model to ONNX: ONNX Runtime's own quantization of the exported graph, per linear.

- 8-bit linears: ``onnxruntime.quantization.quantize_dynamic`` with per-channel
  int8 weights (``DynamicQuantizeLinear`` + ``MatMulInteger``; per-tensor
  weights lose accuracy on MiniLM, see ../shared/RUNTIME_NOTES.md);
- 4-bit linears: ``MatMulNBitsQuantizer`` (weight-only, symmetric, blocks of
  ``group_size``), fp32 activations.

Linears are found by the module names the exporter leaves on each MatMul
(:func:`edgenlp.export.onnx.linear_nodes`). The word-embedding table stays
fp32 in ONNX (ONNX Runtime's dynamic quantizer only has per-tensor ``Gather``).
"""

from __future__ import annotations

import contextlib
import logging
import tempfile
from pathlib import Path

log = logging.getLogger(__name__)


@contextlib.contextmanager
def _quiet_root_logger():
    """ONNX Runtime's quantizers log advice and per-tensor notes on the root logger."""
    root = logging.getLogger()
    level = root.level
    root.setLevel(max(level, logging.ERROR))
    try:
        yield
    finally:
        root.setLevel(level)


def quantize_onnx(data: bytes, bits: dict[str, int], *, group_size: int) -> bytes:
    """Quantize the linears of the serialized ONNX model ``data`` to ``bits`` (32 = leave fp32)."""
    import onnx

    from edgenlp.export.onnx import check_onnx, linear_nodes

    proto = onnx.load_from_string(data)
    nodes = linear_nodes(proto)
    missing = sorted(set(n for n, b in bits.items() if b < 32) - set(nodes))
    if missing:
        raise ValueError(f"ONNX model has no MatMul for linear {missing[0]!r}")
    with _quiet_root_logger():
        proto = _quantize(proto, nodes, bits, group_size=group_size)
    check_onnx(proto)
    return proto.SerializeToString()


def _quantize(proto, nodes: dict[str, str], bits: dict[str, int], *, group_size: int):
    import onnx

    int4 = [nodes[n] for n, b in bits.items() if b == 4]
    int8 = [nodes[n] for n, b in bits.items() if b == 8]
    if int4:
        from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

        keep = [name for name in nodes.values() if name not in int4]
        q = MatMulNBitsQuantizer(proto, block_size=group_size, is_symmetric=True, nodes_to_exclude=keep)
        q.process()
        proto = q.model.model
    if int8:
        from onnxruntime.quantization import QuantType, quantize_dynamic

        with tempfile.TemporaryDirectory() as tmp:
            src, dst = Path(tmp) / "in.onnx", Path(tmp) / "out.onnx"
            onnx.save(proto, src)
            quantize_dynamic(src, dst, per_channel=True, weight_type=QuantType.QInt8,
                             op_types_to_quantize=["MatMul"], nodes_to_quantize=int8)
            proto = onnx.load(dst)
    return proto
