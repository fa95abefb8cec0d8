"""Recipes written before one config per method (tests/fixtures/recipes/) still load, every field intact.

The fixtures are what edgenlp wrote at commit d42c845: model directories'
``config.json`` after ``edgenlp prune`` (one per method), bundle manifests
after ``edgenlp quantize``, and a recipe with every field at a non-default
value. Version-1 prune steps held one ``PruneConfig`` with a ``method``; they
must read back as the method's own class with every field that method reads
unchanged, and an unset length as the default that method ran with then.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from edgenlp.finetune.config import FinetuneConfig
from edgenlp.prune.config import CofiConfig, FastConfig, ImportanceConfig, PruneConfig
from edgenlp.recipe import recipe_from_list, recipe_to_list

FIXTURES = Path(__file__).parent / "fixtures" / "recipes"

# What version 1 did with an unset length (edgenlp/prune/config.py at d42c845): the truth the
# upgraded configs must match, written out here rather than read from the code under test.
V1_EPOCHS = {"cofi": 2.0, "fast": 0.0, "importance": 0.0}
V1_FINETUNE_EPOCHS = {"cofi": 1.0, "fast": 0.0, "importance": 0.0}
V1_CLASS = {"cofi": CofiConfig, "fast": FastConfig, "importance": ImportanceConfig}
# The version-1 fields each method never read (dropped on upgrade).
V1_UNREAD = {
    "cofi": {"samples", "iterations", "rescale"},
    "fast": {"epochs", "budget_minutes", "mask_lr", "lagrangian_lr", "droprate_init", "prune_hidden", "target_warmup",
             "iterations"},
    "importance": {"epochs", "budget_minutes", "mask_lr", "lagrangian_lr", "droprate_init", "prune_hidden",
                   "target_warmup", "rescale"},
}


def _applied(path: Path) -> list[dict]:
    d = json.loads(path.read_text())
    return d["edgenlp"]["applied"] if "edgenlp" in d else d["applied"]


FILES = sorted(FIXTURES.glob("*.json"))


def _jsonable(value):
    return json.loads(json.dumps(value))


def _check_fields(raw: dict, config) -> None:
    """Every field of ``raw`` (a written config dict) is on ``config`` with the same value."""
    for name, value in raw.items():
        if name in ("type", "version", "resolved_lr", "resolved_head_lr"):
            continue
        got = getattr(config, name)
        if isinstance(value, dict):
            _check_fields(value, got)
        else:
            assert _jsonable(got) == value, (type(config).__name__, name, got, value)


def test_there_are_fixtures_of_every_method():
    steps = [s for f in FILES for s in _applied(f)]
    assert {s["config"]["method"] for s in steps if s["step"] == "prune"} == {"cofi", "fast", "importance"}
    assert {s["config"]["method"] for s in steps if s["step"] == "finetune"} >= {"full", "learner", "far"}
    assert {s["step"] for s in steps} == {"finetune", "prune", "quantize", "export"}
    assert all(s["config"]["type"] == "PruneConfig" and s["version"] == 1 for s in steps if s["step"] == "prune")


# What an unset body rate ran at before FinetuneConfig version 3 (edgenlp/finetune/config.py at 7ff56e6), per method.
V2_BODY_LR = {"full": 5e-5, "far": 5e-5, "freeze-ffn": 5e-5, "learner": 1e-3, "bitfit": 1e-3}


# prune knobs added after version 1, at the default that is what a version-1 recipe ran: its targets (params,
# flops) count an attention-core FLOP as one FLOP
ADDED_SINCE_V1 = {"attention_weight": 1.0}


@pytest.mark.parametrize("path", FILES, ids=[f.name for f in FILES])
def test_a_recipe_written_before_loads_with_every_field(path):
    raw = _applied(path)
    recipe = recipe_from_list(raw, where=path.name)
    assert [s.type for s in recipe] == [d["step"] for d in raw]
    for d, step in zip(raw, recipe):
        assert step.result == d.get("result", {})
        cfg = d["config"]
        if d["step"] == "finetune" and cfg.get("lr", 0) is None:  # unset: it reads back as the rate it ran with
            assert step.config.lr == V2_BODY_LR[cfg.get("method", "full")]
            cfg = {k: v for k, v in cfg.items() if k != "lr"}
        if d["step"] != "prune":
            _check_fields(cfg, step.config)
            continue
        method = cfg["method"]
        assert type(step.config) is V1_CLASS[method] and step.config.method == method
        assert isinstance(step.config, PruneConfig)
        for name, value in cfg.items():
            if name in ("type", "version", "method"):
                continue
            if name in V1_UNREAD[method]:
                assert not hasattr(step.config, name), name
            elif value is None and name == "epochs":
                assert step.config.epochs == V1_EPOCHS[method]
            elif value is None and name == "finetune_epochs":
                assert step.config.finetune_epochs == V1_FINETUNE_EPOCHS[method]
            else:
                assert _jsonable(getattr(step.config, name)) == value, (method, name)
        # what the method reads and the old config did not list is at the class default, which is what ran
        assert set(step.config.field_names()) - set(ADDED_SINCE_V1) <= set(cfg) - {"type", "version", "method"}
        for name, default in ADDED_SINCE_V1.items():
            assert getattr(step.config, name) == default, name


@pytest.mark.parametrize("path", FILES, ids=[f.name for f in FILES])
def test_an_upgraded_recipe_writes_the_current_version_and_reads_back_equal(path):
    recipe = recipe_from_list(_applied(path))
    again = _jsonable(recipe_to_list(recipe))
    assert recipe_from_list(again) == recipe
    for d in again:
        if d["step"] == "prune":
            assert d["version"] == 2 and d["config"]["type"] in {"CofiConfig", "FastConfig", "ImportanceConfig"}
            assert "method" not in d["config"]
        if d["step"] == "finetune":
            assert d["config"]["type"] == "FinetuneConfig" and d["version"] == FinetuneConfig.VERSION


def test_a_version_1_dict_of_an_unknown_method_or_field_is_refused():
    with pytest.raises(ValueError, match="method must be one of"):
        PruneConfig.from_dict({"type": "PruneConfig", "version": 1, "method": "magic"})
    with pytest.raises(ValueError, match="unknown field"):
        PruneConfig.from_dict({"type": "PruneConfig", "version": 1, "method": "fast", "sparsity": 0.5})
    with pytest.raises(ValueError, match="expected a CofiConfig dict"):
        CofiConfig.from_dict({"type": "PruneConfig", "version": 1, "method": "fast"})


def test_a_version_1_quantize_step_reads_back_as_keeping_the_fp32_exit_threshold():
    """Version 1 reused the fp32 model's exit threshold; version 2 calibrates it again unless told to keep it."""
    from edgenlp.quantize.config import QuantizeConfig

    steps = [s for f in FILES for s in recipe_from_list(_applied(f)) if s.type == "quantize"]
    assert steps and all(s.config.exit_calibration == "fp32" for s in steps)
    assert QuantizeConfig().exit_calibration == "quantized"
    assert QuantizeConfig.from_dict(QuantizeConfig().to_dict()).exit_calibration == "quantized"


def test_a_version_2_quantize_step_reads_back_as_fp32_exit_heads():
    """Version 2 shipped a dynamic model's exit heads fp32; version 3 quantizes them int8 unless told otherwise."""
    from edgenlp.quantize.config import QuantizeConfig

    v2 = {**QuantizeConfig().to_dict(), "version": 2}
    del v2["exit_heads"]
    assert QuantizeConfig.from_dict(v2).exit_heads == "fp32"
    assert QuantizeConfig.from_dict(v2).exit_calibration == "quantized"  # what version 2 already had is kept
    steps = [s for f in FILES for s in recipe_from_list(_applied(f)) if s.type == "quantize"]
    assert steps and all(s.config.exit_heads == "fp32" for s in steps)
    assert QuantizeConfig().exit_heads == "int8" and QuantizeConfig.from_dict(QuantizeConfig().to_dict()).exit_heads == "int8"
    with pytest.raises(ValueError, match="exit_heads"):
        QuantizeConfig(exit_heads="int4")
