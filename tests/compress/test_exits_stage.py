"""``compress --dynamic``: the exits stage measures how deep held-out rows run, the plan prices exits from it, builds get exits."""

from __future__ import annotations

import dataclasses
import json

import pytest

from edgenlp.compress import config as compress_config
from edgenlp.compress.config import CompressConfig


@pytest.fixture
def quick_tiny(monkeypatch):
    """The quick preset scaled to an 80-row task: a short fine-tune, exits on 60 rows calibrated on 16."""
    small = dataclasses.replace(compress_config.PRESETS["quick"], max_steps=30, method_steps=(), train_limit=None, priming_steps=5,
                                prune_samples=8, profile_runs=2,
                                recovery=(("train_limit", 64), ("epochs", 1.0), ("max_steps", 2), ("max_seq_len", 32)),
                                exits=(("train_limit", 60), ("val_rows", 16), ("max_seq_len", 32)))
    monkeypatch.setitem(compress_config.PRESETS, "quick", small)


def test_exits_stage_feeds_the_plan_and_the_builds(tmp_path, tiny_model_dir, dyn_task_dir, quick_tiny):
    import torch
    from safetensors.torch import load_file

    from edgenlp.compress.pipeline import Compressor
    from edgenlp.dynamic.api import is_dynamic_dir
    from edgenlp.targets.costmodel import ExitStats

    cfg = CompressConfig(model=str(tiny_model_dir), task=str(dyn_task_dir), target="pixel-7", seq_len=32,
                         latency_stat="mean", max_drop=50.0)
    run = Compressor(cfg, tmp_path / "run", data_dir=None, device="cpu", progress=False, echo=None)
    assert run.budgets.latency_stat == "mean"
    ft = run.finetune()
    run.exits_rec = ex = run.exits(ft)
    assert ex.result["enabled"], ex.result
    stats = ExitStats.from_dict(ex.result["stats"])  # valid shares: 1 for the first layer, never growing
    assert len(stats.reach) == 2 and is_dynamic_dir(tmp_path / "run" / "exits" / "model")
    # and how deep they run with int8 linears, the threshold calibrated again as quantize will: what int8 candidates cost
    assert stats.quantized is not None and len(stats.quantized.reach) == 2 and "int8" in stats.quantized.source
    assert ex.result["config"]["val_rows"] == min(16, len(run.tuning.train) // 5) and ex.result["config"]["max_drop"] == pytest.approx(25.0)

    plan = run.plan(ft, 1, [], ex)
    doc = json.loads((plan.path / "plan.json").read_text())
    assert doc["exit_stats"] == ex.result["stats"] and doc["latency_stat"] == "mean"
    dense = [c for c in doc["considered"] if not c["candidate"].get("exits") and not c["candidate"].get("block_sparsity")]
    with_exits = [c for c in doc["considered"] if c["candidate"].get("exits")]
    assert len(with_exits) == len(dense)  # every dense candidate also with exits (block-sparse ones only static)

    # unpruned with exits: the exits stage's model as is; pruned with exits: exits of its own on the pruned model
    unpruned = run.prune(ft, plan, 1, {"prune_method": None, "sparsity": 0.0, "bits": "int8", "embeddings": None,
                                       "trim_vocab": False, "exits": True})
    assert unpruned.result["identity"] and unpruned.result["model"] == "exits/model"
    static_pruned = run.prune(ft, plan, 1, {"prune_method": "fast", "sparsity": 0.5, "bits": "int8", "embeddings": None,
                                            "trim_vocab": False}, slot=3)
    assert not is_dynamic_dir(run._model_path(static_pruned))
    pruned = run.prune(ft, plan, 1, {"prune_method": "fast", "sparsity": 0.5, "bits": "int8", "embeddings": None,
                                     "trim_vocab": False, "exits": True}, slot=2, static=static_pruned)
    assert is_dynamic_dir(run._model_path(pruned)) and pruned.result["exits"]["reach"][0] == 1.0
    # the exits went on the static twin's pruned model: one pruning, the same backbone, no prune stage of its own
    assert pruned.stage == "prune-exits-c2" and pruned.result["pruned_by"] == "prune-c3"
    assert pruned.result["achieved"] == static_pruned.result["achieved"]
    static_w = load_file(str(run._model_path(static_pruned) / "model.safetensors"))
    exits_w = load_file(str(run._model_path(pruned) / "model.safetensors"))
    assert static_w.keys() <= exits_w.keys() and all(torch.equal(static_w[k], exits_w[k]) for k in static_w)
    assert not (tmp_path / "run" / "prune-c2").exists()

    # --dynamic off: no exits, and the record says why
    off = Compressor(dataclasses.replace(cfg, dynamic="off"), tmp_path / "run-off", data_dir=None, device="cpu",
                     progress=False, echo=None)
    ex_off = off.exits(ft)
    assert not ex_off.result["enabled"] and "--dynamic off" in ex_off.result["why"]
    assert off.exit_stats(ex_off) is None


def test_dynamic_joint_trains_the_backbone_with_the_exits(tmp_path, tiny_model_dir, dyn_task_dir, quick_tiny):
    """``--dynamic joint``: the exits stage's model has a backbone trained with its exits (the static path changed;
    the report keeps the static accuracy from before the joint training, the reference of the drop, beside the one
    after it), and a pruned candidate's exits train jointly too."""
    import torch
    from safetensors.torch import load_file

    from edgenlp.compress.pipeline import Compressor

    cfg = CompressConfig(model=str(tiny_model_dir), task=str(dyn_task_dir), target="pixel-7", seq_len=32,
                         latency_stat="mean", max_drop=50.0, dynamic="joint")
    run = Compressor(cfg, tmp_path / "run", data_dir=None, device="cpu", progress=False, echo=None)
    ft = run.finetune()
    run.exits_rec = ex = run.exits(ft)
    assert ex.result["enabled"] and ex.result["config"]["joint"] is True
    report = json.loads((tmp_path / "run" / "exits" / "model" / "dynamic-report.json").read_text())
    assert report["exit_training"]["mode"] == "joint" and "static_accuracy_after_joint" in report["validation"]
    tuned = load_file(str(ft.path / "model" / "model.safetensors"))
    joint = load_file(str(tmp_path / "run" / "exits" / "model" / "model.safetensors"))
    shared = [k for k in tuned if k in joint and "encoder" in k and k.endswith("weight")]
    assert shared and any(not torch.equal(tuned[k], joint[k]) for k in shared)  # the backbone moved
    # the default (auto) keeps the backbone frozen: the same knobs without joint
    assert run.preset.exits_config(max_drop=1.0).joint is False and run.exits_config.joint is True
    assert run._exits_used()["joint"] is True  # what a pruned candidate with exits repeats
