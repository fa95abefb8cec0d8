"""Planner on a tiny model with a synthetic cost table: budgets respected, the objective met, impossible budgets explained."""

from __future__ import annotations

import pytest
from costmodel_testing import tiny_shape

from edgenlp.targets.costmodel import CostModel
from edgenlp.targets.planner import (
    AccuracyModel,
    BudgetError,
    Candidate,
    SearchSpace,
    candidate_shape,
    default_space,
    plan,
    quantize_layer_bits,
)
from edgenlp.targets.target import Budgets, load_target

BASE = tiny_shape((4, 4, 4), (256, 256, 256), vocab=2000)


@pytest.fixture
def setup(synthetic_table):
    host = load_target("host")
    return host, CostModel(host, synthetic_table, host=host, runtime="onnx"), AccuracyModel(baseline=90.0)  # fp32 + int8 measured


def test_plan_respects_budgets_and_the_accuracy_objective_picks_most_accurate(setup):
    """``objective="accuracy"`` with a prior of no spread between tasks (no ties): the most accurate candidate that fits."""
    host, cm, acc = setup
    acc.tolerance = lambda bound=None: 0.0
    free = plan(host, Budgets(seq_len=64, threads=1), cost_model=cm, accuracy_model=acc, shape=BASE,
                space=SearchSpace(bits=("fp32", "int8")), objective="accuracy")
    # nothing to give up without budgets: no predicted loss (a pruning whose measured drop was a gain ties at zero)
    assert free.chosen_point.accuracy == acc.baseline == max(c.accuracy for c in free.considered)
    assert acc.drop(Candidate()) == 0.0 and all(acc.prune_drop(r["method"], r["sparsity"]) >= 0.0 for r in acc.table["prune"])
    lat = [c.prediction.latency_ms for c in free.considered]
    sizes = [c.prediction.size_mb for c in free.considered]
    prev_acc = free.chosen_point.accuracy
    for frac in (0.8, 0.6, 0.45, 0.3):  # tighter and tighter latency and size
        b = Budgets(latency_ms=min(lat) + frac * (max(lat) - min(lat)), size_mb=min(sizes) + frac * (max(sizes) - min(sizes)),
                    memory_mb=1000.0, seq_len=64, threads=1)  # fmt: skip
        p = plan(host, b, cost_model=cm, accuracy_model=acc, shape=BASE, space=SearchSpace(bits=("fp32", "int8")), objective="accuracy")
        pred = p.chosen_point.prediction
        assert pred.latency_ms <= b.latency_ms and pred.size_mb <= b.size_mb and pred.peak_memory_mb <= b.memory_mb
        fitting = [c for c in p.considered if c.fits]
        assert p.chosen_point.accuracy == max(c.accuracy for c in fitting)
        assert all(c.prediction.latency_ms > b.latency_ms or c.prediction.size_mb > b.size_mb for c in p.considered if not c.fits)
        assert p.chosen_point.accuracy <= prev_acc
        prev_acc = p.chosen_point.accuracy
        cand, prediction, drop, fits = p.considered[0]  # unpacks as compress reads it
        assert isinstance(cand, Candidate) and drop >= 0 and fits == (not p.considered[0].violations)
    assert p.chosen != Candidate()
    assert p.estimated is False  # host, measured precisions (fp32, int8 on onnx)


def test_exclude_replans_without_a_failed_candidate(setup):
    host, cm, acc = setup
    b = Budgets(latency_ms=None, size_mb=None, seq_len=32, threads=1)
    first = plan(host, b, cost_model=cm, accuracy_model=acc, shape=BASE)
    second = plan(host, b, cost_model=cm, accuracy_model=acc, shape=BASE, space=SearchSpace(exclude=(first.chosen,)))
    assert second.chosen != first.chosen
    assert first.chosen not in [c.candidate for c in second.considered]
    # a plain list of candidates works as the space too (what compress passes after its own exclusions)
    listed = [c for c in default_space(prune_methods=("fast",), schemes=("int8", "mixed")) if c.embeddings is None]
    third = plan(host, b, cost_model=cm, accuracy_model=acc, shape=BASE, space=listed)
    assert {c.candidate for c in third.considered} == set(listed) and third.chosen in listed


def test_impossible_budget_states_closest_point_per_budget(setup):
    host, cm, acc = setup
    b = Budgets(latency_ms=1e-6, memory_mb=1e-3, size_mb=1e-4, seq_len=64, threads=1)
    with pytest.raises(BudgetError) as err:
        plan(host, b, cost_model=cm, accuracy_model=acc, shape=BASE)
    msg = str(err.value)
    considered = plan(host, Budgets(seq_len=64, threads=1), cost_model=cm, accuracy_model=acc, shape=BASE).considered
    best_lat = min(c.prediction.latency_ms for c in considered)
    for name in ("latency budget 1e-06 ms", "memory budget 0.001 MB", "size budget 0.0001 MB"):
        assert name in msg
    assert f"lowest predicted {best_lat:.3g} ms" in msg
    assert "\n" not in msg
    with pytest.raises(BudgetError, match="smallest predicted drop"):
        plan(host, Budgets(seq_len=64, threads=1), cost_model=cm, accuracy_model=acc, shape=BASE, max_drop=-1.0)


def test_budget_met_only_by_inaccurate_candidates_names_both_sides_of_the_tradeoff(setup):
    host, cm, acc = setup
    considered = plan(host, Budgets(seq_len=64, threads=1), cost_model=cm, accuracy_model=acc, shape=BASE).considered
    accurate = [c for c in considered if c.drop <= 1.0]
    fastest_accurate = min(c.prediction.latency_ms for c in accurate)
    # a latency budget that only candidates predicted to lose more than a point can meet
    budget = fastest_accurate * 0.9
    assert any(c.prediction.latency_ms <= budget for c in considered)
    with pytest.raises(BudgetError) as err:
        plan(host, Budgets(latency_ms=budget, seq_len=64, threads=1), cost_model=cm, accuracy_model=acc, shape=BASE, max_drop=1.0)
    msg = str(err.value)
    assert "within the accuracy bound and the other budgets the fastest is" in msg and f"at {fastest_accurate:.3g} ms" in msg
    smallest = min(c.drop for c in considered if c.prediction.latency_ms <= budget)
    assert f"the smallest predicted drop is {smallest:.2f} points" in msg
    assert "\n" not in msg


def test_candidate_shape_and_accuracy_prior():
    c = Candidate(prune_method="cofi", sparsity=0.5, bits="int8", embeddings="int8", trim_vocab=True)
    s = candidate_shape(BASE, c)
    assert s.heads == (2, 2, 2) and s.ffn == (128, 128, 128) and s.vocab_size == 1000
    assert candidate_shape(BASE, c, trimmed_vocab_size=700).vocab_size == 700
    acc = AccuracyModel()
    drops = [acc.drop(Candidate(prune_method="cofi", sparsity=s)) for s in (0.2, 0.4, 0.6, 0.8, 0.9)]
    assert drops == sorted(drops) and drops[0] > 0
    assert acc.drop(Candidate(bits="int4")) >= acc.drop(Candidate(bits="int8")) > acc.drop(Candidate())  # fewer bits never better
    assert acc.drop(Candidate(embeddings="int4")) >= acc.drop(Candidate(embeddings="int8")) > acc.drop(Candidate())
    refreshed = acc.with_measured([{"prune_method": "cofi", "sparsity": 0.4, "drop": 0.1}, {"bits": "int8", "drop": 0.0}])
    assert refreshed.drop(Candidate(prune_method="cofi", sparsity=0.4)) == pytest.approx(0.1)
    assert refreshed.drop(Candidate(bits="int8")) == 0.0
    with pytest.raises(ValueError):
        Candidate(prune_method="cofi", sparsity=0.0)
    with pytest.raises(ValueError):
        Candidate(bits=("int8", "int3"))
    assert Candidate.from_dict(c.to_dict()) == c


def test_mixed_bits_and_quantize_layer_bits():
    c = Candidate(prune_method="fast", sparsity=0.3, bits="mixed")
    lb = dict(quantize_layer_bits(c, 3))
    assert lb["layers.0.query"] == 8 and lb["layers.1.ffn_in"] == 4 and lb["layers.2.attn_out"] == 8 and lb["classifier"] == 8
    assert set(dict(quantize_layer_bits(Candidate(bits="int4"), 2)).values()) == {4}
    assert dict(quantize_layer_bits(Candidate(), 2))["pooler"] == 32
