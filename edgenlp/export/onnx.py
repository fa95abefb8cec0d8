"""Lowering to ONNX for ONNX Runtime.

The graph takes ``input_ids`` and ``attention_mask`` (int64 ``[batch, seq]``,
both dimensions dynamic, ``seq`` up to the bundle's maximum) and returns
``logits`` (float32 ``[batch, num_labels]``). Layer norms stay whole here:
ONNX Runtime fuses ``LayerNormalization`` itself.
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
    proto = prog.model_proto
    onnx.checker.check_model(proto)
    ops = Counter(n.op_type for n in proto.graph.node)
    return OnnxResult(proto.SerializeToString(), time.perf_counter() - start, dict(sorted(ops.items())))
