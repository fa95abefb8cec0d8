"""Anchor attribution on synthetic event streams and the per-runtime event classifiers."""

from __future__ import annotations

import pytest

from edgenlp.profile.attribution import AttributionError, EventKind, TimedEvent, attribute
from edgenlp.profile.components import LinearPlan

L, P, O, C = EventKind.LINEAR, EventKind.PRELUDE, EventKind.OP, EventKind.CONTAINER


def ev(name, kind, ms=1.0):
    return TimedEvent(name, kind, (ms,))


def stream(heads, ffn, *, quantized=False):
    """Events an XNNPACK-like runtime emits for this shape, with the component each must get."""
    out = [(ev("gather", O), "embedding", None), (ev("ln", O), "embedding", None)]
    lin = lambda comp, layer: ([(ev("convert", P), comp, layer)] if quantized else []) + [(ev("fc", L), comp, layer)]  # noqa: E731
    for i, (h, f) in enumerate(zip(heads, ffn)):
        if h:
            for _ in range(3):
                out += lin("attn_qkv", i) + [(ev("reshape", O), "attn_core", i)]
            out += [(ev("bmm", O), "attn_core", i), (ev("softmax", O), "attn_core", i), (ev("bmm", O), "attn_core", i)]
            out += lin("attn_out", i)
            out += [(ev("add", O), "other", i), (ev("ln", O), "other", i)]
        elif i == 0:  # nothing ran yet: the pruned layer's residual + norm fall in the region before the first linear
            out += [(ev("add", O), "embedding", None), (ev("ln", O), "embedding", None)]
        else:  # ... or in the region after the previous layer's last linear
            out += [(ev("add", O), "other", i - 1), (ev("ln", O), "other", i - 1)]
        if f:
            out += lin("ffn", i) + [(ev("gelu", O), "ffn", i)] + lin("ffn", i)
            out += [(ev("add", O), "other", i), (ev("ln", O), "other", i)]
    last = max((i for i, (h, f) in enumerate(zip(heads, ffn)) if h or f), default=None)
    out += [(ev("slice", O), "other" if last is not None else "embedding", last)] + lin("other", None) + [(ev("tanh", O), "other", None)] + lin("other", None)
    return out


@pytest.mark.parametrize("heads,ffn", [((4, 4), (64, 64)), ((2, 4, 0), (64, 128, 32)), ((0,), (0,)), ((3, 1), (0, 16))])
@pytest.mark.parametrize("quantized", [False, True])
def test_attribution_matches_expected(heads, ffn, quantized):
    s = stream(heads, ffn, quantized=quantized)
    events = [e for e, _, _ in s]
    events.insert(len(events) // 2, ev("DELEGATE_CALL", C))
    out = attribute(events, LinearPlan.from_shape(heads, ffn), runtime="test")
    got = [(e.component, e.layer) for e in out if e.kind is not C]
    assert got == [(c, l) for _, c, l in s]


def test_attribution_refuses_wrong_linear_count():
    events = [e for e, _, _ in stream((2,), (8,))][:-1]  # drop the classifier
    with pytest.raises(AttributionError, match="linear operators"):
        attribute(events, LinearPlan.from_shape((2,), (8,)), runtime="test")


def test_event_classifiers():
    from edgenlp.profile import executorch, onnx

    assert executorch.classify("Fully Connected (NC, F32) GEMM #3") is L
    assert executorch.classify("Fully Connected (NC, QDU8, F32, QC8W) GEMM #1") is L
    assert executorch.classify("Convert (NC, F32, QDU8) #2") is P
    assert executorch.classify("Batch Matrix Multiply (NC, F32) GEMM #1") is O
    assert executorch.classify("DELEGATE_CALL") is C
    assert executorch.classify("Method::execute") is None
    assert onnx.classify("Gemm", [[32, 64], [32]]) is L
    assert onnx.classify("MatMul", [[1, 32, 64], [64, 64]]) is L
    assert onnx.classify("FusedMatMul", [[1, 2, 32, 16], [1, 2, 16, 32]]) is O
    assert onnx.classify("MatMul", [[1, 2, 32, 32], [1, 2, 32, 16]]) is O
    assert onnx.classify("DynamicQuantizeLinear", [[1, 32, 64]]) is P
    assert onnx.classify("SkipLayerNormalization", [[1, 32, 64]] * 2) is O
