"""Shape arithmetic against numbers worked out by hand and against the real modules (parameter count, FlopCounterMode)."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from edgenlp.models import arithmetic
from edgenlp.models.arithmetic import (COMPONENTS, StorageMarker, component_activation_bytes, component_flops, component_params,
                                       encoder_flops, encoder_params, linear_bytes, total_params, weight_bytes)  # fmt: skip
from edgenlp.models.encoder import EncoderClassifier, EncoderShape

MINILM_L6 = EncoderShape(family="bert", vocab_size=30522, hidden=384, heads=(12,) * 6, head_dim=32, ffn=(1536,) * 6)
# pruned unevenly: layer 1 keeps one head and no FFN, layer 2 no heads
UNEVEN = EncoderShape(family="bert", vocab_size=100, hidden=32, heads=(4, 1, 0), head_dim=8, ffn=(64, 0, 16), max_positions=16)
PART_COMPONENT = {"query": "attn_qkv", "key": "attn_qkv", "value": "attn_qkv", "attn_out": "attn_out", "ffn_in": "ffn",
                  "ffn_out": "ffn", "attn_norm": "other", "ffn_norm": "other"}  # fmt: skip


def params_by_component(model: EncoderClassifier) -> dict[str, int]:
    """``numel`` of the real module's parameters, grouped by component from their names."""
    out = dict.fromkeys(COMPONENTS, 0)
    for name, p in model.named_parameters():
        parts = name.split(".")
        if parts[0] == "embeddings":
            comp = "embedding"
        elif parts[0] == "layers":
            comp = PART_COMPONENT[parts[2]]
        else:
            comp = "other"  # pooler, classifier
        out[comp] += p.numel()
    return out


def torch_flops(model: EncoderClassifier, seq_len: int, batch: int = 1) -> int:
    ids = torch.randint(0, model.shape.vocab_size, (batch, seq_len))
    counter = FlopCounterMode(display=False)
    with torch.inference_mode(), counter:
        model(ids, torch.ones_like(ids))
    return int(counter.get_total_flops())


def test_minilm_l6_parameters_by_hand():
    H, F, n = 384, 1536, 6
    embedding = (30522 + 512 + 2) * H + 2 * H  # word, position, token type tables; norm
    qkv = 3 * (H * H + H)
    out = H * H + H
    ffn = (H * F + F) + (F * H + H)
    norms = 2 * 2 * H
    pooler = H * H + H
    classifier = H * 2 + 2
    assert embedding == 11_918_592 and n * (qkv + out + ffn + norms) == 10_646_784 and pooler == 147_840
    assert embedding + n * (qkv + out + ffn + norms) + pooler == 22_713_216  # all-MiniLM-L6-v2's 22.7M (BertModel with pooler)
    by_hand = {"embedding": embedding, "attn_qkv": n * qkv, "attn_core": 0, "attn_out": n * out, "ffn": n * ffn,
               "other": n * norms + pooler + classifier}  # fmt: skip
    assert component_params(MINILM_L6, num_labels=2) == by_hand
    assert total_params(MINILM_L6, 2) == 22_713_986
    assert encoder_params(H, 32, MINILM_L6.heads, MINILM_L6.ffn) == n * (qkv + out + ffn + norms)
    model = EncoderClassifier(MINILM_L6, 2).init_weights(seed=0)
    assert sum(p.numel() for p in model.parameters()) == 22_713_986
    assert params_by_component(model) == by_hand


def test_minilm_l6_one_layer_flops_by_hand():
    s, H, F, h, d = 128, 384, 1536, 12, 32
    layer = EncoderShape(family="bert", vocab_size=30522, hidden=H, heads=(h,), head_dim=d, ffn=(F,))
    qkv = 3 * 2 * s * H * H  # three H x H linears over s tokens, 2 FLOPs per multiply-add
    core = 2 * s * s * d * h + 2 * s * s * d * h  # QK^T and AV per head
    out = 2 * s * H * H
    ffn = 2 * s * H * F + 2 * s * F * H
    assert (qkv, core, out, ffn) == (113_246_208, 25_165_824, 37_748_736, 301_989_888)
    head = 2 * H * H + 2 * H * 2  # pooler and classifier on the [CLS] token
    assert component_flops(layer, seq_len=s, num_labels=2) == {"embedding": 0, "attn_qkv": qkv, "attn_core": core, "attn_out": out,
                                                                "ffn": ffn, "other": head}  # fmt: skip
    assert encoder_flops(H, d, (h,), (F,), seq_len=s) == qkv + core + out + ffn
    assert component_flops(MINILM_L6, seq_len=s, batch=3, num_labels=2)["ffn"] == 6 * 3 * ffn


def test_uneven_pruned_shape_by_hand():
    """Layer 0: 4 heads, FFN 64; layer 1: 1 head, no FFN; layer 2: no heads, FFN 16 (hidden 32, head_dim 8, 3 labels)."""
    params = {
        "embedding": (100 + 16 + 2) * 32 + 2 * 32,
        "attn_qkv": 3 * (32 * 32 + 32) + 3 * (32 * 8 + 8) + 0,
        "attn_core": 0,
        "attn_out": (32 * 32 + 32) + (8 * 32 + 32) + 32,  # a layer without heads keeps the output bias
        "ffn": (32 * 64 + 64 + 64 * 32 + 32) + 32 + (32 * 16 + 16 + 16 * 32 + 32),  # no FFN: the output bias
        "other": 3 * 4 * 32 + (32 * 32 + 32) + (32 * 3 + 3),
    }
    assert component_params(UNEVEN, num_labels=3) == params
    assert total_params(UNEVEN, 3) == sum(params.values()) == 16_011
    model = EncoderClassifier(UNEVEN, 3).init_weights(seed=0).eval()
    assert params_by_component(model) == params

    s = 8
    flops = {
        "embedding": 0,
        "attn_qkv": 3 * 2 * s * 32 * 32 + 3 * 2 * s * 32 * 8,
        "attn_core": 2 * 2 * 4 * s * s * 8 + 2 * 2 * 1 * s * s * 8,
        "attn_out": 2 * s * 32 * 32 + 2 * s * 8 * 32,
        "ffn": 2 * 2 * s * 32 * 64 + 2 * 2 * s * 32 * 16,
        "other": 2 * 32 * 32 + 2 * 32 * 3,
    }
    assert component_flops(UNEVEN, seq_len=s, num_labels=3) == flops
    assert torch_flops(model, s) == sum(flops.values())
    assert torch_flops(model, s, batch=2) == sum(component_flops(UNEVEN, seq_len=s, batch=2, num_labels=3).values())

    elements = {
        "embedding": s * 32,
        "attn_qkv": 3 * s * 32 + 3 * s * 8,
        "attn_core": (4 * s * s + s * 32) + (1 * s * s + s * 8),  # probabilities + context
        "attn_out": s * 32 + s * 32,  # layer 2's output projection has no weights and does not run
        "ffn": (s * 64 + s * 32) + (s * 16 + s * 32),
        "other": 3 * 2 * s * 32 + 32 + 3,  # two norms per layer, pooler, logits
    }
    assert component_activation_bytes(UNEVEN, seq_len=s, num_labels=3) == {c: 4 * n for c, n in elements.items()}
    assert component_activation_bytes(UNEVEN, seq_len=s, num_labels=3, bytes_per_element=2)["ffn"] == 2 * elements["ffn"]


def test_hidden_pruned_head_keeps_the_pooler_width():
    """Hidden pruned to 32, the pooler still writes 48 (its original width): pooler 32 -> 48, classifier 48 -> 3."""
    shape = dataclasses.replace(UNEVEN, pooler=48)
    model = EncoderClassifier(shape, 3).init_weights(seed=0).eval()
    other = 3 * 4 * 32 + (32 * 48 + 48) + (48 * 3 + 3)  # layer norms, pooler, classifier
    assert component_params(shape, num_labels=3)["other"] == other == params_by_component(model)["other"]
    assert component_flops(shape, seq_len=8, num_labels=3)["other"] == 2 * 32 * 48 + 2 * 48 * 3
    assert torch_flops(model, 8) == sum(component_flops(shape, seq_len=8, num_labels=3).values())
    assert component_activation_bytes(shape, seq_len=8, num_labels=3)["other"] == 4 * (3 * 2 * 8 * 32 + 48 + 3)


def test_profiler_counts_are_the_shape_arithmetic():
    """The profiler's module walk and the shape formulas agree on every component (fp32, uneven shape, batch 2)."""
    from edgenlp.profile.analytic import analyze

    model = EncoderClassifier(UNEVEN, 3).init_weights(seed=0).eval()
    a = analyze(model, seq_len=8, batch=2)
    params = component_params(UNEVEN, num_labels=3)
    flops = component_flops(UNEVEN, seq_len=8, batch=2, num_labels=3)
    act = component_activation_bytes(UNEVEN, seq_len=8, batch=2, num_labels=3)
    for c in COMPONENTS:
        assert (a.components[c].params, a.components[c].flops, a.components[c].activation_bytes) == (params[c], flops[c], act[c]), c
        assert a.components[c].weight_bytes == 4 * params[c]


@pytest.mark.parametrize("group, int4_in, int4_out", [(32, 374_784, 370_176), (64, 337_920, 333_312)])
def test_linear_bytes_384x1536_by_hand(group, int4_in, int4_out):
    """MiniLM's FFN linears: 384 -> 1536 (ffn_in) and 1536 -> 384 (ffn_out)."""
    n = 384 * 1536
    assert linear_bytes(384, 1536, 32) == 4 * n + 4 * 1536 == 2_365_440
    # int8: one byte per weight, one fp32 scale per output channel, fp32 bias (group size does not apply)
    assert linear_bytes(384, 1536, 8, group_size=group) == n + 4 * 1536 + 4 * 1536 == 602_112
    assert linear_bytes(1536, 384, 8, group_size=group) == n + 4 * 384 + 4 * 384 == 592_896
    # int4: half a byte per weight, one fp32 scale per `group` inputs of each output row, fp32 bias
    assert linear_bytes(384, 1536, 4, group_size=group) == n // 2 + 1536 * (384 // group) * 4 + 4 * 1536 == int4_in
    assert linear_bytes(1536, 384, 4, group_size=group) == n // 2 + 384 * (1536 // group) * 4 + 4 * 384 == int4_out


def test_weight_bytes_edges():
    assert weight_bytes(3, 5, 4) == 8 + 3 * 4  # 15 nibbles round up to 8 bytes
    assert weight_bytes(10, 100, 4, group_size=32) == 500 + 10 * 4 * 4  # 100 inputs = 4 groups (the last one partial)
    assert weight_bytes(10, 100, 2, group_size=None, scale_bytes=2) == 250 + 10 * 2
    assert weight_bytes(0, 384, 4, group_size=32) == 0 and linear_bytes(0, 384, 8) == 384 * 4  # a pruned block: its bias
    assert weight_bytes(30522, 384, 8) == 30522 * 384 + 30522 * 4  # int8 word embeddings, one scale per token
    assert StorageMarker(4, 64).weight_bytes(1536, 384) == weight_bytes(1536, 384, 4, group_size=64) == 294_912 + 1536 * 6 * 4
    with pytest.raises(ValueError, match="bits"):
        StorageMarker(3)


def test_encoder_counts_take_float_tensors_and_differentiate():
    """The pruner's expected size: d(params)/d(heads_i) = head_dim * (4H + 3), d(flops)/d(heads_i) = 2 head_dim (4sH + 2s^2)."""
    H, d, s = 64, 16, 10
    heads = [torch.tensor(3.0, requires_grad=True), torch.tensor(1.5, requires_grad=True)]
    ffn = [torch.tensor(100.0, requires_grad=True), torch.tensor(0.0, requires_grad=True)]
    p = encoder_params(H, d, heads, ffn)
    assert p.item() == pytest.approx(encoder_params(H, d, (3.0, 1.5), (100.0, 0.0)))
    p.backward()
    assert heads[0].grad.item() == d * (4 * H + 3) and ffn[1].grad.item() == 2 * H + 1
    f = encoder_flops(H, d, heads, ffn, seq_len=s)
    heads[0].grad = None
    f.backward()
    assert heads[0].grad.item() == 2 * d * (4 * s * H + 2 * s * s)


def test_arithmetic_stays_at_the_models_layer():
    """It may import only the models layer, config, errors, utils, torch, numpy and the standard library."""
    allowed = ("edgenlp.models", "edgenlp.config", "edgenlp.errors", "edgenlp.utils", "torch", "numpy", "__future__", "math",
               "dataclasses", "typing")  # fmt: skip
    tree = ast.parse(Path(arithmetic.__file__).read_text())
    names = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    names += [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    outside = [m for m in names if not any(m == a or m.startswith(a + ".") for a in allowed)]
    assert names and not outside, outside


def test_components_are_the_profilers_rows():
    from edgenlp.profile.components import COMPONENTS as PROFILE_ROWS

    assert COMPONENTS == PROFILE_ROWS


def test_quantize_config_does_not_import_the_profiler():
    tree = ast.parse(Path(__file__).parents[2].joinpath("edgenlp", "quantize", "config.py").read_text())
    modules = [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    assert not [m for m in modules if m and m.startswith("edgenlp.profile")], modules
