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


def test_planner_running_out_after_a_failed_attempt_still_writes_the_reports(monkeypatch, tmp_path):
    """Attempt 1 misses its budget and no candidate is left for attempt 2: the reports are written, one error says why."""
    from types import SimpleNamespace

    from edgenlp.compress import pipeline, report
    from edgenlp.errors import EdgeNLPError

    c = pipeline.Compressor.__new__(pipeline.Compressor)
    c.config, c.out, c.echo = CompressConfig(max_attempts=3), tmp_path, lambda msg: None
    planned: list[int] = []

    def plan(ft, attempt, excluded, ex=None):
        planned.append(attempt)
        if attempt > 1:
            assert excluded == [{"at_most": cand(0.5, "int8")}]
            raise EdgeNLPError("no candidate meets the budgets")
        return SimpleNamespace(result={"chosen": cand(0.5, "int8")})

    verify = SimpleNamespace(result={"passed": False, "failures": ["size_mb 30 > budget 25"], "failures_kind": "budget"})
    measured = SimpleNamespace(result={"chosen_index": 0, "why": "the plan's #1", "rows": [{"candidate": cand(0.5, "int8"),
                                                                                           "meets": True}]})
    for name, fn in {"clear_final_outputs": lambda: None, "calibrate_host": lambda: None, "finetune": lambda: "ft",
                     "baseline": lambda ft: "base", "exits": lambda ft: None, "plan": plan, "measure": lambda *a: measured,
                     "prune": lambda *a: "pr", "export": lambda *a: "ex", "verify": lambda *a: verify}.items():
        monkeypatch.setattr(c, name, fn)
    reported = {}
    monkeypatch.setattr(report, "write_reports", lambda comp, **kw: reported.update(kw) or {})
    with pytest.raises(EdgeNLPError, match=r"in 1 attempt\(s\).*size_mb 30 > budget 25.*no candidate left to try"):
        c.run()
    assert planned == [1, 2] and reported["passed"] is None and len(reported["attempts"]) == 1


def test_the_attention_weight_makes_flops_track_the_cost_models_latency():
    """With the weight ``attention_weight`` derives, the latency proxy's FLOPs of an uneven pruned shape, at the full
    shape's cost per linear FLOP, are the cost model's milliseconds for it; plain FLOPs undercount the heads."""
    import dataclasses

    from edgenlp.compress.planning import attention_weight, load_target
    from edgenlp.models.arithmetic import component_flops, encoder_flops
    from edgenlp.models.registry import NAMED_MODELS
    from edgenlp.targets.costmodel import CostModel

    target, full = load_target("pixel-7"), NAMED_MODELS["minilm-l6"].shape or _minilm_shape()
    w = attention_weight(target, full, seq_len=128)
    assert w > 1.5  # fp32 attention beside int8 GEMMs

    model = CostModel.for_target(target)
    parts = ("attn_qkv", "attn_out", "ffn", "attn_core")

    def ms(shape):
        return sum(model.predict(shape, bits="int8", seq_len=128).components_ms[c] for c in parts)

    f = component_flops(full, seq_len=128, num_labels=0)
    per_linear = (ms(full) - model.predict(full, bits="int8", seq_len=128).components_ms["attn_core"]) / sum(
        f[c] for c in ("attn_qkv", "attn_out", "ffn"))
    pruned = dataclasses.replace(full, heads=(11, 7, 6, 6, 1, 10), ffn=(1430, 1297, 767, 273, 202, 28))

    def err(weight):
        proxy = per_linear * encoder_flops(pruned.hidden, pruned.head_dim, pruned.heads, pruned.ffn, seq_len=128,
                                           attention_weight=weight)
        return abs(proxy / ms(pruned) - 1)

    assert err(w) < 0.05 and err(1.0) > 2 * err(w)


def _minilm_shape():
    from edgenlp.models.registry import load_model

    return load_model("minilm-l6")[0].shape
