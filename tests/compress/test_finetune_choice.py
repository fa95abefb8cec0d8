"""``compress --finetune-method auto``: the first stage's method follows the task's classes, as measured."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from edgenlp.compress.config import AUTO, FINETUNE_RULES, PRESETS, CompressConfig, finetune_method_for
from edgenlp.compress.pipeline import finetune_config

RESULTS = Path(__file__).resolve().parents[2] / "tools" / "bench" / "results"
TASK_OF = {"SST-2": "sst2", "banking77": "banking77"}
NAME_OF = {"Learner": "learner", "full": "full", "FAR": "far"}


def test_auto_follows_the_number_of_classes():
    assert CompressConfig().finetune_method == AUTO
    assert finetune_method_for(AUTO, 2)[0] == "learner"
    for classes in (3, 77, 151):
        method, why = finetune_method_for(AUTO, classes)
        assert method == "far" and f"{classes} classes" in why and "finetune.json" in why
    assert finetune_method_for("full", 77) == ("full", "asked for")  # an explicit method is kept
    assert finetune_config(CompressConfig(), PRESETS["quick"], 77).method == "far"
    ftc = finetune_config(CompressConfig(), PRESETS["quick"], 2)
    assert ftc.method == "learner" and ftc.learner.priming_steps == PRESETS["quick"].priming_steps
    assert finetune_config(CompressConfig(finetune_method="learner"), PRESETS["quick"], 77).method == "learner"
    with pytest.raises(ValueError, match="finetune_method"):
        CompressConfig(finetune_method="lora")


def test_each_rule_rests_on_the_numbers_it_quotes():
    rows = json.loads((RESULTS / "finetune.json").read_text())["rows"]
    for rule in FINETUNE_RULES:
        task = TASK_OF[re.match(r"(\S+) \(", rule.evidence).group(1)]
        quoted = dict((NAME_OF[m], (float(a), float(b))) for m, a, b in re.findall(r"(Learner|full|FAR) ([\d.]+) ± ([\d.]+)", rule.evidence))
        assert set(quoted) == {"learner", "full", "far"}, rule.evidence
        for method, (mean, std) in quoted.items():
            row = next(r for r in rows if r["task"] == task and r["variant"] == method and len(r["seeds"]) == 3)
            assert (round(row["accuracy"], 2), round(row["accuracy_std"], 2)) == (mean, std), (task, method)
        # the rule's method is within a point of the best measured on its task
        best = max(m for m, _ in quoted.values())
        assert quoted[rule.method][0] >= best - 1.0, rule
    assert FINETUNE_RULES[-1].max_classes is None  # every task gets a rule


def test_the_quick_preset_prices_fine_tuning_steps_per_method():
    """Methods that train the embeddings get fewer steps in the quick preset's minutes than Learners do, and the
    fine-tune stage asks for exactly the preset's steps of the method it runs."""
    quick = PRESETS["quick"]
    assert quick.steps_for("far") < quick.steps_for("learner") == quick.max_steps
    assert quick.steps_for("full") == quick.steps_for("far")
    assert finetune_config(CompressConfig(), quick, 77).max_steps == quick.steps_for("far")
    assert finetune_config(CompressConfig(), quick, 2).max_steps == quick.steps_for("learner")
    assert finetune_config(CompressConfig(finetune_method="full"), quick, 2).max_steps == quick.steps_for("full")
    full = PRESETS["full"]
    assert full.steps_for("far") is None and full.steps_for("learner") is None  # the library's own schedule


def test_the_quick_presets_fine_tuning_budget_is_the_one_its_benchmark_measured():
    """The steps and rows in the preset are a setting tools/bench/quick_preset.py ran on a CPU within 8 minutes."""
    doc = json.loads((RESULTS / "quick-preset.json").read_text())
    quick = PRESETS["quick"]
    for task, method in (("sst2", "learner"), ("banking77", "far")):
        runs = [r for r in doc["runs"] if r["task"] == task and r["method"] == method
                and r["max_steps"] == quick.steps_for(method) and r["priming_steps"] == quick.priming_steps
                and r["train_limit"] in (quick.train_limit, None) and r["device"] == "cpu"]
        assert runs, (task, method)
        assert all(r["wall_s"] <= doc["budget_s"] for r in runs), runs
