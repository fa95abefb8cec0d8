"""Lowering a quantized model to ONNX: ONNX Runtime's own quantization of the exported graph, per linear.

- 8-bit linears: ``onnxruntime.quantization.quantize_dynamic`` with per-channel
  int8 weights (``DynamicQuantizeLinear`` + ``MatMulInteger``; per-tensor
  weights lose accuracy on MiniLM, see ../shared/RUNTIME_NOTES.md);
- 4-bit linears: ``MatMulNBitsQuantizer`` (weight-only, symmetric, blocks of
  ``group_size``), fp32 activations.

Linears are found by the module names the exporter leaves on each MatMul
(:func:`edgenlp.export.onnx.linear_nodes`).

The word-embedding table (``embeddings`` int8 or int4): ONNX Runtime's dynamic
quantizer has only a per-tensor ``Gather``, so :func:`quantize_word_table`
writes the quantized model's own per-row table instead, the same integers and
scales the eager reference and ExecuTorch's ``embedding_byte`` /
``embedding_4bit`` use: ``Gather`` of the int8 rows (int4: two values per byte,
unpacked with ``BitShift`` / ``BitwiseAnd``), ``Cast``, minus the row's zero
point, times the row's scale. Only the looked-up rows are dequantized.
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


def quantize_word_table(data: bytes, source_table, qdata, scale, zero_point, *, bits: int) -> bytes:
    """Replace the ``Gather`` of the fp32 word table ``source_table`` ([V, H]) in the serialized ONNX model
    ``data`` by a lookup in the per-row quantized table ``qdata`` (int8 values, [V, H]; within [-8, 7] for
    ``bits`` 4), ``scale`` and ``zero_point`` ([V]): ``(q - zero_point) * scale`` for the looked-up rows."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from edgenlp.export.onnx import check_onnx

    if bits not in (8, 4):
        raise ValueError(f"word table bits must be 8 or 4, got {bits}")
    proto = onnx.load_from_string(data)
    graph = proto.graph
    src = np.asarray(source_table, dtype=np.float32)
    q = np.asarray(qdata).astype(np.int8)
    v, h = src.shape
    if q.shape != (v, h) or np.shape(scale)[:1] != (v,):
        raise ValueError(f"quantized table {q.shape} / scales {np.shape(scale)} do not match the table {src.shape}")
    inits = {t.name: t for t in graph.initializer}
    found = [(i, n) for i, n in enumerate(graph.node) if n.op_type == "Gather" and n.input[0] in inits
             and tuple(inits[n.input[0]].dims) == (v, h)
             and np.array_equal(numpy_helper.to_array(inits[n.input[0]]), src)]
    if len(found) != 1:
        raise ValueError(f"expected one Gather of the {v}x{h} word table in the ONNX model, found {len(found)}")
    index, gather = found[0]
    axis = {a.name: helper.get_attribute_value(a) for a in gather.attribute}.get("axis", 0)
    if axis != 0:
        raise ValueError(f"the word table Gather has axis {axis}, expected 0")
    table, ids, out = gather.input[0], gather.input[1], gather.output[0]
    name = gather.name or "word_table"
    zp = np.asarray(zero_point, dtype=np.float32).reshape(v, 1) if zero_point is not None else np.zeros((v, 1), np.float32)
    new_inits = [numpy_helper.from_array(np.asarray(scale, dtype=np.float32).reshape(v, 1), f"{table}_scale"),
                 numpy_helper.from_array(zp, f"{table}_zero_point")]
    t = lambda suffix: f"{name}_{suffix}"  # noqa: E731
    nodes = []
    if bits == 8:
        new_inits.append(numpy_helper.from_array(q, f"{table}_int8"))
        nodes.append(helper.make_node("Gather", [f"{table}_int8", ids], [t("rows_q")], name=t("gather_q"), axis=0))
    else:
        if h % 2:
            raise ValueError(f"an int4 table packs two values per byte: hidden size {h} is odd")
        if q.min() < -8 or q.max() > 7:
            raise ValueError("int4 table values must lie in [-8, 7]")
        u = (q.astype(np.int16) + 8).astype(np.uint8)  # [0, 15]
        packed = (u[:, 0::2] | (u[:, 1::2] << 4)).astype(np.uint8)  # column 2j in the low nibble, 2j + 1 in the high
        new_inits += [numpy_helper.from_array(packed, f"{table}_int4x2"),
                      numpy_helper.from_array(np.array(15, np.uint8), t("mask")),
                      numpy_helper.from_array(np.array(4, np.uint8), t("four")),
                      numpy_helper.from_array(np.array(8, np.float32), t("eight")),
                      numpy_helper.from_array(np.array([-1], np.int64), t("last")),
                      numpy_helper.from_array(np.array([h], np.int64), t("hidden"))]
        nodes += [
            helper.make_node("Gather", [f"{table}_int4x2", ids], [t("rows_packed")], name=t("gather_q"), axis=0),
            helper.make_node("BitwiseAnd", [t("rows_packed"), t("mask")], [t("low")], name=t("low")),
            helper.make_node("BitShift", [t("rows_packed"), t("four")], [t("high")], name=t("high"), direction="RIGHT"),
            helper.make_node("Unsqueeze", [t("low"), t("last")], [t("low1")], name=t("low1")),
            helper.make_node("Unsqueeze", [t("high"), t("last")], [t("high1")], name=t("high1")),
            helper.make_node("Concat", [t("low1"), t("high1")], [t("pairs")], name=t("pairs"), axis=-1),
            helper.make_node("Shape", [ids], [t("ids_shape")], name=t("ids_shape")),
            helper.make_node("Concat", [t("ids_shape"), t("hidden")], [t("rows_shape")], name=t("rows_shape"), axis=0),
            helper.make_node("Reshape", [t("pairs"), t("rows_shape")], [t("rows_u")], name=t("rows_u")),
            helper.make_node("Cast", [t("rows_u")], [t("rows_uf")], name=t("rows_uf"), to=TensorProto.FLOAT),
            helper.make_node("Sub", [t("rows_uf"), t("eight")], [t("rows_qf")], name=t("rows_qf")),
        ]
    if bits == 8:
        nodes.append(helper.make_node("Cast", [t("rows_q")], [t("rows_qf")], name=t("rows_qf"), to=TensorProto.FLOAT))
    nodes += [
        helper.make_node("Gather", [f"{table}_zero_point", ids], [t("zp")], name=t("gather_zp"), axis=0),
        helper.make_node("Gather", [f"{table}_scale", ids], [t("scale")], name=t("gather_scale"), axis=0),
        helper.make_node("Sub", [t("rows_qf"), t("zp")], [t("centred")], name=t("centred")),
        helper.make_node("Mul", [t("centred"), t("scale")], [out], name=t("dequantized")),
    ]
    graph.node.remove(gather)
    for k, n in enumerate(nodes):
        graph.node.insert(index + k, n)
    if not any(table in n.input for n in graph.node):
        graph.initializer.remove(inits[table])
    graph.initializer.extend(new_inits)
    keep = [vi for vi in graph.value_info if vi.name != table]
    del graph.value_info[:]
    graph.value_info.extend(keep)
    check_onnx(proto)
    return proto.SerializeToString()
