"""The training loop and each method's phases, over one table of (method, config) cases."""

from __future__ import annotations

import re

import pytest
import torch
from torch import nn

from edgenlp.finetune import FarConfig, FinetuneConfig, LearnerConfig, finetune
from edgenlp.finetune.methods import METHOD_TYPES
from edgenlp.finetune.trainer import Encoded, collate, load_tokenizer

ATTN = r"layers\.\d+\.(query|key|value|attn_out)\."
TARGET_WEIGHTS = r"(layers\.\d+\.(query|key|value|attn_out|ffn_in|ffn_out)|pooler)\.(weight|bias)$"
HEAD = r"classifier\."
LEARNER = r"\.learner_p[12]$"
BITFIT = r"^(embeddings|layers)\..*(\.bias|norm\.weight)$"  # biases and layer norms outside the head


def _is(*patterns):
    return lambda name: any(re.search(p, name) for p in patterns)


# (case id, config, [(phase name, predicate over parameter names that must get a gradient)])
CASES = [
    ("full", FinetuneConfig(method="full"), [("train", lambda n: True)]),
    ("freeze-ffn", FinetuneConfig(method="freeze-ffn"), [("train", lambda n: not re.search(r"\.ffn_(in|out)\.", n))]),
    ("bitfit", FinetuneConfig(method="bitfit"), [("train", _is(r"\.bias$", HEAD))]),
    ("learner", FinetuneConfig(method="learner", learner=LearnerConfig(rank=4, priming_steps=2)),
     [("priming", _is(LEARNER, HEAD, ATTN + r"base_layer\.")), ("learners", _is(LEARNER, HEAD))]),
    ("learner-no-priming", FinetuneConfig(method="learner", learner=LearnerConfig(rank=4, priming_epochs=0)),
     [("learners", _is(LEARNER, HEAD))]),
    ("learner-attn-only", FinetuneConfig(method="learner", learner=LearnerConfig(rank=2, targets=("query", "value"), priming_steps=2)),
     [("priming", _is(r"(query|value)\.learner_p[12]$", HEAD, ATTN + r"(base_layer\.)?(weight|bias)$")),
      ("learners", _is(r"(query|value)\.learner_p[12]$", HEAD))]),
    ("learner-lp-ft", FinetuneConfig(method="learner", learner=LearnerConfig(rank=4, probe_epochs=0.3, priming_steps=2)),
     [("probe", _is(HEAD, r"^pooler\.")), ("priming", _is(LEARNER, HEAD, ATTN + r"base_layer\.")),
      ("learners", _is(LEARNER, HEAD))]),
    ("learner-bitfit", FinetuneConfig(method="learner", learner=LearnerConfig(rank=4, priming_steps=2, bitfit=True)),
     [("priming", _is(LEARNER, HEAD, ATTN + r"base_layer\.", BITFIT)), ("learners", _is(LEARNER, HEAD, BITFIT))]),
    ("learner-rank-auto", FinetuneConfig(method="learner", learner=LearnerConfig(rank="auto", priming_steps=2)),
     [("priming", _is(TARGET_WEIGHTS, HEAD)), ("learners", _is(LEARNER, HEAD))]),
    ("far", FinetuneConfig(method="far", far=FarConfig(keep=0.25)),
     [("priming", lambda n: True), ("reconfigured", lambda n: "frozen_part." not in n)]),
]
IDS = [c[0] for c in CASES]


def small_model(labels=("neg", "pos"), seed=0):
    from edgenlp.models.encoder import EncoderClassifier, EncoderShape, ModelInfo
    from edgenlp.models.registry import DEFAULT_TOKENIZER, default_vocab_file

    shape = EncoderShape.uniform(num_layers=2, hidden=64, num_heads=4, ffn=128, max_positions=64, dropout=0.1)
    model = EncoderClassifier(shape, len(labels), labels=tuple(labels)).init_weights(std=0.02, seed=seed)
    return model, ModelInfo("small", "test", shape, False, str(default_vocab_file()), dict(DEFAULT_TOKENIZER))


@pytest.fixture(scope="module")
def batch(synth_task):
    model, info = small_model()
    tok = load_tokenizer(info)
    ids = tok(list(synth_task.train.texts[:16]))["input_ids"]
    return collate(Encoded(ids, synth_task.train.label_ids(synth_task.labels)[:16]), list(range(16)), pad_id=0)


@pytest.mark.parametrize("case, config, expected", CASES, ids=IDS)
def test_only_intended_parameters_get_gradients(case, config, expected, batch):
    model, _ = small_model()
    method = METHOD_TYPES[config.method](model, config, total_steps=30, steps_per_epoch=10)  # 15 steps per class: not short, no probe
    phases = method.phases()
    assert [p.name for p in phases] == [name for name, _ in expected]
    ids, mask, labels = batch
    for phase, (_, wanted) in zip(phases, expected):
        groups = phase.enter()
        optimizer = torch.optim.AdamW(groups)
        model.train()
        nn.functional.cross_entropy(model(ids, mask), labels).backward()
        optimizer.step()
        got = {n for n, p in model.named_parameters() if p.grad is not None}
        want = {n for n, p in model.named_parameters() if wanted(n)}
        assert got == want, f"{case}/{phase.name}: unexpected {sorted(got - want)[:5]}, missing {sorted(want - got)[:5]}"
        in_groups = {id(p) for g in groups for p in g["params"]}
        assert in_groups == {id(p) for n, p in model.named_parameters() if n in want}
        model.zero_grad(set_to_none=True)
    method.finish()
    assert {type(m) for m in model.modules()} == {type(m) for m in small_model()[0].modules()}
    assert list(model.state_dict()) == list(small_model()[0].state_dict())


@pytest.mark.parametrize(
    "config, boundaries",
    [
        (FinetuneConfig(method="learner", epochs=2, batch_size=32, learner=LearnerConfig(rank=2, priming_steps=5, probe_epochs=0)), [0, 5]),
        (FinetuneConfig(method="learner", epochs=2, batch_size=32, learner=LearnerConfig(rank=2, priming_epochs=0.5, probe_epochs=0)), [0, 3]),
        (FinetuneConfig(method="learner", epochs=2, batch_size=32, learner=LearnerConfig(rank=2, priming_epochs=1.5, probe_epochs=0)), [0, 9]),
        # 12 steps for 2 classes is short (learner_schedule): a probe of a tenth of an epoch comes first
        (FinetuneConfig(method="learner", epochs=2, batch_size=32, learner=LearnerConfig(rank=2, priming_steps=5)), [0, 1, 6]),
        (FinetuneConfig(method="far", epochs=2, batch_size=32, max_steps=10, far=FarConfig(priming_fraction=0.3)), [0, 3]),
    ],
    ids=["steps", "half-epoch", "fractional-epochs", "short-budget-probe", "far-fraction"],
)
def test_priming_switches_at_the_right_step(config, boundaries, synth_task):
    model, info = small_model()
    report = finetune(model, info, synth_task, config).report  # 192 rows / 32 = 6 steps per epoch
    assert [p["first_step"] for p in report["phases"]] == boundaries
    assert report["steps"] == (config.max_steps or 12)


LOSS_CASES = [(c, cfg) for c, cfg, _ in CASES if c in ("full", "learner", "far", "bitfit", "freeze-ffn", "learner-rank-auto")]


@pytest.mark.parametrize("case, config", LOSS_CASES, ids=[c for c, _ in LOSS_CASES])
def test_short_run_lowers_loss_and_returns_a_plain_model(case, config, synth_task):
    import dataclasses

    lr = 3e-3 if config.method in ("full", "far", "freeze-ffn") else 1e-2
    kw = {"learner": dataclasses.replace(config.learner, priming_steps=3, priming_lr=3e-3)} if config.learner else {}
    config = dataclasses.replace(config, epochs=2, batch_size=16, lr=lr, seed=0, **kw)
    model, info = small_model()
    result = finetune(model, info, synth_task, config)
    losses = [e["train_loss"] for e in result.report["epochs"]]
    assert losses[-1] < losses[0], f"{case}: train loss did not drop: {losses}"
    assert result.model is model and not model.training
    assert {type(m) for m in model.modules()} == {type(m) for m in small_model()[0].modules()}
    r = result.report
    assert r["method"] == config.method and r["config"]["type"] == "FinetuneConfig"
    assert 0 < r["trainable_params"]["count"] <= r["trainable_params"]["total"] and r["peak_rss_mb"] > 0
    assert len(r["dev_per_epoch"]) == 2 and len(r["wall_s_per_epoch"]) == 2


def test_same_seed_same_run(synth_task):
    cfg = FinetuneConfig(method="learner", epochs=1, batch_size=16, max_steps=6, learner=LearnerConfig(rank=2, priming_steps=2))
    a = finetune(*small_model(), synth_task, cfg)
    b = finetune(*small_model(), synth_task, cfg)
    assert a.report["epochs"][0]["train_loss"] == b.report["epochs"][0]["train_loss"]
    for (k, v), (_, w) in zip(a.model.state_dict().items(), b.model.state_dict().items()):
        assert torch.equal(v, w), k


class _Predicts(nn.Module):
    """Predicts the label given as the row's first token id (3 classes)."""

    def forward(self, ids, mask):
        return nn.functional.one_hot(ids[:, 0], 3).float()


def test_banking_style_macro_f1_against_a_hand_computed_case():
    from edgenlp.finetune.trainer import Encoded, evaluate

    gold = [0, 0, 1, 1, 2, 2]
    pred = [0, 1, 1, 1, 2, 0]
    # per class (tp, fp, fn) -> F1 = 2tp / (2tp + fp + fn): 0: (1, 1, 1) -> 1/2; 1: (2, 1, 0) -> 4/5; 2: (1, 0, 1) -> 2/3
    want = (1 / 2 + 4 / 5 + 2 / 3) / 3  # 59/90
    # rows of different lengths: evaluate sorts them by length and must map predictions back
    data = Encoded(ids=[[p] + [7] * (6 - i) for i, p in enumerate(pred)], labels=gold)
    report = evaluate(_Predicts(), data, num_labels=3, batch_size=4)
    assert report["accuracy"] == pytest.approx(4 / 6)
    assert report["macro_f1"] == pytest.approx(59 / 90) == pytest.approx(want)
    binary = evaluate(_Predicts(), Encoded(ids=[[0], [1]], labels=[0, 0]), num_labels=2)
    assert binary == {"accuracy": 0.5, "n": 2}  # macro-F1 only with more than two labels


def test_rank_auto_through_the_method_picks_planted_ranks_and_keeps_the_function(batch):
    model, _ = small_model()
    model.eval()
    cfg = FinetuneConfig(method="learner", learner=LearnerConfig(rank="auto", priming_steps=1, energy=0.9, budget=10**7))
    method = METHOD_TYPES["learner"](model, cfg, total_steps=4, steps_per_epoch=2)
    priming, learners = method.phases()
    priming.enter()
    g = torch.Generator().manual_seed(0)
    planted = {}
    with torch.no_grad():  # stand-in for priming: a change of known rank in every target
        for i, path in enumerate(method.paths):
            w = model.get_submodule(path).weight
            r = 1 + i % 3
            q1, _ = torch.linalg.qr(torch.randn(w.shape[0], r, generator=g))
            q2, _ = torch.linalg.qr(torch.randn(w.shape[1], r, generator=g))
            w.add_(q1 @ q2.t() * 0.05)
            planted[path] = r
    ids, mask, _ = batch
    with torch.no_grad():
        before = model(ids, mask)
    learners.enter()
    from edgenlp.finetune.learner import learners as find_learners

    assert {p: m.rank for p, m in find_learners(model).items()} == planted
    with torch.no_grad():
        torch.testing.assert_close(model(ids, mask), before, rtol=0, atol=1e-5)
    info = method.finish()
    assert info["ranks"] == planted and info["rank_auto"]["energy_used"] == 0.9


def test_priming_longer_than_the_run_is_a_user_error(synth_task):
    from edgenlp.errors import EdgeNLPError

    cfg = FinetuneConfig(method="learner", epochs=1, learner=LearnerConfig(priming_epochs=1))
    with pytest.raises(EdgeNLPError, match="priming .* must end before the run"):
        finetune(*small_model(), synth_task, cfg)


def test_cli_writes_a_model_directory_with_finetune_json(tmp_path, synth_task_dir):
    import json

    from click.testing import CliRunner

    from edgenlp.cli import main
    from edgenlp.models.registry import load_model, save_pretrained

    model, info = small_model()
    base = save_pretrained(model, info, tmp_path / "base")
    out = tmp_path / "ft"
    result = CliRunner().invoke(main, ["finetune", str(base), "--task", str(synth_task_dir), "--method", "learner",
                                       "--rank", "2", "--rank-for", "pooler=3", "--priming-steps", "2", "--epochs", "1",
                                       "--batch-size", "32", "--out", str(out), "--json", str(tmp_path / "r.json"), "-q"])
    assert result.exit_code == 0, result.output
    report = json.loads((out / "finetune.json").read_text())
    assert report == json.loads((tmp_path / "r.json").read_text())
    assert report["learner"]["ranks"]["pooler"] == 3 and report["learner"]["ranks"]["layers.0.query"] == 2
    assert report["config"]["learner"]["ranks"] == [["pooler", 3]]
    reloaded, reloaded_info = load_model(out)
    assert reloaded.shape == model.shape
    # the recipe travels with the model directory, and from there into a bundle's manifest
    (step,) = reloaded_info.recipe
    assert step.type == "finetune" and step.config.method == "learner" and "accuracy" in step.result["dev"]
    assert step.config.learner.ranks == (("pooler", 3),)


@pytest.mark.parametrize("learner_cfg", [LearnerConfig(rank=3, priming_steps=2, bitfit=True),
                                         LearnerConfig(rank=3, probe_epochs=0.2, priming_steps=2, bitfit=True)],
                         ids=["bitfit", "lp-ft+bitfit"])
def test_merged_equals_unmerged_with_biases_and_norms_trained(learner_cfg, batch):
    """Trained biases and layer norms live in the base model: merging the Learners keeps the function exactly."""
    model, _ = small_model()
    cfg = FinetuneConfig(method="learner", learner=learner_cfg)
    method = METHOD_TYPES["learner"](model, cfg, total_steps=10, steps_per_epoch=10)
    ids, mask, labels = batch
    model.train()
    for phase in method.phases():
        optimizer = torch.optim.AdamW([{**g, "lr": 0.05} for g in phase.enter()])
        for _ in range(2):
            nn.functional.cross_entropy(model(ids, mask), labels).backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
    model.eval()
    with torch.no_grad():
        unmerged = model(ids, mask)
    method.finish()
    with torch.no_grad():
        merged = model(ids, mask)
    torch.testing.assert_close(merged, unmerged, rtol=0, atol=1e-5)
    fresh = small_model()[0].state_dict()
    moved = [n for n, v in model.state_dict().items() if re.search(BITFIT, n) and not torch.equal(v, fresh[n])]
    assert "embeddings.norm.weight" in moved and "layers.1.ffn_out.bias" in moved  # they did train


def test_cli_rank_auto_runs(tmp_path, synth_task_dir):
    import json

    from click.testing import CliRunner

    from edgenlp.cli import main
    from edgenlp.models.registry import save_pretrained

    base = save_pretrained(*small_model(), tmp_path / "base")
    out = tmp_path / "ft"
    result = CliRunner().invoke(main, ["finetune", str(base), "--task", str(synth_task_dir), "--method", "learner",
                                       "--rank", "auto", "--energy", "0.8", "--epochs", "2", "--batch-size", "32",
                                       "--out", str(out), "-q"])
    assert result.exit_code == 0, result.output
    report = json.loads((out / "finetune.json").read_text())
    assert report["config"]["learner"]["rank"] == "auto" and report["learner"]["rank_auto"]["energy_target"] == 0.8
    assert report["learner"]["priming_steps"] > 0 and report["learner"]["ranks"]
    assert report["trainable_params"]["count"] < report["trainable_params"]["total"]
