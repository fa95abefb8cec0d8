"""Learner collapse, FAR reconfiguration and rank-from-priming, checked on a tiny encoder."""

from __future__ import annotations

import collections

import pytest
import torch
from torch import nn

from edgenlp.finetune import far, learner
from edgenlp.finetune.config import LEARNER_TARGETS
from edgenlp.finetune.rank import choose_ranks, svd_factors
from tests.conftest import tiny_model


def _inputs(seed=0, batch=3, seq=12, vocab=30522):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1000, vocab, (batch, seq), generator=g)
    mask = torch.ones_like(ids)
    mask[0, -4:] = 0
    return ids, mask


def _randomize_learners(model, seed=1):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for layer in learner.learners(model).values():
            layer.learner_p2.normal_(0, 0.05, generator=g)


def _op_counts(model, ids, mask) -> collections.Counter:
    from edgenlp.export.graph import prepare

    ep = torch.export.export(prepare(model), (ids, mask))
    return collections.Counter(str(n.target) for n in ep.graph.nodes if n.op == "call_function")


def test_learner_starts_with_zero_delta_and_merge_unmerge_round_trip():
    model, _ = tiny_model()
    ids, mask = _inputs()
    base = model(ids, mask)
    paths = learner.target_names(model, LEARNER_TARGETS)
    assert len(paths) == 2 * 6 + 1
    learner.add_learners(model, {p: 4 for p in paths})
    torch.testing.assert_close(model(ids, mask), base, rtol=0, atol=0)
    _randomize_learners(model)
    layer = model.layers[0].query
    w0 = layer.base_layer.weight.detach().clone()
    layer.merge(safe=True)
    torch.testing.assert_close(layer.base_layer.weight, w0 + layer.get_delta_weight(), rtol=0, atol=1e-7)
    layer.unmerge()
    torch.testing.assert_close(layer.base_layer.weight, w0, rtol=0, atol=1e-6)


def test_merge_safe_refuses_non_finite_weights():
    layer = learner.LearnerLinear(nn.Linear(8, 8), 2)
    with torch.no_grad():
        layer.learner_p2.fill_(float("inf"))
    w0 = layer.base_layer.weight.detach().clone()
    with pytest.raises(ValueError, match="NaN/Inf"):
        layer.merge(safe=True)
    assert torch.equal(layer.base_layer.weight, w0) and not layer.merged


@pytest.mark.parametrize("family", ["bert", "distilbert"])
def test_collapse_matches_unmerged_logits_and_exports_like_the_base(family):
    model, _ = tiny_model(family=family)
    ids, mask = _inputs()
    base_ops = _op_counts(model, ids, mask)
    paths = learner.target_names(model, LEARNER_TARGETS)
    learner.add_learners(model, {p: 3 + i % 4 for i, p in enumerate(paths)})
    _randomize_learners(model)
    model.eval()
    with torch.no_grad():
        unmerged = model(ids, mask)
    learner.merge_and_unload(model)
    assert not learner.learners(model)
    assert all(type(m) is nn.Linear for n, m in model.named_modules() if n.endswith(tuple(LEARNER_TARGETS)))
    with torch.no_grad():
        collapsed = model(ids, mask)
    assert (collapsed - unmerged).abs().max().item() <= 1e-5
    assert not torch.allclose(collapsed, tiny_model(family=family)[0](ids, mask), atol=1e-4)  # the delta is real
    assert _op_counts(model, ids, mask) == base_ops


def test_far_reconfigured_ffn_equals_original_and_fold_back_restores_layout():
    model, _ = tiny_model()
    model.eval()
    ids, mask = _inputs()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with torch.no_grad():
        reference = model(ids, mask)
    layer = model.layers[1]
    keep = far.select_neurons(torch.arange(128.0).flip(0), 0.25)  # neurons 0..31 score highest
    assert keep.tolist() == list(range(32))
    keep = torch.tensor([5, 17, 64, 100, 127])
    split_in, split_out = far.reconfigure(layer, keep)
    assert layer.ffn_in is split_in and layer.ffn_out is split_out
    assert split_in.train_part.out_features == 5 and split_in.frozen_part.out_features == 123
    assert split_in.train_part.weight.requires_grad and not split_in.frozen_part.weight.requires_grad
    assert not split_out.frozen_part.weight.requires_grad and split_out.bias.requires_grad
    with torch.no_grad():
        torch.testing.assert_close(model(ids, mask), reference, rtol=0, atol=1e-5)
        split_in.train_part.weight[2].add_(1.0)  # neuron 64's input row
        split_out.train_part.weight[:, 4].add_(2.0)  # neuron 127's output column
    far.fold_back(layer)
    assert type(layer.ffn_in) is torch.nn.Linear and type(layer.ffn_out) is torch.nn.Linear
    state = model.state_dict()
    assert list(state) == list(before)
    for k, v in before.items():
        expect = v.clone()
        if k == "layers.1.ffn_in.weight":
            expect[64] += 1.0
        if k == "layers.1.ffn_out.weight":
            expect[:, 127] += 2.0
        torch.testing.assert_close(state[k], expect, rtol=0, atol=1e-6, msg=k)


def test_far_split_lives_on_the_layers_device():
    """The split's index buffers follow the FFN's device (a CPU index beside CUDA weights broke FAR on --device cuda);
    the meta device stands in for a GPU here."""
    model, _ = tiny_model()
    layer = model.layers[0].to("meta")
    split_in, split_out = far.reconfigure(layer, torch.tensor([3, 7]))
    assert split_in.order.device.type == "meta"
    assert {p.device.type for p in [*split_in.parameters(), *split_out.parameters()]} == {"meta"}


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_learners_on_cuda_start_as_on_the_cpu():
    """A seeded Learner draws the same initial factor on every device (the generator is a CPU one)."""
    base = nn.Linear(16, 8)
    cpu = learner.LearnerLinear(base, 4, generator=torch.Generator().manual_seed(3))
    gpu = learner.LearnerLinear(nn.Linear(16, 8).cuda(), 4, generator=torch.Generator().manual_seed(3))
    torch.testing.assert_close(gpu.learner_p1.cpu(), cpu.learner_p1.detach(), rtol=0, atol=0)


def test_far_scores_rank_by_l1_change():
    w_in, w_out = torch.zeros(4, 3), torch.zeros(3, 4)
    w_in2, w_out2 = w_in.clone(), w_out.clone()
    w_in2[2] = 1.0  # neuron 2 moved 3
    w_out2[:, 0] = -2.0  # neuron 0 moved 6
    scores = far.neuron_scores(w_in, w_in2, w_out, w_out2)
    assert scores.tolist() == [6.0, 0.0, 3.0, 0.0]
    assert far.select_neurons(scores, 0.5).tolist() == [0, 2]


def _planted(out_f, in_f, rank, seed):
    g = torch.Generator().manual_seed(seed)
    q1, _ = torch.linalg.qr(torch.randn(out_f, rank, generator=g))
    q2, _ = torch.linalg.qr(torch.randn(in_f, rank, generator=g))
    return q1 @ q2.t() * 0.01  # rank ``rank``, equal singular values


def test_rank_auto_picks_the_planted_rank():
    deltas = {"a": _planted(64, 64, 3, 0), "b": _planted(128, 64, 7, 1), "c": _planted(64, 128, 1, 2)}
    ranks, info = choose_ranks(deltas, energy=0.9)
    assert ranks == {"a": 3, "b": 7, "c": 1}
    assert info["params"] == 3 * 128 + 7 * 192 + 1 * 192
    p1, p2 = svd_factors(deltas["b"], 7)
    torch.testing.assert_close((p1 @ p2).t(), deltas["b"], rtol=0, atol=1e-6)


def test_rank_auto_budget_lowers_ranks_to_fit():
    g = torch.Generator().manual_seed(0)
    deltas = {f"l{i}": torch.randn(32, 32, generator=g) for i in range(3)}
    free, _ = choose_ranks(deltas, energy=0.9)
    budget = sum(free.values()) * 64 // 2
    capped, info = choose_ranks(deltas, energy=0.9, budget=budget)
    assert info["params"] <= budget and info["energy_used"] < 0.9
    assert all(capped[k] <= free[k] for k in free)
