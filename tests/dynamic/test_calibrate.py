"""Calibration: the chosen thresholds keep the validation drop within --max-drop, and dev is never read."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from edgenlp.dynamic.calibrate import Point, choose, exit_curve, fits, static_cost
from edgenlp.dynamic.model import MaskedTrace
from edgenlp.models.encoder import EncoderShape


def _trace(rng, n=40, labels=3):
    """Two exits (layers 1 and 2): the first right on ~70% of the rows, the last always right."""
    gold = rng.integers(0, labels, n)
    first = rng.normal(size=(n, labels)).astype(np.float32)
    right = rng.random(n) < 0.7
    first[np.arange(n), np.where(right, gold, (gold + 1) % labels)] += rng.uniform(0.0, 4.0, n).astype(np.float32)
    last = np.eye(labels, dtype=np.float32)[gold] * 5
    return MaskedTrace({1: first, 2: last}, np.full((n, 2), 12)), gold


@pytest.mark.parametrize("rule", ["maxprob", "entropy", "patience"])
@pytest.mark.parametrize("max_drop", [0.0, 5.0, 15.0, 100.0])
def test_choose_is_the_cheapest_threshold_within_the_drop(rule, max_drop):
    shape = EncoderShape(family="bert", vocab_size=100, hidden=32, heads=(2, 2), head_dim=16, ffn=(64, 64), max_positions=64)
    trace, gold = _trace(np.random.default_rng(0))
    points = exit_curve(rule, trace, gold, (1, 2), shape=shape, static_accuracy=1.0,
                        static_cost=static_cost(shape, trace.tokens[:, 0], 3))
    point, feasible = choose(points, max_drop)
    assert feasible  # the last exit alone (every row to the end) loses nothing
    assert point.drop <= max_drop + 1e-9
    assert all(p.cost >= point.cost for p in points if p.drop <= max_drop + 1e-9)
    # the drop is what the threshold does to these rows, counted here by hand
    stops_early = {"maxprob": lambda z: np.exp(z).max(1) / np.exp(z).sum(1) >= point.threshold,
                   "entropy": lambda z: _entropy(z) <= point.threshold,
                   "patience": lambda z: np.full(len(z), point.threshold <= 1)}[rule](trace.exit_logits[1].astype(np.float64))
    preds = np.where(stops_early, trace.exit_logits[1].argmax(1), trace.exit_logits[2].argmax(1))
    assert point.drop == pytest.approx(100 * (1.0 - (preds == gold).mean()), abs=1e-9)
    if max_drop >= 100.0 and rule != "patience":
        assert point.mean_exit_layer == 1.0  # everything may stop at the first exit


def test_the_drop_standard_error_is_paired_against_the_last_exit():
    """Each point's ``drop_se``: the standard error of the per-row difference (last exit right, minus the exit taken
    right), counted by hand, on a trace whose last exit is wrong on some rows (else it is the unpaired one)."""
    shape = EncoderShape(family="bert", vocab_size=100, hidden=32, heads=(2, 2), head_dim=16, ffn=(64, 64), max_positions=64)
    rng = np.random.default_rng(1)
    trace, gold = _trace(rng, n=200)
    wrong = rng.random(len(gold)) < 0.2
    trace.exit_logits[2][wrong] = np.roll(trace.exit_logits[2][wrong], 1, axis=1)
    last_right = trace.exit_logits[2].argmax(1) == gold
    points = exit_curve("maxprob", trace, gold, (1, 2), shape=shape, static_accuracy=float(last_right.mean()),
                        static_cost=static_cost(shape, trace.tokens[:, 0], 3))
    assert any(p.drop_se > 0 for p in points)
    p1 = np.exp(trace.exit_logits[1].astype(np.float64))
    conf = p1.max(1) / p1.sum(1)
    for p in points:
        early = conf >= p.threshold
        right = np.where(early, trace.exit_logits[1].argmax(1), trace.exit_logits[2].argmax(1)) == gold
        diff = last_right.astype(float) - right
        n = len(diff)
        assert p.drop_se == pytest.approx(100 * np.sqrt(((diff - diff.mean()) ** 2).sum() / n / n), abs=1e-6)


def test_the_drop_standard_error_pairs_against_the_static_model_when_given():
    """With token pruning in the trace its last exit is not the static model: ``reference_right`` (the static model
    right per row) is what the drop is paired against; the trace's last exit is only the default."""
    shape = EncoderShape(family="bert", vocab_size=100, hidden=32, heads=(2, 2), head_dim=16, ffn=(64, 64), max_positions=64)
    rng = np.random.default_rng(2)
    trace, gold = _trace(rng, n=200)
    static_right = rng.random(len(gold)) < 0.9  # a static model right on other rows than the pruned trace's last exit
    cost = static_cost(shape, trace.tokens[:, 0], 3)
    (p,) = exit_curve("maxprob", trace, gold, (1, 2), shape=shape, static_accuracy=float(static_right.mean()),
                      static_cost=cost, thresholds=[0.9], reference_right=static_right)
    (default,) = exit_curve("maxprob", trace, gold, (1, 2), shape=shape, static_accuracy=float(static_right.mean()),
                            static_cost=cost, thresholds=[0.9])
    p1 = np.exp(trace.exit_logits[1].astype(np.float64))
    right = np.where(p1.max(1) / p1.sum(1) >= 0.9, trace.exit_logits[1].argmax(1), trace.exit_logits[2].argmax(1)) == gold
    diff = static_right.astype(float) - right
    assert p.drop_se == pytest.approx(100 * diff.std() / np.sqrt(len(diff)), abs=1e-6) and p.drop_se != default.drop_se


def _entropy(z):
    p = np.exp(z - z.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    return -(p * np.log(p)).sum(1) / np.log(z.shape[1])


class _Forbidden(tuple):
    """A split column that fails when read (its length may be asked for)."""

    def __iter__(self):
        raise AssertionError("dev was read")

    def __getitem__(self, i):
        raise AssertionError("dev was read")


def test_calibration_uses_held_out_training_rows_never_dev_and_keeps_the_drop(tiny_ft_dir, dyn_task_dir):
    """make_dynamic on a task whose dev split cannot be read; the chosen setting's drop, recomputed through the
    segment runner on the same held-out rows, is within max_drop (0 points: no row may change)."""
    from edgenlp.data.tasks import load_task
    from edgenlp.dynamic.api import make_dynamic, split_rows
    from edgenlp.dynamic.config import DynamicConfig
    from edgenlp.models.registry import load_model
    from edgenlp.run.dynamic import eager_runner

    model, info = load_model(tiny_ft_dir)
    task = load_task(dyn_task_dir)
    poisoned = replace(task, dev=replace(task.dev, texts=_Forbidden(task.dev.texts), labels=_Forbidden(task.dev.labels)))
    config = DynamicConfig(exits=(1, 2), tokens="keep", keep_ratio=0.8, max_drop=0.0, val_rows=24, train_limit=40,
                           epochs=2, max_seq_len=32, batch_size=16)
    res = make_dynamic(model, info, poisoned, config, device="cpu")
    assert res.report["validation"]["chosen"]["drop"] <= 0.0 + 1e-9
    _, val, _ = split_rows(task, info, config)
    texts = [task.train.texts[i] for i in val]
    gold = np.asarray(task.train.take(val).label_ids(res.model.labels))
    runner = eager_runner(res.model, info=info, max_seq_len=32)
    static = runner.predict_logits(texts, static=True).argmax(1)
    dynamic = runner.predict_details(texts)
    drop = 100 * ((static == gold).mean() - (np.array([p.logits.argmax() for p in dynamic]) == gold).mean())
    assert drop <= config.max_drop + 1e-9
    assert res.report["validation"]["static_accuracy"] == pytest.approx((static == gold).mean())


def test_choose_keeps_margin_se_standard_errors_to_spare():
    """A point fits when drop + margin_se x drop_se is within max_drop: the cheap point measured at 0.4 +- 0.3 fits a
    0.5-point budget alone, not with one standard error to spare; the dearer 0.2 +- 0.1 does."""
    cheap = Point(0.6, 0.900, 0.4, 0.3, 1.2, drop_se=0.3)
    dearer = Point(0.8, 0.902, 0.2, 0.6, 2.0, drop_se=0.1)
    static = Point(1.0, 0.904, 0.0, 1.0, 3.0, drop_se=0.0)
    assert choose([cheap, dearer, static], 0.5) == (cheap, True)
    assert choose([cheap, dearer, static], 0.5, 1.0) == (dearer, True)
    assert choose([cheap, dearer, static], 0.5, 4.0) == (static, True)
    assert choose([cheap, dearer], 0.1, 1.0) == (dearer, False)  # none fits: the most accurate (ties: the cheaper)
    assert fits(0.4, 0.1, 0.5, 1.0) and not fits(0.4, 0.11, 0.5, 1.0)
