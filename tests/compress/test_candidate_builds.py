"""``compress``'s candidate builds: recovery at the measured budget after pruning, the shortlist built at once on a parallel executor."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from edgenlp.compress import pipeline
from edgenlp.compress.config import PRESETS, RECOVERY_NAMES, CompressConfig
from edgenlp.compress.stages import StageRunner


def _compressor(tmp_path: Path, preset: str) -> pipeline.Compressor:
    c = pipeline.Compressor.__new__(pipeline.Compressor)
    c.config = CompressConfig(preset=preset, seed=3)
    c.preset = c.config.resolved_preset
    c.out, c.device, c.progress, c.stage_seconds = tmp_path, "cpu", False, {}
    c.data = SimpleNamespace(labels=("neg", "pos"))
    c.tuning = SimpleNamespace(name="tiny")
    c.budgets = SimpleNamespace(seq_len=128)
    c.runner = StageRunner(tmp_path, on_event=lambda *a: None)
    c.executor, c.echo = None, lambda msg: None
    return c


@pytest.fixture
def calls(monkeypatch):
    """Stub the model loading, pruning and recovery; record what prune and recover were asked to do."""
    import edgenlp.models.registry as registry
    import edgenlp.prune as prune_pkg
    import edgenlp.prune.recovery as recovery

    seen: dict[str, list] = {"prune": [], "recover": []}

    class Result:
        def __init__(self, report):
            self.report = report

        def save(self, path):
            Path(path).mkdir(parents=True)

    monkeypatch.setattr(registry, "load_model", lambda *a, **k: ("model", "info"))
    monkeypatch.setattr(prune_pkg, "prune", lambda model, info, task, cfg, **k: seen["prune"].append(cfg) or Result({}))
    monkeypatch.setattr(recovery, "recover", lambda res, model, info, task, cfg, **k: seen["recover"].append(cfg) or res)
    return seen


@pytest.mark.parametrize("method", ["fast", "importance"])
def test_a_pruning_that_does_not_distil_is_recovered_at_the_measured_budget(tmp_path, calls, method):
    c = _compressor(tmp_path, "quick")
    ft = SimpleNamespace(path=tmp_path / "finetune", result={"val": {"accuracy": 0.9}}, stage="finetune", run_id="f")
    plan = SimpleNamespace(result={"chosen": {"prune_method": method, "sparsity": 0.5}}, stage="plan", run_id="p")
    rec = c.prune(ft, plan, attempt=1)
    (cfg,) = calls["recover"]
    assert cfg == c.preset.recovery_config(seed=3)  # the preset's recovery, this run's seed
    assert cfg.budget() == c.preset.prune_budget(method)["recovery"]  # ... which is the budget the prior's rows name
    assert rec.inputs["recovery"] == cfg.to_dict()  # a changed recovery redoes the stage


def test_cofi_distils_by_itself_and_is_not_recovered_again(tmp_path, calls):
    c = _compressor(tmp_path, "full")
    ft = SimpleNamespace(path=tmp_path / "finetune", result={}, stage="finetune", run_id="f")
    plan = SimpleNamespace(result={"chosen": {"prune_method": "cofi", "sparsity": 0.5}}, stage="plan", run_id="p")
    rec = c.prune(ft, plan, attempt=1)
    assert len(calls["prune"]) == 1 and calls["recover"] == []
    assert rec.inputs["recovery"] is None and "recovery" not in c.preset.prune_budget("cofi")


def test_no_pruning_no_recovery(tmp_path, calls):
    c = _compressor(tmp_path, "quick")
    ft = SimpleNamespace(path=tmp_path / "finetune", result={}, stage="finetune", run_id="f")
    plan = SimpleNamespace(result={"chosen": {"prune_method": None, "sparsity": 0.0}}, stage="plan", run_id="p")
    rec = c.prune(ft, plan, attempt=1)
    assert calls == {"prune": [], "recover": []} and rec.result["identity"]


@pytest.mark.parametrize("recovery", [None, *RECOVERY_NAMES])
def test_every_preset_recovers_with_a_valid_config(recovery):
    for name in PRESETS:
        cfg = CompressConfig(preset=name, recovery=recovery).resolved_preset.recovery_config(seed=0)
        assert cfg.max_steps and cfg.train_limit, name  # bounded: compress spends what the prior measured, no more
        # max_steps is the length of the run (the budget leaves epochs out): epochs never end it first, even on a
        # task of 1,000 rows
        assert cfg.epochs * 1000 >= cfg.max_steps * cfg.batch_size, (name, recovery)
        assert set(cfg.budget()) == set(cfg.field_names()) - set(cfg.NOT_BUDGET) - {"epochs"}


def test_the_long_recovery_reaches_the_recovery_step_the_plan_and_the_cache_key(tmp_path, calls):
    """``--recovery long`` recovers with the long budget, plans with the prior's rows at it, and keeps its measured
    candidates apart from the short recovery's; naming the preset's own recovery changes nothing."""
    import dataclasses

    from edgenlp.compress.config import RECOVERY_BUDGETS

    c = _compressor(tmp_path, "quick")
    c.data = SimpleNamespace(labels=("neg", "pos"), num_labels=2)
    c.data_key = {"task": "tiny"}
    ft = SimpleNamespace(path=tmp_path / "finetune", result={}, stage="finetune", run_id="f")
    short_key, short_budget = c.measured_key(ft), c.preset.prune_budget_map()
    assert "recovery" not in short_key
    c.config = dataclasses.replace(c.config, recovery="short")
    c.preset = c.config.resolved_preset
    assert (c.measured_key(ft), c.preset.prune_budget_map()) == (short_key, short_budget)
    c.config = dataclasses.replace(c.config, recovery="long")
    c.preset = c.config.resolved_preset
    plan = SimpleNamespace(result={"chosen": {"prune_method": "fast", "sparsity": 0.7}}, stage="plan", run_id="p")
    rec = c.prune(ft, plan, attempt=1)
    (cfg,) = calls["recover"]
    assert cfg.to_dict() == {**cfg.to_dict(), **dict(RECOVERY_BUDGETS["long"])} and cfg.max_steps > 300
    assert rec.inputs["recovery"] == cfg.to_dict() and rec.inputs["budget"]["recovery"] == cfg.budget()
    assert c.preset.prune_budget_map()["fast"]["recovery"] == cfg.budget() != short_budget["fast"]["recovery"]
    assert c.measured_key(ft) == {**short_key, "recovery": cfg.budget()}


def test_recovery_is_validated():
    with pytest.raises(ValueError, match="recovery must be one of"):
        CompressConfig(recovery="longer")


class ParallelExecutor:
    """A stand-in for a pool / Ray executor: records each batch it is handed, runs the tasks here."""

    backend = "pool"

    def __init__(self):
        self.batches: list[list[str]] = []

    def describe(self) -> str:
        return "on a fake pool"

    def map(self, tasks, on_result=None):
        from edgenlp.executor import Outcome

        self.batches.append([t.key for t in tasks])
        return [Outcome(t.key, "ok", t.fn(*t.args, **dict(t.kwargs))) for t in tasks]


def test_a_parallel_executor_builds_the_shortlists_stages_at_once_with_the_same_records(tmp_path, calls):
    """Two pruned candidates: one batch of both prune builds; the records equal those of building one at a time."""
    ft = SimpleNamespace(path=tmp_path / "finetune", result={}, stage="finetune", run_id="f")
    plan = SimpleNamespace(result={}, stage="plan", run_id="p")
    cands = [{"prune_method": "fast", "sparsity": 0.5}, {"prune_method": "fast", "sparsity": 0.7}]

    records = {}
    for name, executor in (("inline", None), ("pool", ParallelExecutor())):
        c = _compressor(tmp_path / name, "quick")
        c.executor = executor
        c.prebuild([c.prune_build(ft, plan, 1, cand, slot) for slot, cand in enumerate(cands, 1)])
        if executor is not None:
            assert executor.batches == [["prune", "prune-c2"]]  # both at once, before either stage runs
            assert sorted(p.name for p in (tmp_path / name).iterdir()) == [".prune-c2.tmp-prebuild", ".prune.tmp-prebuild"]
        recs = [c.prune(ft, plan, 1, cand, slot) for slot, cand in enumerate(cands, 1)]
        if executor is not None:
            assert executor.batches == [["prune", "prune-c2"]]  # the stages moved the builds in, nothing built again
        assert sorted(p.name for p in (tmp_path / name).iterdir()) == ["prune", "prune-c2"]  # no scratch left
        assert all((r.path / "model").is_dir() for r in recs)
        records[name] = [(r.stage, r.inputs, r.result) for r in recs]
    assert records["inline"] == records["pool"]
    # an up-to-date stage is not built again, and one build alone runs in its stage
    c = _compressor(tmp_path / "pool", "quick")
    c.executor = ParallelExecutor()
    c.prebuild([c.prune_build(ft, plan, 1, cand, slot) for slot, cand in enumerate(cands, 1)])
    assert c.executor.batches == []


def test_a_candidate_that_fails_its_parity_check_is_reported_and_the_others_are_measured(monkeypatch, tmp_path):
    from edgenlp.compress import report
    from edgenlp.errors import EdgeNLPError, ParityError

    good, bad = {"prune_method": None, "sparsity": 0.0, "bits": "int8"}, {"prune_method": None, "sparsity": 0.0, "bits": "int4"}

    def run(shortlist, fails):
        c = pipeline.Compressor.__new__(pipeline.Compressor)
        c.config, c.out, c.echo = CompressConfig(max_attempts=1), tmp_path, lambda msg: None
        seen = {}

        def export(pr, plan, attempt, cand, slot):
            if cand in fails:
                raise ParityError(f"export parity failed ({cand['bits']})")
            return SimpleNamespace(stage=f"export-{slot}", cand=cand)

        def measure(ft, plan, built, attempt, not_built=None):
            seen.update(built=[b[0]["candidate"] for b in built], not_built=not_built)
            return SimpleNamespace(result={"chosen_index": 0, "why": "#1", "rows": [{"candidate": seen["built"][0], "meets": True}]})

        plan = SimpleNamespace(result={"chosen": shortlist[0], "shortlist": [{"candidate": x} for x in shortlist]})
        for name, fn in {"clear_final_outputs": lambda: None, "calibrate_host": lambda: None, "finetune": lambda: "ft",
                         "baseline": lambda ft: "base", "exits": lambda ft: None, "plan": lambda *a: plan, "prune": lambda *a: "pr", "export": export,
                         "measure": measure,
                         "verify": lambda *a: SimpleNamespace(result={"passed": True, "failures": []})}.items():
            monkeypatch.setattr(c, name, fn)
        monkeypatch.setattr(report, "write_reports", lambda comp, **kw: {})
        c.run()
        return seen

    seen = run([bad, good], fails=[bad])
    assert seen["built"] == [good] and [n["candidate"] for n in seen["not_built"]] == [bad]
    assert "parity" in seen["not_built"][0]["error"]
    with pytest.raises(ParityError):  # the plan's only candidate: its own error, as before
        run([bad], fails=[bad])
    with pytest.raises(EdgeNLPError, match="no candidate of the shortlist was built"):
        run([bad, good], fails=[bad, good])


def test_a_block_sparse_candidate_is_sparsified_at_the_measured_budget(tmp_path, calls, monkeypatch):
    """An unpruned block-sparse candidate gets a prune stage of its own: sparsify only, at the preset's budget and seed."""
    import edgenlp.prune.sparsity as sparsity

    seen = []

    class Result:
        report = {"block": "1x4", "mean_sparsity": 0.7, "distill": {"dev_before": {}, "dev_after": {}}, "wall_s": 1.0}

        def save(self, path):
            Path(path).mkdir(parents=True)

    monkeypatch.setattr(sparsity, "sparsify", lambda model, info, task, cfg, **k: seen.append((cfg, k["teacher"])) or Result())
    c = _compressor(tmp_path, "quick")
    ft = SimpleNamespace(path=tmp_path / "finetune", result={"val": {"accuracy": 0.9}}, stage="finetune", run_id="f")
    plan = SimpleNamespace(result={"chosen": {"bits": "int8", "block_sparsity": 0.7}}, stage="plan", run_id="p")
    rec = c.prune(ft, plan, attempt=1)
    (cfg, teacher), = seen
    assert cfg == c.preset.sparsify_config(0.7, seed=3) and teacher == "model"  # distilled from the fine-tuned model
    assert not calls["prune"] and not calls["recover"]
    assert rec.inputs["sparsify"] == cfg.to_dict() and rec.result["sparsify"]["mean_sparsity"] == 0.7
    assert not rec.result["identity"]


def test_prune_candidate_sparsifies_a_real_model(tmp_path, tiny_model_dir, tiny_task_dir):
    """The build task itself: every encoder linear of the saved model has the candidate's block sparsity, and its
    recipe says so (what export reads to run the sparse ops)."""
    from edgenlp.compress.build import prune_candidate
    from edgenlp.data.tasks import load_task
    from edgenlp.models.registry import load_model
    from edgenlp.prune.config import SparsifyConfig
    from edgenlp.prune.sparsity import encoder_linears
    from edgenlp.sparse.ops import block_sparsity

    task = load_task(tiny_task_dir)
    cfg = SparsifyConfig(sparsity=0.6, epochs=100.0, max_steps=3, batch_size=8, max_seq_len=16, threads=1)
    out = prune_candidate(str(tiny_model_dir), str(tmp_path / "m"), candidate={"bits": "int8", "block_sparsity": 0.6},
                          labels=task.labels, task=task, prune_kwargs={}, seq_len=16, seed=0, recovery=None,
                          sparsify=cfg.to_dict())  # fmt: skip
    model, info = load_model(tmp_path / "m")
    linears = dict(model.named_modules())
    assert all(block_sparsity(linears[n].weight, "1x4") >= 0.59 for n in encoder_linears(model))  # floor(0.6 x blocks)
    assert info.recipe[-1].type == "sparsify" and out["sparsify"]["mean_sparsity"] >= 0.59


@pytest.mark.parametrize("prune_target", ["params", "latency"])
def test_a_latency_pruning_target_reaches_the_prune_step_and_the_cache_key(tmp_path, calls, monkeypatch, prune_target):
    """With ``--prune-target latency`` every pruning measures latency at the cost model's attention weight, and the
    stage and the measured-candidate cache say so; with ``params`` neither changes (the cache keeps its rows)."""
    import dataclasses
    import json

    from edgenlp.compress import planning

    monkeypatch.setattr(planning, "attention_weight", lambda target, shape, **k: 5.4321)
    c = _compressor(tmp_path, "quick")
    c.config = dataclasses.replace(c.config, prune_target=prune_target)
    c.target = SimpleNamespace(name="host")
    c.budgets = SimpleNamespace(seq_len=128, threads=1)
    c.data = SimpleNamespace(labels=("neg", "pos"), num_labels=2)
    c.data_key = {"task": "tiny"}
    (tmp_path / "finetune" / "model").mkdir(parents=True)
    (tmp_path / "finetune" / "model" / "config.json").write_text(json.dumps(
        {"model_type": "bert", "hidden_size": 32, "num_attention_heads": 4, "num_hidden_layers": 2,
         "intermediate_size": 64, "vocab_size": 100}))
    ft = SimpleNamespace(path=tmp_path / "finetune", result={}, stage="finetune", run_id="f")
    plan = SimpleNamespace(result={"chosen": {"prune_method": "fast", "sparsity": 0.5}}, stage="plan", run_id="p")
    rec = c.prune(ft, plan, attempt=1)
    (cfg,) = calls["prune"]
    key = c.measured_key(ft)
    if prune_target == "latency":
        assert (cfg.target, cfg.attention_weight) == ("latency", 5.4)
        assert rec.inputs["measure"] == key["prune_measure"] == {"target": "latency", "attention_weight": 5.4}
    else:
        assert cfg.target == "params" and "measure" not in rec.inputs and "prune_measure" not in key


@pytest.mark.parametrize("executor", [None, "pool"])
def test_a_candidate_with_exits_is_built_on_its_static_twins_pruning(tmp_path, calls, monkeypatch, executor):
    """A pruned candidate with early exits adds them to the pruned model of its twin without: each pruning and its
    recovery run once, however many candidates share them; an unpruned one takes the exits stage's model as is."""
    import edgenlp.dynamic.api as dynamic_api
    from edgenlp.dynamic.config import DynamicConfig

    exits_on = []

    class Dynamic:
        model = SimpleNamespace(spec=SimpleNamespace(threshold=0.9))
        report = {"validation": {"chosen": {"drop": 0.1, "mean_exit_layer": 3.0, "reach": [1.0, 0.5]}}}

        def save(self, path):
            Path(path).mkdir(parents=True)

    monkeypatch.setattr(dynamic_api, "make_dynamic", lambda model, info, task, cfg, **k: exits_on.append(cfg) or Dynamic())
    c = _compressor(tmp_path, "quick")
    c.executor = ParallelExecutor() if executor else None
    c.exits_rec = SimpleNamespace(result={"enabled": True, "config": DynamicConfig().to_dict()})
    ft = SimpleNamespace(path=tmp_path / "finetune", result={}, stage="finetune", run_id="f")
    plan = SimpleNamespace(result={}, stage="plan", run_id="p")
    fast = {"prune_method": "fast", "sparsity": 0.5, "bits": "int8"}
    cands = [fast, {**fast, "exits": True}, {**fast, "bits": "int4"}, {"prune_method": None, "sparsity": 0.0, "exits": True},
             {**fast, "sparsity": 0.6, "exits": True}]
    recs = c.prune_shortlist(ft, plan, 1, cands)
    assert len(calls["prune"]) == len(calls["recover"]) == 2 and len(exits_on) == 2  # fast 50% and 60%, once each
    assert [r.stage for r in recs] == ["prune", "prune-exits-c2", "prune", "prune-c4", "prune-exits-c5"]
    assert [r.result.get("pruned_by") for r in recs] == [None, "prune", None, None, "prune-c5"]
    assert recs[3].result == {"identity": True, "model": "exits/model"}
    assert recs[1].result["exits"]["threshold"] == 0.9 and recs[1].inputs["exits"] == DynamicConfig().to_dict()
    if executor:  # the static prunings at once, then the exits on them at once
        assert c.executor.batches == [["prune", "prune-c5"], ["prune-exits-c2", "prune-exits-c5"]]
