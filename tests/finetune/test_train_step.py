"""One training step, shared by the trainer and the fine-tuning bench (tools/bench/finetune.py --step-timing)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from edgenlp.finetune import FinetuneConfig, LearnerConfig, finetune
from edgenlp.finetune import trainer as trainer_mod
from edgenlp.finetune.methods import METHOD_TYPES
from edgenlp.finetune.trainer import build_optimizer, collate, encode_split, load_tokenizer, train_step

ROOT = Path(__file__).resolve().parents[2]


def _small(labels=("neg", "pos")):
    from edgenlp_testing import tiny_model

    model, info = tiny_model(labels)
    return model.train(), info


def _batch(task, info, n=16):
    enc = encode_split(load_tokenizer(info), task.train, task.labels, max_len=32)
    return collate(enc, list(range(n)), pad_id=0)


def test_train_step_schedules_clips_steps_and_clears(synth_task):
    model, info = _small(synth_task.labels)
    model.eval()  # no dropout: the loss can be recomputed
    cfg = FinetuneConfig(method="full", max_grad_norm=1e-3)
    groups = METHOD_TYPES["full"](model, cfg, total_steps=10, steps_per_epoch=5).phases()[-1].enter()
    opt = build_optimizer(groups, None)
    batch = _batch(synth_task, info)
    with torch.no_grad():
        want = float(nn.functional.cross_entropy(model(batch[0], batch[1]), batch[2]))
    seen = {}
    step = opt.step

    def spy(*a, **k):
        grads = [p.grad for g in opt.param_groups for p in g["params"] if p.grad is not None]
        seen["norm"] = float(torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads])))
        seen["lr"] = [g["lr"] / g["base_lr"] for g in opt.param_groups]
        return step(*a, **k)

    opt.step = spy
    loss = train_step(model, opt, batch, loss_fn=nn.CrossEntropyLoss(), max_grad_norm=cfg.max_grad_norm, lr_scale=0.25)
    assert loss == pytest.approx(want, rel=1e-5)
    assert seen["norm"] <= cfg.max_grad_norm * (1 + 1e-4)  # clipped to max_grad_norm before the step
    assert seen["lr"] == pytest.approx([0.25] * len(opt.param_groups))
    assert all(p.grad is None for p in model.parameters())


def test_the_trainer_takes_every_step_through_train_step(synth_task, monkeypatch):
    calls = []
    real = trainer_mod.train_step

    def counting(model, optimizer, batch, **kw):
        calls.append(kw)
        return real(model, optimizer, batch, **kw)

    monkeypatch.setattr(trainer_mod, "train_step", counting)
    cfg = FinetuneConfig(method="learner", epochs=1, batch_size=16, max_steps=5, learner=LearnerConfig(rank=2, priming_steps=2))
    report = finetune(*_small(synth_task.labels), synth_task, cfg).report
    assert len(calls) == report["steps"] == 5
    assert {c["max_grad_norm"] for c in calls} == {cfg.max_grad_norm}


def test_bench_step_timing_times_the_library_step(synth_task_dir, tiny_model_dir, monkeypatch):
    """tools/bench/finetune.py --step-timing: every timed step is train_step on a build_optimizer optimizer."""
    sys.path.insert(0, str(ROOT))
    from tools.bench import finetune as bench

    calls = []
    real = trainer_mod.train_step

    def counting(model, optimizer, batch, **kw):
        groups = optimizer.param_groups
        calls.append((type(optimizer).__name__, {g["name"] for g in groups}, all("base_lr" in g for g in groups), kw))
        return real(model, optimizer, batch, **kw)

    monkeypatch.setattr(trainer_mod, "train_step", counting)
    methods = ["full", "learner", "far", "bitfit", "freeze-ffn"]
    args = argparse.Namespace(model=str(tiny_model_dir), threads=1, batch_size=8, max_seq_len=16, device="cpu",
                              task_dirs={"synth": str(synth_task_dir)}, data_dir=None, timing_methods=methods)
    doc = bench.interleaved_step_times(args, steps=2, task="synth")
    # 3 warm-up + 2 timed steps per method, then 3 profiled Learner steps and 3 profiled full steps
    assert len(calls) == len(methods) * 5 + 6
    assert all(opt == "AdamW" and names <= {"body", "head"} and "head" in names and has_base for opt, names, has_base, _ in calls)
    assert {c[3]["max_grad_norm"] for c in calls} == {FinetuneConfig().max_grad_norm}
    assert list(doc["methods"]) == methods and doc["methods"]["full"]["vs_full"] == 1.0
    assert doc["methods"]["learner"]["trainable_params"] < doc["methods"]["full"]["trainable_params"]
    prof = doc["learner_profile"]
    assert prof["groups_ms"]["total"] > 0 and prof["groups_ms"]["forward: Learner factors"] > 0
    assert prof["full_groups_ms"]["forward: Learner factors"] == 0
    text = "\n".join(bench.step_lines({**doc, "threads": 1, "batch_size": 8, "max_seq_len": 16}, profile=True))
    assert "train_step" in text and "Where the Learner step goes" in text


def test_bench_report_names_the_default_rates_the_runs_trained_with():
    """A report rebuilt after a default changed names the body rates its runs at the defaults used, not today's."""
    from tools.bench import finetune as bench

    default, swept = "lr=default,head=default", "lr=1.6e-4,head=default"
    rows = [{"variant": "full", "setting": default, "lr": {"body": 5e-5, "head": 2e-3}},
            {"variant": "learner", "setting": default, "lr": {"body": 1e-3, "head": 2e-3, "priming": 5e-5}},
            {"variant": "full", "setting": swept, "lr": {"body": 1.6e-4, "head": 2e-3}}]
    assert bench.body_defaults_as_run(rows) == "5e-5 full, 1e-3 learner"
    assert bench.body_defaults_as_run(rows[2:]) is None
