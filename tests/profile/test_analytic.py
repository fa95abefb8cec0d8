"""Analytic counts: the classic BERT-base table, uneven (pruned) shapes, quantized storage."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from edgenlp.export.graph import example_inputs
from edgenlp.models.encoder import EncoderClassifier, EncoderShape
from edgenlp.models.families import LAYER_LINEARS
from edgenlp.models.registry import NAMED_MODELS
from edgenlp.profile.analytic import analyze, closed_form_bert, count_flops_torch
from edgenlp.profile.components import COMPONENTS, LinearPlan
from edgenlp.profile.storage import StorageMarker, WeightStorage, describe_storage, mark_storage, subtree_storage

BERT_BASE_PARAMS = {  # the reference table (encoder with pooler)
    "embedding": 23_837_184,
    "attn_qkv": 21_261_312,
    "attn_out": 7_087_104,
    "ffn": 56_669_184,
}
BERT_BASE_TOTAL_WITH_POOLER = 109_482_240


def meta_model(shape: EncoderShape, num_labels: int = 2) -> EncoderClassifier:
    with torch.device("meta"):
        return EncoderClassifier(shape, num_labels).eval()


def uneven_model(seed: int = 0) -> EncoderClassifier:
    shape = EncoderShape(family="bert", vocab_size=500, hidden=64, heads=(2, 4, 0), head_dim=16, ffn=(64, 128, 32), max_positions=64)
    return EncoderClassifier(shape, 3).init_weights(seed=seed).eval()


@pytest.fixture(scope="module")
def bert_base():
    return meta_model(NAMED_MODELS["bert-base"].shape)


def test_bert_base_params_match_reference(bert_base):
    a = analyze(bert_base, seq_len=128)
    for name, expected in BERT_BASE_PARAMS.items():
        assert a.components[name].params == expected, name
    assert a.components["attn_core"].params == 0
    classifier = bert_base.classifier.in_features * 2 + 2
    assert a.total.params - classifier == BERT_BASE_TOTAL_WITH_POOLER  # the classifier is the only extra, in `other`
    assert a.components["attn_qkv"].params == 3 * a.components["attn_out"].params
    assert a.components["ffn"].params == max(c.params for c in a.components.values())
    assert 0.21 < a.components["embedding"].params / a.total.params < 0.23
    assert a.total.weight_bytes == 4 * a.total.params  # fp32


@pytest.mark.parametrize("seq_len", [32, 128, 512])
def test_bert_base_flops_closed_form_and_flop_counter(bert_base, seq_len):
    s = bert_base.shape
    ref = closed_form_bert(
        num_layers=s.num_layers, hidden=s.hidden, ffn=s.ffn[0], vocab_size=s.vocab_size,
        max_positions=s.max_positions, type_vocab_size=s.type_vocab_size, seq_len=seq_len,
    )  # fmt: skip
    a = analyze(bert_base, seq_len=seq_len)
    for name in ("embedding", "attn_qkv", "attn_core", "attn_out", "ffn"):
        assert a.components[name].flops == ref[name]["flops"], name
    classifier_flops = 2 * s.hidden * bert_base.num_labels
    assert a.components["other"].flops == ref["norms_and_pooler"]["flops"] + classifier_flops
    assert a.components["attn_qkv"].flops == 3 * a.components["attn_out"].flops
    assert a.components["embedding"].flops == 0
    ids, mask = example_inputs(seq_len)
    assert count_flops_torch(bert_base, (ids.to("meta"), mask.to("meta"))) == a.total.flops


def test_closed_form_bert_by_hand():
    """The reference closed forms, written out: n layers of hidden H, FFN F, at b x s tokens."""
    n, H, F, V, P, T, s, b = 12, 768, 3072, 30522, 512, 2, 128, 2
    ref = closed_form_bert(num_layers=n, hidden=H, ffn=F, vocab_size=V, max_positions=P, type_vocab_size=T, seq_len=s, batch=b)
    assert ref == {
        "embedding": {"params": (V + P + T) * H + 2 * H, "flops": 0},
        "attn_qkv": {"params": n * 3 * (H * H + H), "flops": n * 3 * 2 * b * s * H * H},
        "attn_core": {"params": 0, "flops": n * 4 * b * s * s * H},
        "attn_out": {"params": n * (H * H + H), "flops": n * 2 * b * s * H * H},
        "ffn": {"params": n * (H * F + F + F * H + H), "flops": n * 4 * b * s * H * F},
        "norms_and_pooler": {"params": n * 4 * H + H * H + H, "flops": 2 * b * H * H},
    }
    assert sum(r["params"] for r in ref.values()) == BERT_BASE_TOTAL_WITH_POOLER


def test_int4_markers_on_a_layer_without_heads():
    """A pruned layer's Q/K/V weights have no rows: they store nothing (no scales), at any group size."""
    model = uneven_model()  # layer 2 has 0 heads
    for group in (32, 64):
        for m in model.modules():
            if isinstance(m, nn.Linear):
                mark_storage(m, StorageMarker(bits=4, group_size=group))
        a = analyze(model, seq_len=8)
        assert a.layers[2]["attn_qkv"].weight_bytes == 0 and a.layers[2]["attn_qkv"].params == 0
        assert a.layers[2]["attn_out"].weight_bytes == 64 * 4  # the output bias (in_features 0: no weight, no groups)
        q = model.layers[0].query  # 64 -> 32
        assert describe_storage(q).bytes == 64 * 32 // 2 + 32 * (64 // group) * 4 + 32 * 4


def test_attention_core_share_grows_with_sequence_length(bert_base):
    shares = []
    for seq in (32, 128, 512):
        a = analyze(bert_base, seq_len=seq)
        shares.append(a.components["attn_core"].flops / a.total.flops)
    assert shares == sorted(shares) and shares[0] < shares[-1]


def test_uneven_heads_and_pruned_ffn():
    model = uneven_model()
    a = analyze(model, seq_len=16)
    # every parameter is counted exactly once
    assert a.total.params == sum(p.numel() for p in model.parameters())
    assert a.total.weight_bytes == 4 * a.total.params
    ids, mask = example_inputs(16, vocab_size=500)
    assert count_flops_torch(model, (ids, mask)) == a.total.flops
    # layer 2 has no heads: no QKV, no attention core, output projection is a bias only
    assert a.layers[2]["attn_core"].flops == 0 and a.layers[2]["attn_qkv"].flops == 0
    assert a.layers[1]["attn_core"].flops == 2 * a.layers[0]["attn_core"].flops
    assert a.layers[0]["ffn"].flops * 2 == a.layers[1]["ffn"].flops
    for c in COMPONENTS:
        if c != "embedding":
            assert sum(layer[c].flops for layer in a.layers) + (a.head.flops if c == "other" else 0) == a.components[c].flops
    plan = LinearPlan.from_model(model)
    assert [x.module for x in plan.anchors if x.layer == 2] == ["layers.2.ffn_in", "layers.2.ffn_out"]
    assert len(plan) == 6 + 6 + 2 + 2


def test_ao_dynamic_int8_shrinks_linear_bytes():
    model = uneven_model()
    fp32 = analyze(model, seq_len=16)
    q = torch.ao.quantization.quantize_dynamic(model, {nn.Linear}, dtype=torch.qint8)
    a = analyze(q, seq_len=16)
    assert a.total.params == fp32.total.params
    assert a.total.flops == fp32.total.flops
    for c in ("attn_qkv", "attn_out", "ffn"):
        assert a.components[c].weight_bytes < 0.4 * fp32.components[c].weight_bytes, c
        assert "int8" in a.components[c].to_dict()["weight_format"]
    assert a.components["embedding"].weight_bytes == fp32.components["embedding"].weight_bytes


def test_storage_marker_and_custom_hook():
    lin = nn.Linear(64, 32)
    assert describe_storage(lin) == WeightStorage("fp32", 64 * 32 + 32, (64 * 32 + 32) * 4)
    mark_storage(lin, StorageMarker(bits=8))
    st = describe_storage(lin)
    assert st.format == "int8" and st.bytes == 64 * 32 + 32 * 4 + 32 * 4  # int8 weight, fp32 scale per row, fp32 bias
    mark_storage(lin, StorageMarker(bits=4, group_size=32))
    assert describe_storage(lin).bytes == 64 * 32 // 2 + 32 * 2 * 4 + 32 * 4

    class Packed(nn.Module):
        def weight_storage(self):
            return {"format": "sparse-2:4", "params": 100, "bytes": 60}

    assert describe_storage(Packed()) == WeightStorage("sparse-2:4", 100, 60)
    sparse = nn.Linear(8, 8, bias=False)
    with torch.no_grad():
        sparse.weight.zero_()
        sparse.weight[0, 0] = 1.0
    sparse.weight = nn.Parameter(sparse.weight.detach().to_sparse_csr(), requires_grad=False)
    st = subtree_storage(sparse)
    assert st.params == 64 and st.bytes < 64 * 4 and st.format.startswith("sparse")


def test_half_precision_counts_two_bytes():
    model = uneven_model().half()
    a = analyze(model, seq_len=8)
    assert a.total.weight_bytes == 2 * a.total.params
    assert a.components["embedding"].activation_bytes == 8 * 64 * 2


def test_canonical_parts_all_have_a_component():
    from edgenlp.profile.components import part_component

    assert {part_component(p) for p in LAYER_LINEARS} == {"attn_qkv", "attn_out", "ffn"}


def test_weight_storage_comes_from_the_typed_recipe_step():
    """The profiler reads how weights ship from a step's ``weight_storage()`` hook, not from step names."""
    from dataclasses import dataclass

    from edgenlp.config import Config
    from edgenlp.export.api import ExportConfig
    from edgenlp.profile.api import apply_weight_storage
    from edgenlp.recipe import Step, register_step

    @dataclass(frozen=True)
    class StorageTestConfig(Config):
        bits: int = 8

        def weight_storage(self):
            return {"*": StorageMarker(bits=self.bits), "layers.0.query": StorageMarker(bits=4, group_size=32)}

    register_step("storage-test", StorageTestConfig)
    model = EncoderClassifier(EncoderShape.uniform(num_layers=2, hidden=64, num_heads=4, ffn=128, vocab_size=100), 2)
    plain = analyze(model, seq_len=8)
    apply_weight_storage(model, (Step("export", ExportConfig()),))  # no step defines storage: stays fp32
    assert analyze(model, seq_len=8).total.weight_bytes == plain.total.weight_bytes
    apply_weight_storage(model, (Step("storage-test", StorageTestConfig(bits=8)),))
    q = model.layers[0].query
    assert describe_storage(q).bytes == q.out_features * q.in_features // 2 + q.out_features * (q.in_features // 32) * 4 + q.out_features * 4
    k = model.layers[0].key
    assert describe_storage(k).bytes == k.out_features * k.in_features + k.out_features * 4 + k.out_features * 4
