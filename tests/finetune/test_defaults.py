"""The defaults converge, the head trains at its own rate, early stopping keeps the best weights.

The convergence check uses a synthetic task with many classes (one keyword per
class among filler words) whose dev split is its training split, so dev
accuracy is training accuracy; every method trains a fresh head on a body that
already tells the keywords apart, with every setting at its default (learning
rates, groups, epochs from the training-set size, early stopping).
"""

from __future__ import annotations

import random

import pytest
import torch
from edgenlp_testing import write_task_dir

from edgenlp.finetune import FinetuneConfig, finetune
from edgenlp.finetune import trainer as trainer_mod
from edgenlp.finetune.config import (AUTO_MAX_EPOCHS, DEFAULT_HEAD_LR, DEFAULT_LR, METHODS, SHORT_HEAD_LR,
                                     SHORT_STEPS_PER_CLASS, LearnerConfig, short_budget)
from edgenlp.finetune.methods import METHOD_TYPES, head_parameters

# One single-wordpiece keyword per class.
KEYWORDS = ("red", "blue", "green", "black", "white", "brown", "pink", "gold", "dog", "cat", "horse", "bird",
            "fish", "lion", "tiger", "bear", "apple", "bread", "milk", "rice", "cake", "tea", "wine", "soup")
FILLER = ("the", "a", "was", "and", "very", "there", "it", "of", "some", "on")
PRETRAIN_STEPS = 200


def small_model(labels=("neg", "pos"), seed=0):
    """A 2-layer encoder (hidden 64) with the default BERT vocabulary, as in test_trainer."""
    from edgenlp.models.encoder import EncoderClassifier, EncoderShape, ModelInfo
    from edgenlp.models.registry import DEFAULT_TOKENIZER, default_vocab_file

    shape = EncoderShape.uniform(num_layers=2, hidden=64, num_heads=4, ffn=128, max_positions=64, dropout=0.1)
    model = EncoderClassifier(shape, len(labels), labels=tuple(labels)).init_weights(std=0.02, seed=seed)
    return model, ModelInfo("small", "test", shape, False, str(default_vocab_file()), dict(DEFAULT_TOKENIZER))


def keyword_rows(per_class: int, seed: int) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    rows = []
    for label, word in enumerate(KEYWORDS):
        for _ in range(per_class):
            words = [rng.choice(FILLER) for _ in range(rng.randint(2, 5))]
            words.insert(rng.randint(0, len(words)), word)
            rows.append((" ".join(words), f"c{label:02d}"))
    rng.shuffle(rows)
    return rows


@pytest.fixture(scope="module")
def many_class_task(tmp_path_factory):
    from edgenlp.data.tasks import load_task

    rows = keyword_rows(8, seed=3)  # 24 classes x 8 rows
    return load_task(write_task_dir(tmp_path_factory.mktemp("kw"), train=rows, dev=rows))


@pytest.fixture(scope="module")
def pretrained_body(tmp_path_factory):
    """Encoder weights that already tell the keywords apart, as a pretrained body tells words apart.

    Trained at a high rate on keyword identity under other rows and another
    label order; the fine-tuning tests then put a fresh random head on it, the
    situation the defaults are for (a random 64-wide encoder is not).
    """
    from edgenlp.data.tasks import load_task

    rows = [(text, f"k{(int(label[1:]) * 7) % len(KEYWORDS):02d}") for text, label in keyword_rows(8, seed=11)]
    task = load_task(write_task_dir(tmp_path_factory.mktemp("pre"), train=rows, dev=rows))
    model, info = small_model(labels=task.labels, seed=1)
    cfg = FinetuneConfig(method="full", epochs=40, max_steps=PRETRAIN_STEPS, lr=3e-3, head_lr=3e-3, early_stop=False,
                         threads=1)  # module scope: set up before the per-test one_thread fixture
    before = torch.get_num_threads()
    try:
        result = finetune(model, info, task, cfg)
    finally:
        torch.set_num_threads(before)
    assert result.report["dev"]["accuracy"] >= 0.95, "the stand-in for pretraining did not learn the keywords"
    return {k: v for k, v in result.model.state_dict().items() if not k.startswith("classifier.")}


def _model_for(task, body, seed=0):
    model, info = small_model(labels=task.labels, seed=seed)  # fresh random classifier
    missing, unexpected = model.load_state_dict(body, strict=False)
    assert set(missing) == {"classifier.weight", "classifier.bias"} and not unexpected
    return model, info


@pytest.mark.parametrize("method", METHODS)
def test_defaults_reach_95_percent_train_accuracy_for_every_method(method, many_class_task, pretrained_body):
    config = FinetuneConfig(method=method)  # every setting at its default: 192 rows -> 10 epochs of 6 steps
    result = finetune(*_model_for(many_class_task, pretrained_body), many_class_task, config)
    acc = result.report["dev"]["accuracy"]  # dev is the training set
    assert result.report["steps_planned"] == AUTO_MAX_EPOCHS * 6
    assert acc >= 0.95, f"{method}: train accuracy {acc:.3f} after {result.report['steps']} steps with the defaults"
    # every method's head rate follows the task: 60 steps for 24 classes is a short budget
    assert short_budget(classes=len(many_class_task.labels), total_steps=60)
    assert result.report["lr"]["head"] == SHORT_HEAD_LR and result.report["lr"]["body"] == DEFAULT_LR[method]
    assert result.report["config"]["resolved_head_lr"] == SHORT_HEAD_LR  # the report records the rate the run used


@pytest.mark.parametrize("method", METHODS)
def test_every_methods_head_rate_follows_the_budget_unless_set(method):
    line = SHORT_STEPS_PER_CLASS * 5
    for total, head_lr, want in ((line - 1, None, SHORT_HEAD_LR), (line, None, DEFAULT_HEAD_LR), (line - 1, 7e-3, 7e-3)):
        model, _ = small_model(labels=tuple(f"c{i}" for i in range(5)))
        cfg = FinetuneConfig(method=method, head_lr=head_lr)
        assert METHOD_TYPES[method](model, cfg, total_steps=total, steps_per_epoch=10).head_lr == want, (total, head_lr)


def test_head_at_the_body_rate_does_not_converge_in_the_same_steps(many_class_task, pretrained_body):
    """The check above can fail: with the head at the body's 5e-5 (the old default) full fine-tuning stays low."""
    config = FinetuneConfig(method="full", head_lr=DEFAULT_LR["full"])
    result = finetune(*_model_for(many_class_task, pretrained_body), many_class_task, config)
    assert result.report["dev"]["accuracy"] < 0.95


@pytest.mark.parametrize("method", METHODS)
def test_head_learning_rate_applies_to_head_parameters_only(method):
    model, _ = small_model(labels=tuple(f"c{i}" for i in range(5)))
    cfg = FinetuneConfig(method=method, lr=3e-4, head_lr=7e-3,
                         **({"learner": LearnerConfig(rank=2, priming_steps=2, priming_lr=1e-5)} if method == "learner" else {}))
    m = METHOD_TYPES[method](model, cfg, total_steps=20, steps_per_epoch=10)
    names = {id(p): n for n, p in model.named_parameters()}
    for phase in m.phases():
        groups = phase.enter()
        names.update({id(p): n for n, p in model.named_parameters()})  # Learners appear when a phase adds them
        head = {id(p) for p in head_parameters(model) if p.requires_grad}
        assert head, f"{method}/{phase.name}: the head does not train"
        by_name = {}
        for g in groups:
            by_name.setdefault(g["name"], set()).update(id(p) for p in g["params"])
            expected = {"head": 7e-3, "body": 3e-4, "priming": 1e-5}[g["name"]]
            assert g["base_lr"] == expected, (method, phase.name, g["name"])
        assert by_name["head"] == head, f"{method}/{phase.name}: head group {sorted(names[i] for i in by_name['head'])}"
        others = set().union(*(v for k, v in by_name.items() if k != "head"))
        assert not others & head
        assert all(names[i].startswith(("classifier.", "pooler.")) for i in by_name["head"])
        assert not any(names[i].startswith(("classifier.", "pooler.")) for i in others)


@pytest.fixture
def scripted_dev(monkeypatch):
    """Dev accuracy follows a script; every best-checkpoint snapshot the trainer takes is recorded."""
    from edgenlp.finetune import methods as methods_mod

    state = {"script": [], "snapshots": []}
    real_snapshot = methods_mod.plain_state_dict

    def fake_evaluate(model, data, *, num_labels, **kw):
        return {"accuracy": state["script"].pop(0)}

    def recording_snapshot(model):
        sd = real_snapshot(model)
        state["snapshots"].append({k: v.clone() for k, v in sd.items()})
        return sd

    monkeypatch.setattr(trainer_mod, "evaluate", fake_evaluate)
    monkeypatch.setattr(methods_mod, "plain_state_dict", recording_snapshot)
    return state


def _equal(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("method", ["full", "learner", "far"])
def test_early_stopping_restores_the_best_checkpoint(method, scripted_dev, synth_task):
    scripted_dev["script"] = [0.50, 0.90, 0.60, 0.40, 0.95, 0.95]
    extra = {"learner": LearnerConfig(rank=2, priming_steps=3)} if method == "learner" else {}
    cfg = FinetuneConfig(method=method, epochs=6, batch_size=32, patience=2, lr=1e-3, **extra)
    result = finetune(*small_model(), synth_task, cfg)
    es = result.report["early_stop"]
    assert es == {"enabled": True, "patience": 2, "stopped_early": True, "best_epoch": 2, "epochs_run": 4}
    assert result.report["dev"]["accuracy"] == 0.90 and result.report["dev_last_epoch"]["accuracy"] == 0.40
    snaps = scripted_dev["snapshots"]
    assert len(snaps) == 2  # epochs 1 and 2 improved
    final = result.model.state_dict()
    assert _equal(final, snaps[1]), "the returned weights are not the saved best (epoch 2)"
    assert not _equal(final, snaps[0])


@pytest.mark.parametrize("method", ["full", "learner", "far"])
def test_best_last_epoch_is_the_merged_model(method, scripted_dev, synth_task):
    """When the last epoch is best, the snapshot taken then equals the finished (merged / folded) model."""
    scripted_dev["script"] = [0.5, 0.6, 0.7]
    extra = {"learner": LearnerConfig(rank=2, priming_steps=3)} if method == "learner" else {}
    cfg = FinetuneConfig(method=method, epochs=3, batch_size=32, lr=1e-3, **extra)
    result = finetune(*small_model(), synth_task, cfg)
    assert result.report["early_stop"]["best_epoch"] == 3
    final = result.model.state_dict()
    last = scripted_dev["snapshots"][-1]
    assert final.keys() == last.keys()
    for k in final:
        torch.testing.assert_close(final[k], last[k], rtol=0, atol=1e-6, msg=k)


def test_no_early_stop_keeps_the_last_epoch(scripted_dev, synth_task):
    scripted_dev["script"] = [0.50, 0.90, 0.60, 0.40]
    cfg = FinetuneConfig(method="full", epochs=4, batch_size=32, early_stop=False)
    result = finetune(*small_model(), synth_task, cfg)
    assert result.report["early_stop"]["epochs_run"] == 4 and result.report["early_stop"]["best_epoch"] == 4
    assert result.report["dev"]["accuracy"] == 0.40 and scripted_dev["snapshots"] == []


def test_auto_epochs_fit_the_training_set(synth_task):
    from edgenlp.finetune.config import AUTO_MAX_EPOCHS, AUTO_MIN_STEPS, auto_epochs

    assert auto_epochs(9003, 32) == 3  # banking77: 282 steps per epoch
    assert auto_epochs(67349, 32) == 1  # all of SST-2
    assert auto_epochs(100, 32) == AUTO_MAX_EPOCHS
    for rows in (50, 640, 4000, 9003, 20000, 10**6):
        e = auto_epochs(rows, 32)
        assert 1 <= e <= AUTO_MAX_EPOCHS and (e == AUTO_MAX_EPOCHS or e * -(-rows // 32) >= AUTO_MIN_STEPS)
    report = finetune(*small_model(), synth_task, FinetuneConfig(method="bitfit", batch_size=32, early_stop=False)).report
    assert report["epochs_planned"] == AUTO_MAX_EPOCHS and report["steps"] == AUTO_MAX_EPOCHS * 6


def test_finetune_json_records_the_rates_used_per_group(synth_task):
    cfg = FinetuneConfig(method="learner", epochs=2, batch_size=32, lr=4e-4, head_lr=3e-3,
                         learner=LearnerConfig(rank=2, priming_steps=2, priming_lr=2e-5))
    report = finetune(*small_model(), synth_task, cfg).report
    assert report["lr"] == {"priming": 2e-5, "body": 4e-4, "head": 3e-3}
    # the synthetic task is short for its classes, so a head-only probe comes first (learner_schedule)
    assert [[g["name"] for g in p["lr_groups"]] for p in report["phases"]] == [["head"], ["priming", "body", "head"], ["body", "head"]]
    assert {g["name"]: g["lr"] for g in report["phases"][0]["lr_groups"]} == {"head": 3e-3}  # the set head rate wins
    assert report["config"]["resolved_head_lr"] == 3e-3 and report["device"] == "cpu"


def test_cuda_device_without_cuda_is_a_user_error(synth_task):
    from edgenlp.errors import EdgeNLPError

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(EdgeNLPError, match="no CUDA device"):
        finetune(*small_model(), synth_task, FinetuneConfig(max_steps=1), device="cuda")


def test_a_validation_split_decides_early_stopping_and_dev_is_scored_once(monkeypatch, synth_task):
    """With val_rows, every per-epoch score (and so the epoch kept) comes from rows held out of train; dev is
    evaluated exactly once, on the weights returned, and its score does not choose anything."""
    seen: list[int] = []
    val_script = [0.50, 0.90, 0.60, 0.40, 0.95, 0.95]  # the epoch kept follows these
    dev_rows = len(synth_task.dev)

    def fake_evaluate(model, data, *, num_labels, **kw):
        seen.append(len(data))
        return {"accuracy": 0.11 if len(data) == dev_rows else val_script.pop(0)}

    monkeypatch.setattr(trainer_mod, "evaluate", fake_evaluate)
    cfg = FinetuneConfig(method="full", epochs=6, batch_size=32, patience=2, lr=1e-3, val_rows=40)
    r = finetune(*small_model(), synth_task, cfg).report
    assert seen == [40, 40, 40, 40, dev_rows], seen  # 4 epochs on validation, then dev once
    assert r["early_stop"]["best_epoch"] == 2 and r["early_stop"]["epochs_run"] == 4
    assert r["validation"]["accuracy"] == 0.90 and [e["accuracy"] for e in r["validation_per_epoch"]] == [0.5, 0.9, 0.6, 0.4]
    assert r["dev"] == {"accuracy": 0.11} and "dev_per_epoch" not in r
    assert r["task"]["validation_rows"] == 40 and r["task"]["early_stop_watches"] == "validation"
    assert r["task"]["train_rows_used"] == len(synth_task.train) - 40  # the held-out rows never train
    assert r["config"]["val_rows"] == 40 and FinetuneConfig.from_dict(r["config"]).val_rows == 40
    with pytest.raises(ValueError, match="val_rows"):
        FinetuneConfig(val_rows=0)
