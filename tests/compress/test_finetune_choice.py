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
