"""The typed recipe and the lossless hand-off between stages."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace

import pytest
import torch
from safetensors.torch import load_file

from edgenlp_testing import tiny_model
from edgenlp.config import Config
from edgenlp.errors import EdgeNLPError
from edgenlp.export.api import ExportConfig
from edgenlp.finetune.config import FinetuneConfig, LearnerConfig
from edgenlp.models.encoder import EncoderClassifier, EncoderShape, ModelInfo
from edgenlp.models.registry import load_model, save_pretrained
from edgenlp.recipe import (
    FP32_PARITY,
    ParityPolicy,
    RecipeError,
    Step,
    parity_policy,
    recipe_from_list,
    recipe_to_list,
    register_step,
)


@dataclass(frozen=True)
class HalfConfig(Config):
    """A test step whose parity reference is the model cast through fp16."""

    VERSION = 2
    tolerance: float = 5e-2

    def parity_policy(self):
        return ParityPolicy("fp16-test", self.tolerance, reference=lambda m: m, compare_fp32=True)


register_step("half-test", HalfConfig)


def test_steps_round_trip_into_equal_configs():
    steps = (
        Step("finetune", FinetuneConfig(method="learner", learner=LearnerConfig(rank=4, ranks=(("pooler", 2),))), {"dev": {"accuracy": 0.9}}),
        Step("half-test", HalfConfig(tolerance=0.1)),
        Step("export", ExportConfig(max_seq_len=64, buckets=(16, 64))),
    )
    data = json.loads(json.dumps(recipe_to_list(steps)))
    back = recipe_from_list(data)
    assert back == steps
    assert recipe_to_list(back) == data
    assert data[1] == {"step": "half-test", "version": 2, "config": {"type": "HalfConfig", "version": 2, "tolerance": 0.1}, "result": {}}


@pytest.mark.parametrize(
    "item, message",
    [
        ({"step": "distill-magic", "version": 1, "config": {}}, "unknown recipe step 'distill-magic'"),
        ({"step": "half-test", "version": 3, "config": {}}, "written by a newer edgenlp"),
        ({"step": "export", "config": {}}, "no integer 'version'"),
        ({"step": "export", "version": 1, "config": {"max_seq_len": 1}}, "invalid config"),
        ({"step": "export", "version": 1, "config": {"bogus": 1}}, "unknown field"),
        ("export", "must be an object"),
    ],
)
def test_unreadable_steps_are_clear_errors(item, message):
    with pytest.raises(RecipeError, match=message):
        recipe_from_list([item])


def test_a_step_needs_its_registered_config():
    with pytest.raises(ValueError, match="takes a FinetuneConfig"):
        Step("finetune", ExportConfig())


def test_parity_policy_is_a_property_of_the_steps():
    assert parity_policy(()) is FP32_PARITY
    assert parity_policy((Step("export", ExportConfig()),)) is FP32_PARITY
    policy = parity_policy((Step("half-test", HalfConfig(tolerance=0.2)), Step("export", ExportConfig())))
    assert policy.name == "fp16-test" and policy.tolerance == 0.2 and policy.compare_fp32


# --------------------------------------------------------------------------- lossless hand-off

UNEVEN = dict(heads=(2, 4, 0), ffn=(16, 0, 48))


def uneven_model(*, hidden=32, vocab_size=200, **kw):
    from edgenlp.models.registry import DEFAULT_TOKENIZER, default_vocab_file

    shape = EncoderShape(family="bert", vocab_size=vocab_size, hidden=hidden, head_dim=8, max_positions=64, **{**UNEVEN, **kw})
    model = EncoderClassifier(shape, 3, labels=("a", "b", "c")).init_weights(std=0.2, seed=1).eval()
    info = ModelInfo("uneven", "test", shape, False, str(default_vocab_file()), dict(DEFAULT_TOKENIZER))
    return model, info


def saved_bytes(d):
    tensors = load_file(str(d / "model.safetensors"))
    return {k: (v.dtype, tuple(v.shape), v.numpy().tobytes()) for k, v in tensors.items()}, json.loads((d / "config.json").read_text())


@pytest.mark.parametrize("kind", ["uniform", "uneven", "narrow-hidden", "fp16-and-recipe"])
def test_save_load_save_is_identical(tmp_path, kind):
    if kind == "uniform":
        model, info = tiny_model()
    elif kind == "uneven":
        model, info = uneven_model()
    elif kind == "narrow-hidden":
        model, info = uneven_model(hidden=24)
    else:
        model, info = uneven_model()
        model.embeddings.word.weight.data = model.embeddings.word.weight.data.half()
        info = replace(info, recipe=(Step("half-test", HalfConfig()), Step("finetune", FinetuneConfig(epochs=2), {"dev": {"accuracy": 0.5}})))
    first = save_pretrained(model, info, tmp_path / "a")
    loaded, loaded_info = load_model(first)
    assert loaded.shape == model.shape and loaded_info.recipe == info.recipe
    assert loaded.embeddings.word.weight.dtype == model.embeddings.word.weight.dtype
    second = save_pretrained(loaded, loaded_info, tmp_path / "b")
    assert saved_bytes(first) == saved_bytes(second)
    ids = torch.randint(0, 200, (2, 9))
    mask = torch.ones_like(ids)
    if kind != "fp16-and-recipe":
        with torch.no_grad():
            assert torch.equal(loaded(ids, mask), model(ids, mask))


def test_save_refuses_state_it_cannot_name(tmp_path):
    model, info = tiny_model()
    model.register_buffer("calibration_scale", torch.ones(3))
    with pytest.raises(ValueError, match="calibration_scale"):
        save_pretrained(model, info, tmp_path / "m")
    assert not (tmp_path / "m").exists()


def test_load_refuses_unmapped_keys_in_an_edgenlp_directory(tmp_path):
    from safetensors.torch import save_file

    model, info = tiny_model()
    d = save_pretrained(model, info, tmp_path / "m")
    tensors = load_file(str(d / "model.safetensors"))
    tensors["bert.encoder.layer.0.attention.self.query.scale"] = torch.ones(4)
    save_file(tensors, str(d / "model.safetensors"))
    with pytest.raises(EdgeNLPError, match="query.scale"):
        load_model(d)


def test_uneven_model_equals_the_masked_uniform_model():
    """A model with removed heads/neurons computes what the full model computes with them masked out."""
    small, _ = uneven_model()
    full_shape = EncoderShape(family="bert", vocab_size=200, hidden=32, head_dim=8, max_positions=64, heads=(4, 4, 4), ffn=(48, 48, 48))
    full = EncoderClassifier(full_shape, 3).init_weights(std=0.2, seed=7).eval()
    with torch.no_grad():
        for name in ("embeddings", "pooler", "classifier"):
            getattr(full, name).load_state_dict(getattr(small, name).state_dict())
        for big, little in zip(full.layers, small.layers):
            inner, width = little.query.out_features, little.ffn_in.out_features
            for part in ("query", "key", "value"):
                getattr(big, part).weight[:inner] = getattr(little, part).weight
                getattr(big, part).bias[:inner] = getattr(little, part).bias
            big.attn_out.weight.zero_()  # masked heads contribute nothing
            big.attn_out.weight[:, :inner] = little.attn_out.weight
            big.attn_out.bias.copy_(little.attn_out.bias)
            big.ffn_in.weight[:width] = little.ffn_in.weight
            big.ffn_in.bias[:width] = little.ffn_in.bias
            big.ffn_out.weight.zero_()
            big.ffn_out.weight[:, :width] = little.ffn_out.weight
            big.ffn_out.bias.copy_(little.ffn_out.bias)
            big.attn_norm.load_state_dict(little.attn_norm.state_dict())
            big.ffn_norm.load_state_dict(little.ffn_norm.state_dict())
        ids = torch.randint(0, 200, (3, 11))
        mask = torch.ones_like(ids)
        mask[1, 6:] = 0
        assert (small(ids, mask) - full(ids, mask)).abs().max().item() < 1e-5


def test_uneven_model_exports_with_parity(tmp_path):
    """Zero-head layers, zero-width FFNs and a narrow hidden size lower to .pte and .onnx within fp32 parity."""
    from edgenlp.bundle import Bundle
    from edgenlp.export.api import export_bundle

    model, info = uneven_model(hidden=24, vocab_size=30522)  # the tokenizer is the real BERT vocabulary
    bundle = export_bundle(model, info, tmp_path / "b", config=ExportConfig(max_seq_len=16, buckets=(16,)))
    parity = Bundle.open(bundle.path).manifest["parity"]
    assert set(parity) == {"executorch", "onnx"}
    for p in parity.values():
        assert p["passed"] and p["max_abs_diff"] <= 1e-4 and p["policy"] == "fp32"


def test_export_uses_the_recipe_parity_policy(tmp_path):
    from edgenlp.export.api import export_bundle

    model, info = tiny_model()
    info = replace(info, recipe=(Step("half-test", HalfConfig(tolerance=0.3)),))
    bundle = export_bundle(model, info, tmp_path / "b", config=ExportConfig(formats=("onnx",), max_seq_len=16))
    p = bundle.manifest["parity"]["onnx"]
    assert p["policy"] == "fp16-test" and p["tolerance"] == 0.3 and "fp32" in p
    assert p["fp32"]["argmax_agreement"] == 1.0
    assert [s.type for s in bundle.recipe] == ["half-test", "export"]


def test_quantized_parity_bound_follows_the_activation_rounding_error_not_the_logits():
    from edgenlp.quantize.config import LOWERING_FLOOR, RMS_FACTOR, ROUNDING_FACTOR, QuantizeConfig

    policy = QuantizeConfig(scheme="int8").parity_policy()
    # No rounding measured (or a tiny one): the kernels' fp32 arithmetic, scaled like an rtol.
    assert policy.tolerance_for("executorch", reference_scale=0.5) == pytest.approx(LOWERING_FLOOR)
    assert policy.tolerance_for("executorch", reference_scale=4.0) == pytest.approx(4 * LOWERING_FLOOR)
    # The AVX2 MiniLM: lowering error 0.15 where the reference's own rounding error is ~0.1 passes ...
    b = policy.bound("executorch", reference_scale=8.0, quant_error=0.2, rounding_error=0.1, rounding_rms=0.02)
    assert b["applied"] == "activation-rounding" and b["tolerance"] == pytest.approx(ROUNDING_FACTOR * 0.1)
    assert 0.15 <= b["tolerance"] and b["rms_limit"] == pytest.approx(RMS_FACTOR * 0.02)
    assert "activation-rounding error" in b["why"] and b["terms"]["activation_rounding_error"] == 0.1
    # ... independent of the quantization error (int4: mostly the weights', shared by every kernel).
    assert policy.bound("executorch", reference_scale=8.0, quant_error=5.0, rounding_error=0.1)["tolerance"] == b["tolerance"]
    # ONNX Runtime quantizes the fp32 model itself: a multiple of the whole quantization error, with a floor
    # (ONNX_TOLERANCE, scaled by the reference's largest |logit|) well below the size of the logits themselves.
    from edgenlp.quantize.config import ONNX_QUANT_ERROR_FACTOR, ONNX_TOLERANCE, ONNX_TOLERANCE_X86_NO_VNNI, onnx_tolerance

    big = policy.bound("onnx", reference_scale=2.0, quant_error=5.0, rounding_error=0.1)
    assert big["applied"] == "quant-error-multiple" and big["tolerance"] == pytest.approx(ONNX_QUANT_ERROR_FACTOR * 5.0)
    small = policy.bound("onnx", reference_scale=2.0, quant_error=0.1, rounding_error=0.1)
    assert small["applied"] == "relative" and small["tolerance"] == pytest.approx(2.0 * onnx_tolerance(8))
    assert max(ONNX_TOLERANCE.values()) <= 0.5  # a defect moves logits by about their own size: it must not pass
    assert max(ONNX_TOLERANCE_X86_NO_VNNI.values()) < 1.0  # ... nor on an x86 host without VNNI
    assert ONNX_TOLERANCE_X86_NO_VNNI[4] == ONNX_TOLERANCE[4]  # 4-bit linears keep fp32 activations: no saturation


@pytest.mark.parametrize("machine, isa, bits, floor", [
    ("x86_64", ["avx2", "fma"], 8, "no-vnni"), ("x86_64", ["avx2", "fma", "avx512_vnni"], 8, "vnni"),
    ("x86_64", ["avx2", "avx_vnni"], 8, "vnni"), ("aarch64", ["asimd", "asimddp"], 8, "vnni"), ("x86_64", ["avx2"], 4, "vnni")])
def test_onnx_floor_follows_the_hosts_int8_kernel(monkeypatch, machine, isa, bits, floor):
    """ONNX Runtime's u8 x s8 kernel saturates on x86 without VNNI: only its 8-bit floor widens there."""
    import edgenlp.utils
    from edgenlp.quantize.config import ONNX_TOLERANCE, ONNX_TOLERANCE_X86_NO_VNNI, onnx_tolerance

    monkeypatch.setattr(edgenlp.utils, "cpu_info", lambda: {"machine": machine, "isa": isa})
    want = ONNX_TOLERANCE_X86_NO_VNNI[bits] if floor == "no-vnni" else ONNX_TOLERANCE[bits]
    assert onnx_tolerance(bits) == want
    # fp32 parity stays absolute.
    assert FP32_PARITY.tolerance_for("executorch", reference_scale=10.0, quant_error=1.0) == FP32_PARITY.tolerance
    with pytest.raises(ValueError, match="quant_error_fraction"):
        ParityPolicy("x", 1e-2, quant_error_fraction=0.5)
    with pytest.raises(ValueError, match="rms_factor"):
        ParityPolicy("x", 1e-2, rms_factor=2.0)
