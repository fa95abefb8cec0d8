"""Lowering to ONNX for ONNX Runtime.

The graph takes ``input_ids`` and ``attention_mask`` (int64 ``[batch, seq]``,
both dimensions dynamic, ``seq`` up to the bundle's maximum) and returns
``logits`` (float32 ``[batch, num_labels]``). Layer norms stay whole here:
ONNX Runtime fuses ``LayerNormalization`` itself.

The head's ``Gemm(transB=1)`` nodes are rewritten as ``MatMul`` + ``Add`` with a
pre-transposed weight, like every encoder linear: ONNX Runtime's quantizers
(``quantize_dynamic`` per channel, ``MatMulNBits``) then see one linear form, and
the model passes ``onnx.shape_inference.infer_shapes(strict_mode=True)`` and the
checker before and after quantization. Each MatMul keeps the exporter's
``pkg.torch.onnx.name_scopes`` metadata, which names the module it came from
(:func:`linear_nodes`).
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from dataclasses import dataclass

import torch

from edgenlp.export.graph import example_inputs, prepare

log = logging.getLogger(__name__)

OPSET = 18


@dataclass
class OnnxResult:
    data: bytes
    seconds: float
    op_counts: dict[str, int]

    def manifest_entry(self) -> dict:
        return {
            "opset": OPSET,
            "dynamic_axes": {"input_ids": ["batch", "seq"], "attention_mask": ["batch", "seq"], "logits": ["batch"]},
            "op_counts": self.op_counts,
            "export_seconds": round(self.seconds, 2),
        }


def to_onnx(model: torch.nn.Module, *, max_seq_len: int) -> OnnxResult:
    """Export ``model`` to an in-memory ONNX model with dynamic batch and sequence axes."""
    import onnx

    start = time.perf_counter()
    m = prepare(model, decompose_norms=False)
    vocab = m.shape.vocab_size if hasattr(m, "shape") else 1000
    ids, mask = example_inputs(min(16, max_seq_len), batch=2, vocab_size=vocab)
    batch = torch.export.Dim("batch", min=1, max=1024)
    seq = torch.export.Dim("seq", min=1, max=max_seq_len)
    with torch.no_grad():
        prog = torch.onnx.export(
            m,
            (ids, mask),
            input_names=["input_ids", "attention_mask"],
            output_names=["logits"],
            dynamic_shapes={"input_ids": {0: batch, 1: seq}, "attention_mask": {0: batch, 1: seq}},
            opset_version=OPSET,
            dynamo=True,
            external_data=False,
            optimize=True,
            verbose=False,
        )
    proto = gemm_to_matmul(prog.model_proto)
    check_onnx(proto)
    ops = Counter(n.op_type for n in proto.graph.node)
    return OnnxResult(proto.SerializeToString(), time.perf_counter() - start, dict(sorted(ops.items())))


def check_onnx(proto) -> None:
    """ONNX's checker and strict shape inference (what ONNX Runtime's quantization tools run)."""
    import onnx

    onnx.checker.check_model(proto)
    onnx.shape_inference.infer_shapes(proto, check_type=True, strict_mode=True)


def gemm_to_matmul(proto):
    """Rewrite ``Gemm(A, W, C)`` with a constant ``W`` as ``MatMul(A, W') + C`` (``W'`` pre-transposed), in place."""
    import numpy as np
    from onnx import helper, numpy_helper

    graph = proto.graph
    inits = {t.name: t for t in graph.initializer}
    users = {}
    for n in graph.node:
        for i in n.input:
            users[i] = users.get(i, 0) + 1
    new_nodes = []
    for node in graph.node:
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        if (node.op_type != "Gemm" or node.input[1] not in inits or attrs.get("transA", 0)
                or attrs.get("alpha", 1.0) != 1.0 or attrs.get("beta", 1.0) != 1.0):
            new_nodes.append(node)
            continue
        w = numpy_helper.to_array(inits[node.input[1]])
        if attrs.get("transB", 0):
            w = np.ascontiguousarray(w.T)
        wname = node.input[1] + "_kn" if users.get(node.input[1], 0) > 1 else node.input[1]
        if wname == node.input[1]:
            graph.initializer.remove(inits[node.input[1]])
        graph.initializer.append(numpy_helper.from_array(w, wname))
        has_bias = len(node.input) > 2 and node.input[2]
        mm_out = node.output[0] + "_mm" if has_bias else node.output[0]
        mm = helper.make_node("MatMul", [node.input[0], wname], [mm_out], name=node.name + "_MatMul")
        mm.metadata_props.extend(node.metadata_props)
        new_nodes.append(mm)
        if has_bias:
            add = helper.make_node("Add", [mm_out, node.input[2]], [node.output[0]], name=node.name + "_Add")
            add.metadata_props.extend(node.metadata_props)
            new_nodes.append(add)
    del graph.node[:]
    graph.node.extend(new_nodes)
    # The exporter records value_info for initializers; a transposed weight's entry would contradict it.
    stale = {n.input[1] for n in new_nodes if n.op_type == "MatMul"} | {n.input[1][: -len("_kn")] for n in new_nodes
                                                                      if n.op_type == "MatMul" and n.input[1].endswith("_kn")}
    keep = [v for v in graph.value_info if v.name not in stale]
    del graph.value_info[:]
    graph.value_info.extend(keep)
    return proto


def linear_nodes(proto) -> dict[str, str]:
    """Module name (``layers.0.query``, ``classifier``) -> name of the MatMul node with its constant weight."""
    inits = {t.name for t in proto.graph.initializer}
    out = {}
    for node in proto.graph.node:
        if node.op_type != "MatMul" or node.input[1] not in inits:
            continue
        meta = {m.key: m.value for m in node.metadata_props}
        scopes = meta.get("pkg.torch.onnx.name_scopes")
        if not scopes:
            continue
        import ast

        names = [s for s in ast.literal_eval(scopes) if s]
        if len(names) >= 2:
            out[names[-2]] = node.name
    return out


# --------------------------------------------------------------------------- one weight file for several models

SHARED_WEIGHTS = "model.onnx.data"


@dataclass(frozen=True)
class SharedWeights:
    """What :func:`share_weights` did: bytes before (inline in every file) and after (one copy each)."""

    file: str
    inline_bytes: int
    shared_bytes: int
    tensors: int
    unique: int

    def manifest_entry(self) -> dict:
        return {"file": self.file, "bytes_inline_before": self.inline_bytes, "bytes": self.shared_bytes,
                "tensors": self.tensors, "unique_tensors": self.unique}


def share_weights(folder, models: dict[str, bytes], *, data_file: str = SHARED_WEIGHTS,
                  min_bytes: int = 1024) -> SharedWeights:
    """Write the serialized ONNX ``models`` (``{file name: bytes}``) to ``folder`` with their initializers moved into
    one external file, each byte string once.

    A dynamic bundle ships the static ``model.onnx`` and a file per segment;
    every linear's weights (quantized the same way) sit in two of them. Here
    each initializer of at least ``min_bytes`` raw bytes is looked up by content
    (sha256): the first time it is written to ``data_file``, 64-byte aligned
    (4 KiB from 1 MiB up, so ONNX Runtime can map it), and every file then
    points at that one copy through ONNX's external-data fields
    (``location``, ``offset``, ``length``, relative to the model's folder).
    ONNX Runtime and ``onnx.load`` read such files from their path, so they
    must be loaded from ``folder``.
    """
    import hashlib
    from pathlib import Path

    import onnx
    from onnx.external_data_helper import set_external_data

    folder = Path(folder)
    where: dict[bytes, tuple[int, int]] = {}
    inline = tensors = 0
    protos = {}
    with open(folder / data_file, "wb") as out:
        for name, blob in models.items():
            proto = onnx.load_from_string(blob)
            for t in proto.graph.initializer:
                if t.data_location == onnx.TensorProto.EXTERNAL or len(t.raw_data) < min_bytes:
                    continue
                raw = t.raw_data
                key = hashlib.sha256(raw).digest() + len(raw).to_bytes(8, "little")
                if key not in where:
                    align = 4096 if len(raw) >= 1 << 20 else 64
                    out.write(b"\0" * (-out.tell() % align))
                    where[key] = (out.tell(), len(raw))
                    out.write(raw)
                offset, length = where[key]
                inline += length
                tensors += 1
                set_external_data(t, location=data_file, offset=offset, length=length)  # wants raw_data still there
                t.ClearField("raw_data")
                t.data_location = onnx.TensorProto.EXTERNAL
            protos[name] = proto
        shared = out.tell()
    for name, proto in protos.items():
        (folder / name).write_bytes(proto.SerializeToString())
    log.info("ONNX weights: %.1f MB in %d files -> one copy each, %.1f MB in %s", inline / 1e6, len(protos), shared / 1e6,
             data_file)
    return SharedWeights(data_file, inline, shared, tensors, len(where))
