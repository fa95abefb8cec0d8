"""The exit and token decisions (edgenlp.dynamic.rules), against hand computations, and the spec/config checks."""

from __future__ import annotations

import math

import numpy as np
import pytest

from edgenlp.dynamic.config import DynamicConfig
from edgenlp.dynamic.rules import ExitState, check_threshold, confidence, exit_fires, keep_count, keep_tokens
from edgenlp.dynamic.spec import DynamicSpec


def test_maxprob_and_entropy_by_hand():
    logits = np.array([2.0, 0.0, 0.0], dtype=np.float32)
    p = np.exp([2.0, 0.0, 0.0]) / np.exp([2.0, 0.0, 0.0]).sum()
    assert confidence("maxprob", logits) == pytest.approx(p.max(), abs=1e-12)
    assert confidence("entropy", logits) == pytest.approx(-(p * np.log(p)).sum() / math.log(3), abs=1e-12)
    assert confidence("entropy", np.zeros(4)) == pytest.approx(1.0)  # uniform: normalized entropy 1
    # maxprob stops at >= threshold, entropy at <= threshold
    m = confidence("maxprob", logits)
    assert ExitState("maxprob", m).fires(logits) and not ExitState("maxprob", m + 1e-9).fires(logits)
    h = confidence("entropy", logits)
    assert ExitState("entropy", h).fires(logits) and not ExitState("entropy", h - 1e-9).fires(logits)


def test_patience_counts_consecutive_agreeing_exits():
    a, b = [3.0, 0.0], [0.0, 3.0]
    assert exit_fires("patience", 2, [a, b, b, a]) == 2  # b, b: the second b is the 2nd agreeing exit in a row
    assert exit_fires("patience", 3, [a, b, b, a, a]) is None
    assert exit_fires("patience", 1, [b, a]) == 0
    assert exit_fires("patience", 2, [[1.0, 1.0], [1.0, 1.0]]) == 1  # ties: argmax is the lower index both times


def test_keep_tokens_threshold_keeps_first_and_last_and_order():
    imp = np.array([0.1, 2.0, 0.5, 1.5, 0.2], dtype=np.float32)
    assert keep_tokens(imp, mode="ltp", threshold=1.0).tolist() == [0, 1, 3, 4]
    assert keep_tokens(imp, mode="ltp", threshold=10.0).tolist() == [0, 4]
    assert keep_tokens(imp, mode="ltp", threshold=0.0).tolist() == [0, 1, 2, 3, 4]
    assert keep_tokens(imp, mode="ltp", threshold=0.5).tolist() == [0, 1, 2, 3, 4]  # >= keeps equality


def test_keep_ratio_counts_and_ties():
    assert [keep_count(n, 0.5) for n in (2, 3, 4, 7, 10)] == [2, 2, 2, 4, 5]
    assert keep_count(10, 1.0) == 10 and keep_count(3, 0.01) == 2 and keep_count(1, 0.5) == 1
    imp = np.array([0.0, 1.0, 1.0, 1.0, 0.5, 0.0], dtype=np.float32)
    # 6 tokens at 0.5 -> 3 kept: first and last, then the earliest of the tied 1.0s
    assert keep_tokens(imp, mode="keep", ratio=0.5).tolist() == [0, 1, 5]
    assert keep_tokens(imp, mode="keep", ratio=1.0).tolist() == list(range(6))
    assert keep_tokens(imp[:2], mode="keep", ratio=0.1).tolist() == [0, 1]


@pytest.mark.parametrize("rule, bad", [("maxprob", 1.5), ("maxprob", -0.1), ("entropy", 2.0), ("patience", 0),
                                       ("patience", 2.5), ("patience", 7)])
def test_thresholds_out_of_range_are_refused(rule, bad):
    with pytest.raises(ValueError, match="must be"):
        check_threshold(rule, bad, num_exits=6)


def test_config_and_spec_validation():
    assert DynamicConfig(exits=(4, 2, 2)).exits == (2, 4)
    assert DynamicConfig().exit_layers(6) == (1, 2, 3, 4, 5, 6)
    assert DynamicConfig(exits=(), tokens="ltp").exit_layers(6) == (6,)
    with pytest.raises(ValueError, match="exit on layer 9"):
        DynamicConfig(exits=(2, 9)).exit_layers(6)
    for bad in (dict(exits=(0,)), dict(rule="magic"), dict(threshold=1.5), dict(tokens="keep", keep_ratio=0.0),
                dict(keep_ratio=0.5), dict(exits=(), tokens="none"), dict(max_drop=-1),
                dict(tokens="ltp", joint_token_drop=3.0), dict(joint=True, joint_token_drop=3.0),
                dict(joint=True, tokens="keep", keep_ratio=0.5, joint_token_drop=3.0),
                dict(joint=True, tokens="ltp", joint_token_drop=0.0), dict(joint=True, tokens="ltp", joint_token_drop=True)):
        with pytest.raises(ValueError):
            DynamicConfig(**bad)
    assert DynamicConfig(exits=(), tokens="ltp", joint=True, joint_token_drop=3.0).joint_token_drop == 3.0
    with pytest.raises(ValueError, match="exits must be ascending"):
        DynamicSpec(num_layers=3, exits=(1, 2))
    with pytest.raises(ValueError, match="token_thresholds"):
        DynamicSpec(num_layers=3, exits=(3,), tokens="ltp", token_layers=(1, 2), token_thresholds=(1.0, None, None))
    spec = DynamicSpec(num_layers=4, exits=(2, 4), tokens="keep", token_layers=(1, 3), keep_ratio=0.5)
    assert spec.segment_layers() == [(0,), (1,), (2,), (3,)]
    assert DynamicSpec(num_layers=4, exits=(2, 4)).segment_layers() == [(0, 1), (2, 3)]
    assert DynamicSpec.from_dict(spec.to_dict()) == spec


def test_recipe_step_round_trips():
    from edgenlp.recipe import Step, recipe_from_list, recipe_to_list

    step = Step("dynamic", DynamicConfig(exits=(2, 4), rule="patience", threshold=2), {"spec": {}})
    assert recipe_from_list(recipe_to_list([step])) == (step,)


def _reference_exit(rule, threshold, exits):
    """A second, independent numpy statement of the three exit rules (batched softmax, scipy-free entropy)."""
    z = np.asarray(exits, dtype=np.float64)
    p = np.exp(z - z.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    if rule == "maxprob":
        hits = p.max(1) >= threshold
    elif rule == "entropy":
        h = -np.where(p > 0, p * np.log(np.where(p > 0, p, 1.0)), 0.0).sum(1) / np.log(z.shape[1])
        hits = h <= threshold
    else:
        labels = z.argmax(1)
        run = [1]
        for a, b in zip(labels[:-1], labels[1:]):
            run.append(run[-1] + 1 if a == b else 1)
        hits = np.asarray(run) >= threshold
    where = np.flatnonzero(hits)
    return int(where[0]) if where.size else None


@pytest.mark.parametrize("rule", ["maxprob", "entropy", "patience"])
def test_exit_rules_equal_a_numpy_reference_on_random_logits(rule):
    rng = np.random.default_rng(7)
    fired = set()
    for trial in range(300):
        exits, labels = int(rng.integers(1, 7)), int(rng.integers(2, 6))
        logits = (rng.normal(size=(exits, labels)) * rng.uniform(0.2, 4.0)).astype(np.float32)
        if rule == "patience":
            threshold = int(rng.integers(1, exits + 1))
            if trial % 3 == 0:  # agreeing streaks happen
                logits[:, 0] += 5.0
        else:
            threshold = float(rng.uniform(0.3, 1.0) if rule == "maxprob" else rng.uniform(0.0, 0.9))
        got = exit_fires(rule, threshold, list(logits))
        assert got == _reference_exit(rule, threshold, logits), (rule, threshold, logits)
        fired.add(got is None)
    assert fired == {True, False}  # both outcomes were exercised


@pytest.mark.parametrize("mode", ["ltp", "keep"])
def test_first_and_last_tokens_are_never_dropped(mode):
    """[CLS] (first) and [SEP] (last) stay whatever their importance; kept indices ascend."""
    rng = np.random.default_rng(3)
    for _ in range(200):
        n = int(rng.integers(1, 40))
        imp = rng.uniform(0, 2, size=n).astype(np.float32)
        imp[0] = imp[-1] = 0.0  # the least important of all
        threshold, ratio = float(rng.uniform(0, 3)), float(rng.uniform(0.01, 1.0))
        keep = keep_tokens(imp, mode=mode, threshold=threshold, ratio=ratio)
        assert keep[0] == 0 and keep[-1] == n - 1 and np.all(np.diff(keep) > 0)
        middle = set(range(1, n - 1))
        if mode == "ltp":
            assert set(keep) & middle == {i for i in middle if imp[i] >= np.float32(threshold)}
        else:
            assert len(keep) == keep_count(n, ratio)
