"""The Learner schedule: unset Learner knobs follow the task (classes, rows, epochs), deterministically."""

from __future__ import annotations

import pytest

from edgenlp.finetune import FinetuneConfig, LearnerConfig, finetune
from edgenlp.finetune.config import LearnerSchedule, learner_schedule

# (what, classes, steps per epoch, total steps) -> (priming steps, priming lr, bitfit, head lr, probe steps[, rank divisor])
TABLE = [
    ("SST-2, 8,000 rows, 1 epoch", 2, 250, 250, (83, 5e-5, False, None, 0)),
    ("banking77, 1 epoch: 3.7 steps per class, short: probe then a fast head", 77, 282, 282, (94, 5e-5, False, 6.4e-3, 28)),
    ("banking77, 2 epochs: 2/3 of an epoch, not half the run; 7.3 steps per class, short", 77, 282, 564,
     (188, 5e-5, False, 6.4e-3, 28)),
    ("banking77, 3 epochs (its default): 1 epoch; 11 steps per class, short", 77, 282, 846, (282, 5e-5, False, 6.4e-3, 28)),
    ("banking77, 4 epochs: 14.6 steps per class, not short", 77, 282, 1128, (282, 5e-5, False, None, 0)),
    ("154 classes, 4,000 rows, 5 epochs: at most 1 epoch; 4.06 steps per class, short", 154, 125, 625,
     (125, 5e-5, False, 6.4e-3, 12)),
    ("154 classes, 4,000 rows, 2 epochs: 1.6 steps per class, very short: rank hidden / 8", 154, 125, 250,
     (83, 5e-5, False, 6.4e-3, 12, 8)),
    ("the 24-class test task, 10 epochs of 6 steps: 2.5 per class, short", 24, 6, 60, (6, 5e-5, False, 6.4e-3, 1)),
    ("banking77, 2 epochs of 3,000 rows: 188 steps, short", 77, 94, 188, (62, 5e-5, False, 6.4e-3, 9)),
    ("12 steps per class exactly: not short", 10, 40, 120, (40, 5e-5, False, None, 0)),
    ("one step under 12 per class: short", 10, 40, 119, (39, 5e-5, False, 6.4e-3, 4)),
    ("banking77, 3,000 rows, 1 epoch (the ablation): 1.2 per class, very short", 77, 94, 94,
     (31, 5e-5, False, 6.4e-3, 9, 8)),
    ("2 steps per class exactly: rank hidden / 12", 10, 20, 20, (6, 5e-5, False, 6.4e-3, 2, 12)),
    ("one step under 2 per class: rank hidden / 8", 10, 20, 19, (6, 5e-5, False, 6.4e-3, 2, 8)),
    ("max_steps below an epoch: very short", 77, 282, 30, (10, 5e-5, False, 6.4e-3, 3, 8)),
    ("two steps: no room to prime", 2, 10, 2, (0, 5e-5, False, 6.4e-3, 0, 8)),
    ("one step", 2, 1, 1, (0, 5e-5, False, 6.4e-3, 0, 8)),
]


@pytest.mark.parametrize("what, classes, per_epoch, total, want", TABLE, ids=[t[0] for t in TABLE])
def test_schedule_table(what, classes, per_epoch, total, want):
    got = learner_schedule(classes=classes, steps_per_epoch=per_epoch, total_steps=total)
    assert got == LearnerSchedule(*want)
    assert got == learner_schedule(classes=classes, steps_per_epoch=per_epoch, total_steps=total)  # a function of its inputs
    assert got.probe_steps + got.priming_steps < total  # Learner steps always follow probing and priming


@pytest.mark.parametrize("kwargs", [dict(classes=0, steps_per_epoch=1, total_steps=1),
                                    dict(classes=2, steps_per_epoch=0, total_steps=1),
                                    dict(classes=2, steps_per_epoch=1, total_steps=0)])
def test_schedule_rejects_empty_tasks(kwargs):
    with pytest.raises(ValueError, match="must be an integer >= 1"):
        learner_schedule(**kwargs)


def _small(labels):
    """A 2-layer encoder (hidden 64) with the default BERT vocabulary, as in test_trainer."""
    from edgenlp.models.encoder import EncoderClassifier, EncoderShape, ModelInfo
    from edgenlp.models.registry import DEFAULT_TOKENIZER, default_vocab_file

    shape = EncoderShape.uniform(num_layers=2, hidden=64, num_heads=4, ffn=128, max_positions=64, dropout=0.1)
    model = EncoderClassifier(shape, len(labels), labels=tuple(labels)).init_weights(std=0.02, seed=0)
    return model, ModelInfo("small", "test", shape, False, str(default_vocab_file()), dict(DEFAULT_TOKENIZER))


@pytest.mark.parametrize("learner, epochs, priming", [
    (LearnerConfig(rank=2), 1, 2),  # 6 steps: a third of them prime (today's 1 epoch would not fit)
    (LearnerConfig(rank=2), 3, 6),  # 18 steps: 1 epoch
    (LearnerConfig(rank=2, priming_epochs=0.5), 3, 3),  # what is set wins
], ids=["1-epoch", "3-epochs", "explicit"])
def test_trainer_follows_the_schedule(learner, epochs, priming, synth_task):
    cfg = FinetuneConfig(method="learner", epochs=epochs, batch_size=32, learner=learner)
    report = finetune(*_small(synth_task.labels), synth_task, cfg).report  # 192 rows / 32 = 6 steps per epoch
    want = learner_schedule(classes=2, steps_per_epoch=6, total_steps=6 * epochs)
    assert report["learner"]["schedule"] == want.to_dict()
    assert report["learner"]["priming_steps"] == priming
    probe = learner.probe_steps_for(6, want)
    assert [p["first_step"] for p in report["phases"]] == ([0] if probe else []) + [probe, probe + priming]
    assert report["lr"]["priming"] == want.priming_lr and report["learner"]["bitfit"] == want.bitfit


@pytest.mark.parametrize("max_steps, learner, want", [
    (3, LearnerConfig(), 64 // 8),  # 1.5 steps per class: very short
    (4, LearnerConfig(), 64 // 12),  # 2 per class: the usual rank
    (3, LearnerConfig(rank=2), 2),  # what is set wins
    (3, LearnerConfig(ranks=(("layers.0.*", 3),)), None),  # a pattern wins where it matches; the rest follow the budget
], ids=["very-short", "on-the-line", "set", "pattern"])
def test_an_unset_rank_follows_the_budget(max_steps, learner, want, synth_task):
    cfg = FinetuneConfig(method="learner", epochs=1, batch_size=32, max_steps=max_steps, learner=learner)
    report = finetune(*_small(synth_task.labels), synth_task, cfg).report  # 2 classes, hidden 64
    ranks = report["learner"]["ranks"]
    assert report["learner"]["schedule"]["rank_divisor"] == (8 if max_steps < 4 else 12)
    if want is None:
        assert {r for p, r in ranks.items() if p.startswith("layers.0.")} == {3}
        assert {r for p, r in ranks.items() if not p.startswith("layers.0.")} == {64 // 8}
    else:
        assert set(ranks.values()) == {want}
