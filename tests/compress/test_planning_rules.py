"""compress: config validation and what a failed attempt rules out."""

from __future__ import annotations

import pytest

from edgenlp.compress.config import CompressConfig
from edgenlp.compress.planning import at_least_as_aggressive, exclusions_after, is_excluded


def cand(sparsity=0.0, bits="fp32", method="fast", emb=None, trim=False):
    return {"prune_method": method, "sparsity": sparsity, "bits": bits, "embeddings": emb, "trim_vocab": trim}


def test_config_round_trip_and_errors():
    cfg = CompressConfig(task="banking77", target="host", latency_ms=12.5, max_drop=0.5, preset="full")
    assert CompressConfig.from_dict(cfg.to_dict()) == cfg
    for bad in ({"latency_ms": 0}, {"size_mb": -3.0}, {"max_drop": -1}, {"preset": "fast"}, {"threads": 0},
                {"finetune_method": "lora"}, {"target": ""}, {"max_attempts": 0}, {"seq_len": True}):
        with pytest.raises(ValueError):
            CompressConfig(**bad)


def test_aggressiveness_order():
    assert at_least_as_aggressive(cand(0.5, "int8"), cand(0.3, "int8"))
    assert at_least_as_aggressive(cand(0.5, "int4"), cand(0.5, "int8"))
    assert not at_least_as_aggressive(cand(0.3, "int4"), cand(0.5, "int8"))  # less pruned
    assert not at_least_as_aggressive(cand(0.5, "int8", method="cofi"), cand(0.3, "int8", method="fast"))
    assert at_least_as_aggressive(cand(0.5, "int8", method="cofi"), cand(0.0, "int8"))  # nothing pruned: any method
    assert at_least_as_aggressive(cand(0.5, "int8", emb="int4"), cand(0.5, "int8", emb="int8"))


def test_accuracy_miss_excludes_more_aggressive_budget_miss_less():
    failed = cand(0.5, "int8")
    acc_rules = exclusions_after(failed, "accuracy")
    assert is_excluded(failed, acc_rules)
    assert is_excluded(cand(0.7, "int4"), acc_rules)
    assert not is_excluded(cand(0.3, "int8"), acc_rules)
    assert not is_excluded(cand(0.7, "int4", method="cofi"), acc_rules)  # another method may keep accuracy

    bud_rules = exclusions_after(failed, "budget")
    assert is_excluded(failed, bud_rules)
    assert is_excluded(cand(0.3, "int8"), bud_rules)
    assert is_excluded(cand(0.0, "fp32"), bud_rules)
    assert not is_excluded(cand(0.7, "int8"), bud_rules)
    assert not is_excluded(cand(0.5, "int4"), bud_rules)
