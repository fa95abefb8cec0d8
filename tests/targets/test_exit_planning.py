"""Early exits in the planner: the latency statistic a budget names, exits priced from measured reach, the contract."""

from __future__ import annotations

import dataclasses

import pytest

from edgenlp.targets import load_target
from edgenlp.targets.costmodel import MINILM_L6, ExitStats, exit_latency
from edgenlp.targets.costmodel.dynamic import SEGMENT_OVERHEAD
from edgenlp.targets.target import Budgets

# Sentences that mostly stop after the first two layers (as an easy task's would).
SHALLOW = ExitStats((1.0, 0.4, 0.05, 0.05, 0.05, 0.05), drop=0.2, threshold=0.9)


class _Task:
    name = "sst2"


def test_exit_latency_matches_a_hand_computation():
    stats = ExitStats((1.0, 0.5), drop=0.0)
    layer = (30.0 - 2.0) / 2 * (1 + SEGMENT_OVERHEAD)  # each of the 2 layers, with its segment's overhead
    assert exit_latency(30.0, 2.0, stats, statistic="mean") == pytest.approx(2.0 + layer * 1.0 + layer * 0.5)
    # p90: every segment that at least 10% of sentences reach runs in full; max: the full depth
    assert exit_latency(30.0, 2.0, stats, statistic="p90") == pytest.approx(2.0 + 2 * layer)
    assert exit_latency(30.0, 2.0, stats, statistic="max") == pytest.approx(2.0 + 2 * layer)
    assert exit_latency(30.0, 2.0, ExitStats((1.0, 0.05), 0.0), statistic="p90") == pytest.approx(2.0 + layer)


@pytest.mark.parametrize("reach, message", [((0.9, 0.5), "reach\\[0\\] must be 1"), ((1.0, 0.2, 0.4), "cannot grow"),
                                            ((1.0, 1.5), "in \\[0, 1\\]"), ((), "one share per layer")])
def test_exit_stats_are_checked(reach, message):
    with pytest.raises(ValueError, match=message):
        ExitStats(reach, drop=0.0)


def test_budgets_name_their_latency_statistic():
    assert Budgets().latency_stat == "p90" and load_target("pixel-7").budgets.latency_stat == "p90"
    with pytest.raises(ValueError, match="latency_stat must be one of mean, p90, max"):
        Budgets(latency_stat="p50")


def test_a_target_file_may_set_the_statistic_and_a_bad_one_names_the_field(tmp_path):
    from edgenlp.targets.target import TargetError, parse_target

    src = load_target("pixel-7").source
    text = open(src).read()
    good = tmp_path / "t.toml"
    good.write_text(text.replace("[budgets]", '[budgets]\nlatency_stat = "mean"', 1))
    assert parse_target(good).budgets.latency_stat == "mean"
    bad = tmp_path / "bad.toml"
    bad.write_text(text.replace("[budgets]", '[budgets]\nlatency_stat = "median"', 1))
    with pytest.raises(TargetError, match="latency_stat"):
        parse_target(bad)


def _plan(stat: str, stats=SHALLOW, excluded=()):
    from edgenlp.compress.config import PRESETS
    from edgenlp.compress.planning import plan_for_compress

    target = load_target("pixel-7")
    budgets = dataclasses.replace(target.budgets, latency_stat=stat)
    return plan_for_compress(target, budgets, shape=MINILM_L6, num_labels=2, preset=PRESETS["quick"], excluded=list(excluded),
                             task=_Task, max_drop=1.0, exit_stats=stats)


def test_exits_win_on_the_mean_never_on_the_max():
    mean, worst = _plan("mean"), _plan("max")
    assert mean["chosen"].get("exits") is True and mean["latency_stat"] == "mean"
    assert "exits" not in worst["chosen"]  # at full depth exits only add their heads and calls
    # every dense candidate is offered static and with exits (a block-sparse one only static: a dynamic bundle's
    # segments run dense); an exits candidate carries the exits' validation drop
    dense = [c for c in mean["considered"] if not c["candidate"].get("exits") and not c["candidate"].get("block_sparsity")]
    with_exits = [c for c in mean["considered"] if c["candidate"].get("exits")]
    assert len(with_exits) == len(dense) and not any(c["candidate"].get("block_sparsity") for c in with_exits)
    twin = next(c for c in mean["considered"] if c["candidate"] == {**mean["chosen"], "exits": True})
    alone = next(c for c in mean["considered"] if c["candidate"] == {k: v for k, v in mean["chosen"].items() if k != "exits"})
    assert twin["predicted_drop"] == pytest.approx(alone["predicted_drop"] + SHALLOW.drop)
    assert twin["predicted_latency_ms"] < alone["predicted_latency_ms"]
    assert mean["exit_stats"]["reach"] == list(SHALLOW.reach)


def test_quantized_candidates_are_priced_from_the_quantized_models_own_depth():
    """With int8 linears the threshold is calibrated again and sentences run deeper: a candidate with quantized
    linears takes the ``quantized`` statistics (depth and drop), an fp32 one the fp32 model's."""
    deep = ExitStats((1.0, 0.9, 0.8, 0.7, 0.6, 0.5), drop=0.6, threshold=0.95)
    both = dataclasses.replace(SHALLOW, quantized=deep)
    assert ExitStats.from_dict(both.to_dict()) == both
    assert both.for_bits("int8") is deep and both.for_bits(("fp32", "int4")) is deep and both.for_bits("fp32") is both
    assert SHALLOW.for_bits("int8") is SHALLOW  # not measured: the fp32 depth
    with pytest.raises(ValueError, match="quantized stats have 2 layers"):
        dataclasses.replace(SHALLOW, quantized=ExitStats((1.0, 0.5), 0.0))
    plans = {"fp32 only": _plan("mean"), "both": _plan("mean", stats=both)}
    rows = {k: {(tuple(sorted(c["candidate"].items()))): c for c in doc["considered"]} for k, doc in plans.items()}
    checked = set()
    for key, row in rows["both"].items():
        cand = dict(key)
        if not cand.get("exits"):
            continue
        alone = rows["both"][tuple(sorted((k, v) for k, v in cand.items() if k != "exits"))]
        shallow = rows["fp32 only"][key]
        if cand.get("bits", "fp32") == "fp32" and not cand.get("embeddings"):
            assert row["predicted_latency_ms"] == shallow["predicted_latency_ms"]
            checked.add("fp32")
        elif cand.get("bits") == "int8":
            assert row["predicted_latency_ms"] > shallow["predicted_latency_ms"]
            assert row["predicted_drop"] == pytest.approx(alone["predicted_drop"] + deep.drop)
            checked.add("int8")
    assert checked == {"fp32", "int8"}


def test_without_exit_stats_no_candidate_has_exits():
    doc = _plan("mean", stats=None)
    assert not any(c["candidate"].get("exits") for c in doc["considered"]) and doc["exit_stats"] is None


def test_an_accuracy_miss_with_exits_does_not_rule_out_the_same_candidate_without():
    from edgenlp.compress.planning import exclusions_after

    first = _plan("mean")
    chosen = first["chosen"]
    again = _plan("mean", excluded=exclusions_after(chosen, "accuracy"))
    labels = [c["candidate"] for c in again["considered"]]
    assert chosen not in labels and {k: v for k, v in chosen.items() if k != "exits"} in labels


def test_a_static_candidate_reads_as_before():
    from edgenlp.targets.planner import Candidate

    c = Candidate(prune_method="fast", sparsity=0.5, bits="int8")
    assert "exits" not in c.to_dict() and Candidate.from_dict(c.to_dict()) == c
    e = dataclasses.replace(c, exits=True)
    assert e.to_dict()["exits"] is True and Candidate.from_dict(e.to_dict()) == e and e.static == c
    assert e.label.endswith("early exits")


def test_compress_options_are_checked():
    from click.testing import CliRunner

    from edgenlp.cli import main
    from edgenlp.compress.config import CompressConfig

    with pytest.raises(ValueError, match="dynamic must be one of auto, joint, off"):
        CompressConfig(dynamic="on")
    with pytest.raises(ValueError, match="latency_stat must be one of"):
        CompressConfig(latency_stat="p50")
    for args in (["--dynamic", "maybe"], ["--latency-stat", "median"]):
        r = CliRunner().invoke(main, ["compress", *args, "--out", "/tmp/never-written-dynamic"])
        assert r.exit_code == 2 and "error:" in r.output and "Traceback" not in r.output, r.output
