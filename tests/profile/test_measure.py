"""Measured latency: attribution covers the forward on every runtime.

These check the structure of the attribution, not speed: every linear of the
model is one attributed event in plan order, every operator lands in a
component, every component has events and every event was timed in every run.
An attribution that drops or misplaces operators fails; a slow or loaded
machine does not. How much of the end-to-end time the components cover is a
timing claim and lives in ``tools/bench/component_profile.py``.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from edgenlp.models.encoder import EncoderClassifier, EncoderShape
from edgenlp.profile.api import ProfileConfig, build_document
from edgenlp.profile.analytic import analyze
from edgenlp.profile.components import LinearPlan
from edgenlp.profile.measure import EagerMeasurer, MeasureSpec, ProfileTarget
from profile_testing import check_attribution, check_document

SEQ = 128


def _target(model, tmp_path, name="m") -> ProfileTarget:
    return ProfileTarget(
        name=name, plan=LinearPlan.from_model(model), vocab_size=model.shape.vocab_size, model=model,
        analysis_model=model, workdir=tmp_path, seq_lens=(SEQ,), info={"source": name, "kind": "model"},
    )  # fmt: skip


@pytest.fixture(scope="module")
def small_model():
    shape = EncoderShape.uniform(num_layers=2, hidden=64, num_heads=4, ffn=256, vocab_size=500, max_positions=128)
    return EncoderClassifier(shape, 2).init_weights(seed=0).eval()


def _measurers():
    from edgenlp.profile.executorch import ExecuTorchMeasurer
    from edgenlp.profile.onnx import OnnxRuntimeMeasurer

    return {"eager": EagerMeasurer(), "onnx": OnnxRuntimeMeasurer(), "executorch": ExecuTorchMeasurer()}


@pytest.fixture(scope="module")
def small_target(small_model, tmp_path_factory):
    return _target(small_model, tmp_path_factory.mktemp("small"))


@pytest.mark.parametrize("runtime", ["eager", "onnx", "executorch"])
def test_attribution_is_complete_on_every_runtime(small_target, runtime):
    spec = MeasureSpec(seq_len=SEQ, runs=5, warmup=1)
    m = _measurers()[runtime].measure(small_target, spec)
    check_attribution(m, small_target.plan, runs=spec.runs)
    doc = build_document(small_target, analyze(small_target.analysis_model, seq_len=SEQ), {runtime: m},
                         ProfileConfig(runtimes=(runtime,)), 1)
    check_document(doc, runtime)
    assert doc["total"]["latency_ms"][runtime] == pytest.approx(float(np.median(m.end_to_end_ms)), rel=1e-3)
    assert doc["methods"][runtime]


def test_uneven_pruned_model_on_every_runtime(tmp_path):
    shape = EncoderShape(family="bert", vocab_size=500, hidden=64, heads=(2, 4, 0), head_dim=16, ffn=(64, 128, 32), max_positions=128)
    model = EncoderClassifier(shape, 3).init_weights(seed=0).eval()
    target = _target(model, tmp_path, "uneven")
    measured = {rt: m.measure(target, MeasureSpec(seq_len=SEQ, runs=3, warmup=1)) for rt, m in _measurers().items()}
    for rt, m in measured.items():
        check_attribution(m, target.plan, runs=3)
        layers = {(e.layer, e.component) for e in m.events if e.layer is not None}
        assert (2, "attn_qkv") not in layers and (2, "ffn") in layers, rt
        assert (1, "attn_core") in layers, rt
    doc = build_document(target, analyze(model, seq_len=SEQ), measured, ProfileConfig(runtimes=tuple(measured), per_layer=True), 1)
    assert [layer["index"] for layer in doc["layers"]] == [0, 1, 2]
    assert doc["shape"]["heads"] == [2, 4, 0]


def test_quantized_model_eager(tmp_path):
    shape = EncoderShape.uniform(num_layers=2, hidden=64, num_heads=4, ffn=128, vocab_size=500, max_positions=64)
    model = EncoderClassifier(shape, 2).init_weights(seed=0).eval()
    q = torch.ao.quantization.quantize_dynamic(model, {nn.Linear}, dtype=torch.qint8)
    target = _target(q, tmp_path, "int8")
    m = EagerMeasurer().measure(target, MeasureSpec(seq_len=32, runs=3, warmup=1))
    doc = build_document(target, analyze(q, seq_len=32), {"eager": m}, ProfileConfig(), 1)
    rows = {r["name"]: r for r in doc["components"]}
    assert "int8" in rows["ffn"]["weight_format"]
    assert rows["ffn"]["weight_bytes"] < 0.3 * 4 * rows["ffn"]["params"]  # int8 weights (+ fp32 biases and scales)
    assert rows["ffn"]["latency_ms"]["eager"] > 0


def test_workdir_artifact_cache_follows_weights(tmp_path):
    from edgenlp.profile.measure import cached_artifact, remember_artifact

    shape = EncoderShape.uniform(num_layers=1, hidden=32, num_heads=2, ffn=64, vocab_size=100, max_positions=32)
    model = EncoderClassifier(shape, 2).init_weights(seed=0).eval()
    target = _target(model, tmp_path, "cache")
    path = tmp_path / "model.pte"
    path.write_bytes(b"x")
    key = {"format": "pte", "seq_lens": [16]}
    assert not cached_artifact(target, path, key)
    remember_artifact(target, path, key)
    assert cached_artifact(target, path, key)
    assert not cached_artifact(target, path, {"format": "pte", "seq_lens": [16, 32]})
    with torch.no_grad():
        model.layers[0].ffn_in.weight[0, 0] += 1.0
    assert not cached_artifact(target, path, key)
