"""The ONNX word table: the quantized model's own per-row integers, looked up and dequantized row by row."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from edgenlp.export.onnx_quant import quantize_word_table

V, H = 37, 10


def lookup_model(table: np.ndarray) -> bytes:
    """input_ids [batch, seq] -> Gather(table) -> rows [batch, seq, H], plus a second constant the rewrite must not touch."""
    ids = helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"])
    out = helper.make_tensor_value_info("rows", TensorProto.FLOAT, ["batch", "seq", H])
    pos = helper.make_tensor_value_info("pos", TensorProto.FLOAT, ["batch", "seq", H + 1])
    nodes = [helper.make_node("Gather", ["word", "input_ids"], ["rows"], name="word_gather", axis=0),
             helper.make_node("Gather", ["position", "input_ids"], ["pos"], name="pos_gather", axis=0)]
    inits = [numpy_helper.from_array(table, "word"), numpy_helper.from_array(np.ones((V, H + 1), np.float32), "position")]
    graph = helper.make_graph(nodes, "lookup", [ids], [out, pos], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10).SerializeToString()


def run(data: bytes, ids: np.ndarray) -> np.ndarray:
    import onnxruntime as ort

    return ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(["rows"], {"input_ids": ids})[0]


@pytest.mark.parametrize("bits", [8, 4])
def test_rows_equal_the_dequantized_integers(bits):
    rng = np.random.default_rng(bits)
    table = rng.normal(size=(V, H)).astype(np.float32)
    lo, hi = (-128, 127) if bits == 8 else (-8, 7)
    q = rng.integers(lo, hi + 1, size=(V, H)).astype(np.int8)
    q[0, :] = lo  # the extremes of the range, where an off-by-one in the packing shows
    q[1, :] = hi
    scale = rng.uniform(0.01, 0.1, size=V).astype(np.float32)
    zero = rng.integers(-3, 4, size=V).astype(np.float32)
    data = quantize_word_table(lookup_model(table), table, q, scale, zero, bits=bits)
    ids = np.array([[0, 1, 5, 36], [2, 2, 0, 17]], dtype=np.int64)
    want = (q.astype(np.float32) - zero[:, None]) * scale[:, None]
    np.testing.assert_array_equal(run(data, ids), want[ids])
    proto = onnx.load_from_string(data)
    names = {t.name: t for t in proto.graph.initializer}
    assert "word" not in names and "position" in names  # the fp32 table is gone, the other constant untouched
    stored = names["word_int8" if bits == 8 else "word_int4x2"]
    assert tuple(stored.dims) == ((V, H) if bits == 8 else (V, H // 2))
    assert len(stored.raw_data) == table.nbytes // (4 if bits == 8 else 8)  # a byte per value, or two values per byte


def test_refuses_what_it_cannot_write():
    table = np.zeros((V, H), np.float32)
    q = np.zeros((V, H), np.int8)
    s = np.ones(V, np.float32)
    with pytest.raises(ValueError, match="found 0"):
        quantize_word_table(lookup_model(table), table + 1, q, s, None, bits=8)  # not the table of this model
    with pytest.raises(ValueError, match=r"\[-8, 7\]"):
        quantize_word_table(lookup_model(table), table, q + 9, s, None, bits=4)
    with pytest.raises(ValueError, match="do not match"):
        quantize_word_table(lookup_model(table), table, q[:, :4], s, None, bits=8)
    with pytest.raises(ValueError, match="8 or 4"):
        quantize_word_table(lookup_model(table), table, q, s, None, bits=2)
