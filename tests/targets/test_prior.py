"""The accuracy prior holds measured rows only, each found in the results file it names; unmeasured points are never silent."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from edgenlp.targets.planner import Candidate, SearchSpace, plan
from edgenlp.targets.prior import AccuracyModel, load_prior, prior_path
from edgenlp.targets.target import Budgets, load_target

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "tools" / "bench" / "results"


def _results(row: dict) -> dict:
    src = REPO / row["source"]
    assert src.resolve().parent == RESULTS.resolve(), f"{row['source']} is not under tools/bench/results/"
    return json.loads(src.read_text())


def _measured_recovered(row: dict) -> dict[str, float]:
    """The drop per task of (method, sparsity) after the recovery chosen on validation, at the budget the row names."""
    from edgenlp.prune.config import DistillConfig

    out = {}
    for task, doc in _results(row)["tasks"].items():
        chosen = [r for r in doc["rows"] if r["method"] == row["method"] and abs(r["sparsity"] - row["sparsity"]) < 1e-9
                  and r.get("chosen")]  # fmt: skip
        if not chosen:
            continue
        (r,) = chosen
        best = max((x for x in doc["rows"] if x["method"] == r["method"] and x["sparsity"] == r["sparsity"] and x["steps"]
                    == r["steps"]), key=lambda x: x["val_accuracy"])  # fmt: skip
        assert best["val_accuracy"] == r["val_accuracy"], "the chosen recovery is the best on validation, not on dev"
        assert DistillConfig.from_dict(r["config"]).budget() == row["budget"]["recovery"], row
        ran = {k: 0.0 if r["prune_config"].get(k) is None else r["prune_config"][k] for k in row["budget"] if k != "recovery"}
        assert ran == {k: v for k, v in row["budget"].items() if k != "recovery"}, (row, ran)
        # a recovered row's drop is its validation drop (the split compress checks candidates on), not its dev drop
        assert row.get("basis") == "validation", row
        out[task] = 100.0 * (doc["teacher"]["val_accuracy"] - r["val_accuracy"])
    return out


def _measured_prune(row: dict) -> dict[str, float]:
    """The drop per task of (method, target sparsity) in the row's results file, at the budget the row names."""
    if "recovery" in row["budget"]:
        return _measured_recovered(row)
    doc, out = _results(row), {}
    for r in doc["rows"]:
        if r["method"] != row["method"] or abs(float(r["target"]) - row["sparsity"]) > 1e-9:
            continue
        config = doc["tasks"][r["task"]]["runs"][f"{r['method']}-{round(100 * r['target'])}"]["report"]["config"]
        defaults = {"epochs": {"cofi": 2.0}.get(row["method"], 0.0), "finetune_epochs": {"cofi": 1.0}.get(row["method"], 0.0)}
        ran = {k: config.get(k) if config.get(k) is not None else defaults.get(k) for k in row["budget"]}
        assert ran == row["budget"], (row, ran)
        out[r["task"]] = float(r["drop_points"])
    return out


def _measured_quant(row: dict) -> dict[str, float]:
    tasks = _results(row)["tasks"]
    return {t: 100.0 * (v[row["against"]]["acc_executorch"] - v[row["variant"]]["acc_executorch"]) for t, v in tasks.items()
            if row["variant"] in v and row["against"] in v}  # fmt: skip


def _measured_blocks(row: dict) -> dict[str, float]:
    """The drop of ``sparsify`` at the row's block sparsity and budget: its int8 bundle against the teacher's."""
    doc = _results(row)
    out = {}
    for r in doc["runs"]:
        budget = {"block": r["block"], **{k: doc[k] for k in ("max_steps", "batch_size", "max_seq_len", "lr")}}
        if abs(r["sparsity"] - row["block_sparsity"]) < 1e-9 and budget == row["budget"]:
            assert r["mean_sparsity"] == pytest.approx(r["sparsity"], abs=1e-3)  # the pattern reached its target
            out[doc["task"]] = 100.0 * (doc["teacher_bundle"]["dev"]["accuracy"] - r["bundle"]["dev"]["accuracy"])
    return out


def test_the_prior_has_no_unmeasured_rows():
    """Every row names a results file under tools/bench/results/ that holds its numbers; its drop is their mean."""
    prior = load_prior()
    rows = [("prune", r) for r in prior["prune"]] + [(k, r) for k in ("bits", "embeddings", "trim_vocab", "block_sparsity")
                                                     for r in prior[k]]  # fmt: skip
    assert {k for k, _ in rows} == {"prune", "bits", "embeddings", "trim_vocab", "block_sparsity"}
    for kind, row in rows:
        found = (_measured_prune(row) if kind == "prune" else _measured_blocks(row) if kind == "block_sparsity"
                 else _measured_quant(row))  # fmt: skip
        assert found, f"{row['source']} has no measurement for {row}"
        assert row["measured"].keys() == found.keys(), row
        for task, v in found.items():
            assert row["measured"][task] == pytest.approx(v, abs=5e-4), (row, task)
        assert row["drop"] == pytest.approx(sum(found.values()) / len(found), abs=5e-4), row
    # the file is exactly what the builder makes from the results today (no row added or edited by hand)
    spec = importlib.util.spec_from_file_location("accuracy_prior", REPO / "tools" / "bench" / "accuracy_prior.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert json.loads(prior_path().read_text()) == mod.build()


def test_cofi_prior_is_this_projects_measurement_at_each_budget():
    short = {"train_limit": 4000, "epochs": 1.0, "finetune_epochs": 1.0, "max_seq_len": 64, "batch_size": 32}
    long = {**short, "train_limit": 8000, "epochs": 3.0, "finetune_epochs": 2.0}
    at_short = AccuracyModel(budgets={"cofi": short})
    assert at_short.prune_point("cofi", 0.5).drop == pytest.approx((3.9 + 5.4) / 2)  # prune-cofi.md, not the paper's 1.2
    # the full preset's budget, from the teachers compress fine-tunes (prune-cofi-compress.md), both tasks at 50% and 70%
    at_long = AccuracyModel(budgets={"cofi": long})
    assert at_long.sparsities("cofi") == (0.5, 0.7)
    assert at_long.prune_point("cofi", 0.5).drop == pytest.approx((0.23 + 0.0) / 2)
    assert at_long.prune_point("cofi", 0.7).drop == pytest.approx((1.61 + 0.1) / 2)
    assert at_long.prune_point("cofi", 0.7).sources == ("tools/bench/results/prune-cofi-compress.json",)
    assert AccuracyModel(budgets={"cofi": long}, task="sst2").prune_point("cofi", 0.7).drop == pytest.approx(1.61)


def test_unmeasured_points_are_not_offered_or_are_labelled():
    fast = {"samples": 1024, "max_seq_len": 64, "epochs": 0.0, "finetune_epochs": 0.0}
    acc = AccuracyModel(budgets={"fast": fast, "cofi": {"train_limit": 1, "epochs": 9.0}})  # cofi: a budget nobody measured
    assert acc.methods() == ("fast",) and acc.sparsities("fast") == (0.3, 0.5, 0.7, 0.9)
    assert acc.explain(Candidate(prune_method="fast", sparsity=0.5)).basis == "measured"
    assert acc.explain(Candidate(prune_method="fast", sparsity=0.4)).basis == "interpolated"
    assert acc.explain(Candidate(prune_method="fast", sparsity=0.95)).basis == "extrapolated"
    assert acc.explain(Candidate(prune_method="cofi", sparsity=0.5)).basis == "unmeasured"
    assert acc.explain(Candidate(prune_method="importance", sparsity=0.5)).basis == "unmeasured"  # no budget given for it
    host = load_target("pixel-7")
    space = SearchSpace(methods=("fast", "cofi"), sparsities=(0.0, 0.4, 0.5), bits=("int8",), embeddings=(None,), trim_vocab=(False,))
    p = plan(host, Budgets(seq_len=128, threads=2), accuracy_model=acc, space=space)
    offered = {c.candidate for c in p.considered}
    assert {c.prune_method for c in p.not_offered} == {"cofi"} and not any(c.prune_method == "cofi" for c in offered)
    basis = {(c.candidate.prune_method, c.candidate.sparsity): c.prior.basis for c in p.considered}
    assert basis == {(None, 0.0): "measured", ("fast", 0.4): "interpolated", ("fast", 0.5): "measured"}
    assert all(c["prior"]["basis"] for c in p.to_dict()["considered"])


def test_compress_offers_each_method_at_the_measured_budget_only():
    """The presets spend exactly a budget the prior measured; the plan offers those sparsities and nothing else."""
    from types import SimpleNamespace

    from edgenlp.compress.config import PRESETS
    from edgenlp.compress.planning import plan_for_compress, resolve_budgets
    from edgenlp.targets.costmodel import MINILM_L6

    for name, preset in PRESETS.items():
        acc = AccuracyModel(budgets=preset.prune_budget_map())
        assert set(acc.methods()) == set(preset.prune_methods), name  # every method the preset offers was measured at its budget
        t = load_target("pixel-7")
        doc = plan_for_compress(t, resolve_budgets(t, latency_ms=1e3, size_mb=1e3, memory_mb=1e4), shape=MINILM_L6, num_labels=2,
                                preset=preset, excluded=[], task=SimpleNamespace(name="sst2"), max_drop=100.0)  # fmt: skip
        pts = {(c["candidate"]["prune_method"], c["candidate"]["sparsity"]) for c in doc["considered"]}
        want = {(None, 0.0)} | {(m, s) for m in preset.prune_methods for s in acc.sparsities(m)}
        assert pts == want, name
        assert all(c["prior"]["basis"] == "measured" for c in doc["considered"])
        assert doc["prior"]["methods_without_rows"] == []


def test_compress_prunes_with_the_budget_the_prior_measured():
    """The prune config compress builds for each method runs exactly the budget of the prior's rows (knobs a method lacks never ran)."""
    from edgenlp.compress.config import PRESETS, RECOVERY_NAMES, CompressConfig
    from edgenlp.prune import prune_config

    for name, recovery in [(n, r) for n in PRESETS for r in (None, *RECOVERY_NAMES)]:
        preset = CompressConfig(preset=name, recovery=recovery).resolved_preset
        acc = AccuracyModel(budgets=preset.prune_budget_map())
        for method in preset.prune_methods:
            cfg = prune_config(method, target_sparsity=0.5, **preset.prune_kwargs(method))
            measured = acc.budget_of(method)
            ran = {k: getattr(cfg, k) for k in measured if hasattr(cfg, k)}
            assert ran == {k: v for k, v in measured.items() if hasattr(cfg, k)}, (name, method)
            # a knob the method's config does not have is the "none of it" value the row recorded (no mask learning)
            assert all(v == 0.0 for k, v in measured.items() if not hasattr(cfg, k) and k != "recovery"), (name, method, measured)
            # the recovery distillation compress runs after it is the one the rows were measured with (none after CoFi)
            if preset.recovers_after(method):
                assert preset.recovery_config(seed=3).budget() == measured["recovery"], (name, method)
            else:
                assert "recovery" not in measured, (name, method)


def test_a_measured_pruning_loss_carries_to_every_candidate_pruned_alike():
    """The main job's case: fast 50% + int8 + int8 table + trimmed vocabulary measured 1.3 points on a stronger
    model, where the prior (measured on other models) said 0.80. The next plan must not offer the same pruned model
    under another quantization at the prior's 0.69, nor more pruning by the same method at less than its own prior
    plus that residual; other pruning methods and unpruned candidates keep the prior's drop."""
    from edgenlp.compress.config import PRESETS

    acc = AccuracyModel(budgets=PRESETS["quick"].prune_budget_map())
    built = Candidate(prune_method="fast", sparsity=0.5, bits="int8", embeddings="int8", trim_vocab=True)
    alike = Candidate(prune_method="fast", sparsity=0.5, bits="int8", embeddings="int4", trim_vocab=False)
    more = Candidate(prune_method="fast", sparsity=0.6, bits="int8", embeddings="int8", trim_vocab=True)
    unpruned = Candidate(bits="int8", embeddings="int8")
    measured = acc.drop(built) + 1.0  # the pruned model lost a point more than the prior said (relative: the prior moves)
    residual = measured - acc.drop(built)
    after = acc.with_measured_candidates([{"candidate": built.to_dict(), "drop": measured, "source": "validation"}])
    assert after.drop(built) == pytest.approx(measured)
    assert after.drop(alike) == pytest.approx(acc.drop(alike) + residual)
    assert after.drop(alike) > 1.0 and "pruned alike" in after.explain(alike).note
    assert after.drop(more) == pytest.approx(acc.drop(more) + residual)
    assert after.drop(unpruned) == pytest.approx(acc.drop(unpruned))
    # a pruning that lost less than the prior said: candidates pruned alike come down, heavier pruning does not
    lucky = acc.with_measured_candidates([{"candidate": built.to_dict(), "drop": acc.drop(built) - 0.5}])
    assert lucky.drop(alike) < acc.drop(alike) and lucky.drop(more) == pytest.approx(acc.drop(more))
    # an exits candidate's measured drop includes the exits' own loss: it moves no static candidate
    with_exits = {**built.to_dict(), "exits": True}
    assert acc.with_measured_candidates([{"candidate": with_exits, "drop": 3.0}]).drop(alike) == pytest.approx(acc.drop(alike))


def _two_task_table() -> dict:
    budget = {"samples": 8}
    return {"schema": "edgenlp.accuracy-prior/1",
            "prune": [{"method": "fast", "sparsity": 0.5, "budget": budget, "measured": {"a": 1.0, "b": 3.0}, "drop": 2.0,
                       "source": "x.json"},
                      {"method": "fast", "sparsity": 0.7, "budget": budget, "measured": {"b": 6.0}, "drop": 6.0,
                       "source": "y.json"}],
            "bits": [{"bits": "int8", "measured": {"a": 0.1, "b": 0.5}, "drop": 0.3, "source": "q.json"}]}


def test_a_measured_task_is_predicted_by_its_own_rows_and_any_other_by_their_mean():
    table = _two_task_table()
    c50, c70 = Candidate(prune_method="fast", sparsity=0.5), Candidate(prune_method="fast", sparsity=0.7)
    q = Candidate(bits="int8")
    own = AccuracyModel(table, task="a")
    assert own.drop(c50) == pytest.approx(1.0) and own.drop(q) == pytest.approx(0.1)
    assert own.drop(c70) == pytest.approx(6.0)  # measured on b only: the mean of what there is
    assert AccuracyModel(table, task="b").drop(c50) == pytest.approx(3.0)
    for other in (AccuracyModel(table), AccuracyModel(table, task="c")):  # no task, or one the prior never measured
        assert other.drop(c50) == pytest.approx(2.0) and other.drop(q) == pytest.approx(0.3) and other.task_rows() == 0
    assert own.task_rows() == 2 and own.to_dict()["task"] == "a"
    # the spread that breaks ties stays the one of the means (a task's own row holds one run's noise)
    assert own.tolerance() == pytest.approx(AccuracyModel(table).tolerance())
    # copies keep the task: a measured candidate or a measured row adds to the task's rows, never to the mean's
    after = own.with_measured_candidates([{"candidate": q.to_dict(), "drop": 0.9}])
    assert after.task == "a" and after.drop(c50) == pytest.approx(1.0) and after.drop(q) == pytest.approx(0.9)
    refreshed = own.with_measured([{"prune_method": "fast", "sparsity": 0.7, "drop": 4.0}])
    assert refreshed.drop(c50) == pytest.approx(1.0) and refreshed.drop(c70) == pytest.approx(4.0)
    assert table["prune"][0]["drop"] == 2.0  # the caller's table is untouched


def test_compress_plans_a_builtin_task_on_its_own_rows_and_a_users_folder_on_the_mean(tmp_path):
    """Only a built-in task's data is what the prior's rows measured: a user's folder that happens to be named after one
    (same name, other data) is planned on the mean. The shipped prior's banking77 rows differ from the mean."""
    import dataclasses

    from edgenlp.compress.config import PRESETS
    from edgenlp.compress.planning import plan_for_compress, resolve_budgets
    from edgenlp.data.tasks import load_task
    from edgenlp.targets.costmodel import MINILM_L6

    folder = tmp_path / "banking77"
    folder.mkdir()
    (folder / "train.tsv").write_text("text\tlabel\na\tx\nb\ty\nc\tx\nd\ty\n")
    (folder / "dev.tsv").write_text("text\tlabel\ne\tx\nf\ty\n")
    user = load_task(folder)
    assert user.name == "banking77" and not user.builtin
    assert not user.hold_out(1, seed=0)[0].builtin
    preset = PRESETS["quick"]
    t = load_target("pixel-7")
    budgets = resolve_budgets(t, latency_ms=1e3, size_mb=1e3, memory_mb=1e4)
    builtin = dataclasses.replace(user, builtin=True)
    assert builtin.hold_out(1, seed=0)[0].builtin
    docs = {which: plan_for_compress(t, budgets, shape=MINILM_L6, num_labels=77, preset=preset, excluded=[], task=task,
                                     max_drop=100.0)
            for which, task in (("user", user), ("builtin", builtin))}
    assert docs["user"]["prior"]["task"] is None and docs["user"]["prior"]["task_rows"] == 0
    assert docs["builtin"]["prior"]["task"] == "banking77" and docs["builtin"]["prior"]["task_rows"] > 0
    rows = AccuracyModel(budgets=preset.prune_budget_map()).rows()
    differ = 0
    for which, want in (("user", lambda r: r["drop_mean"]), ("builtin", lambda r: r["measured"].get("banking77", r["drop"]))):
        drops = {(c["candidate"]["prune_method"], c["candidate"]["sparsity"]): c["predicted_drop"]
                 for c in docs[which]["considered"] if c["candidate"]["bits"] == "fp32" and not c["candidate"]["embeddings"]
                 and not c["candidate"]["trim_vocab"] and not c["candidate"].get("block_sparsity") and not c["candidate"].get("exits")}
        for r in rows:
            if "method" in r and (r["method"], r["sparsity"]) in drops:
                assert drops[(r["method"], r["sparsity"])] == pytest.approx(max(0.0, want(r)), abs=1e-3), (which, r)
                differ += which == "builtin" and abs(want(r) - r["drop_mean"]) > 0.1
    assert differ, "the shipped prior's banking77 rows should differ from their means somewhere"
