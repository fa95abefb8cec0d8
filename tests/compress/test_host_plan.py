"""compress for the ``host`` target: this machine is calibrated first (once), and a bundle slower than the uncompressed program is refused."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from edgenlp.compress.config import CompressConfig
from edgenlp.compress.planning import exclusions_after, is_excluded
from edgenlp.compress.verify import held_text, host_speed_gate, judge, load_corrected
from edgenlp.targets.costmodel import CostTable, host_table_path


def cand(sparsity=0.0, bits="fp32", method="fast", emb=None, trim=False):
    return {"prune_method": method if sparsity else None, "sparsity": sparsity, "bits": bits, "embeddings": emb, "trim_vocab": trim}


def _compressor(tmp_path, target: str, echo: list):
    from edgenlp.compress import pipeline
    from edgenlp.compress.planning import load_target, resolve_budgets

    c = pipeline.Compressor.__new__(pipeline.Compressor)
    c.config, c.out, c.echo, c.progress = CompressConfig(target=target, max_attempts=3), tmp_path, echo.append, False
    c.preset = c.config.resolved_preset
    c.target = load_target(target)
    c.budgets = resolve_budgets(c.target)
    return c


def test_host_target_without_calibration_calibrates_first_and_caches(tmp_path, monkeypatch, fake_calibrate):
    monkeypatch.setenv("EDGENLP_CACHE_DIR", str(tmp_path / "cache"))
    echo: list[str] = []
    c = _compressor(tmp_path, "host", echo)
    assert not host_table_path().is_file()
    assert "until `edgenlp targets calibrate host`" in c.target.description  # not calibrated: the reference host's rates
    c.calibrate_host()
    assert host_table_path().is_file() and len(fake_calibrate) == 1
    kw = fake_calibrate[0]
    assert kw["grid"] == "minimal" and kw["threads"] == (1,) and kw["seq_lens"] == (32, 128)
    assert [p for _, p in kw["runtime_precisions"]] == ["fp32", "int8", "int4"]  # what the quick preset may choose
    assert any("measuring a minimal grid" in e for e in echo) and any("calibrating this machine 3/3" in e for e in echo)
    assert CostTable.load(host_table_path()).notes["grid"] == "minimal"
    assert c.target.clusters[0].fp32_gflops_per_core == 33.0  # the host target now carries this machine's rate
    # the plan for the host reads this machine's table, not the shipped one
    from edgenlp.targets.costmodel import CostModel, cost_table_sources

    assert cost_table_sources(c.target) == [host_table_path()]
    assert not CostModel.for_target(c.target).table.notes.get("shipped_reference")
    # the second time: cached, nothing measured
    echo.clear()
    c2 = _compressor(tmp_path, "host", echo)
    c2.calibrate_host()
    assert len(fake_calibrate) == 1 and not any("minimal grid" in e for e in echo)


def test_device_target_is_never_calibrated_here(tmp_path, monkeypatch, fake_calibrate):
    monkeypatch.setenv("EDGENLP_CACHE_DIR", str(tmp_path / "cache"))
    _compressor(tmp_path, "pixel-7", []).calibrate_host()
    assert not fake_calibrate and not host_table_path().is_file()


def test_host_speed_gate_refuses_a_bundle_slower_than_the_uncompressed_program():
    slow = {"speedup": 0.631, "baseline_ms": 21.44, "bundle_ms": 33.98, "method": "alternating runs in one process (median each)"}
    gate = host_speed_gate(slow, on_host=True, candidate=cand(bits="int4", emb="int8"))
    assert gate["applies"] and not gate["passed"]
    assert host_speed_gate({**slow, "speedup": 1.4}, on_host=True, candidate=cand(bits="int8"))["passed"]
    assert host_speed_gate(slow, on_host=False, candidate=cand(bits="int4"))["passed"]  # a device: the host's speed does not decide
    assert not host_speed_gate(slow, on_host=True, candidate=cand())["applies"]  # the uncompressed model itself
    ok = {"passed": True}
    checks = {"accuracy": {**ok, "drop_points": 0.3, "limit": 1.0}, "size_mb": ok, "latency_ms": ok, "memory_mb": ok,
              "host_speedup": gate}  # fmt: skip
    failures, kind = judge(checks, on_host=True)
    assert kind == "slower" and "host speed-up 0.631x < 1" in failures[0] and "33.98 ms vs 21.44 ms" in failures[0]
    failures, kind = judge({**checks, "size_mb": {"passed": False, "measured": 30, "budget": 25}}, on_host=True)
    assert kind == "budget" and len(failures) == 2
    # a slower bundle rules out its precision at its pruning or less, not the other precisions
    rules = exclusions_after(cand(bits="int4", emb="int8"), "slower")
    assert is_excluded(cand(bits="int4", emb="int8"), rules)
    assert is_excluded(cand(0.0, "int4", emb="int8"), rules)
    assert not is_excluded(cand(0.5, "int4", emb="int8"), rules)  # pruned further: fewer of the slow FLOPs
    assert not is_excluded(cand(bits="int8", emb="int8"), rules) and not is_excluded(cand(bits="fp32"), rules)


def test_a_busier_host_does_not_fail_a_latency_budget_the_bundle_meets_alone():
    # headline run, measured: a bundle that runs in 7.2 ms alone measured 17.7 ms while a training job held the cores;
    # the uncompressed program beside it ran 54.4 ms against 27.5 ms at the run's baseline stage
    beside = {"speedup": 3.515, "baseline_ms": 54.385, "bundle_ms": 15.473, "method": "alternating runs in one process"}
    ms, load = load_corrected(17.745, beside, 27.5035)
    assert load["corrected"] and load["factor"] == pytest.approx(1.977, abs=1e-3)
    assert ms == pytest.approx(17.745 / (54.385 / 27.5035))
    # as busy as at the baseline (within the tolerance), slower, or no alternating measurement: the measurement stands
    assert load_corrected(9.0, {**beside, "baseline_ms": 29.0}, 27.5035) == (9.0, pytest.approx({**load, "factor": 1.054, "corrected": False, "baseline_beside_ms": 29.0}))
    assert load_corrected(9.0, {**beside, "baseline_ms": 20.0}, 27.5035)[0] == 9.0
    assert load_corrected(9.0, {**beside, "method": "separate measurements (baseline stage, verify stage)"}, 27.5)[0] == 9.0
    assert load_corrected(9.0, beside, None)[0] == 9.0
    # the failure names what the budget was held to and why
    lat = {"passed": False, "budget": 7.202, "host_measured": 17.745, "host_decided": round(ms, 3), "load": load}
    failures, kind = judge({"accuracy": {"passed": True}, "latency_ms": lat}, on_host=True)
    assert kind == "budget" and failures == [f"latency ms {round(ms, 3)} > budget 7.202 (measured 17.745, divided by the "
                                             "host's load factor 1.977)"]
    assert held_text(lat) == f" (held as {round(ms, 3)} ms: the uncompressed program ran 1.977x slower than at the baseline)"
    assert held_text({**lat, "load": {**load, "corrected": False}}) == ""  # the report and the CLI add nothing then


def test_a_slower_bundle_is_replanned_and_the_report_says_why(monkeypatch, tmp_path):
    """Attempt 1 (int4) runs slower than fp32 on this host: attempt 2 plans without it, and the attempts record the gate."""
    from edgenlp.compress import pipeline, report

    c = pipeline.Compressor.__new__(pipeline.Compressor)
    c.config, c.out, c.echo = CompressConfig(target="host", max_attempts=3), tmp_path, lambda msg: None
    seen: list[list] = []
    chosen = [cand(bits="int4", emb="int8"), cand(bits="int8", emb="int8")]

    def plan(ft, attempt, excluded, ex=None):
        seen.append(list(excluded))
        return SimpleNamespace(result={"chosen": chosen[attempt - 1]})

    gate = host_speed_gate({"speedup": 0.63, "baseline_ms": 21.4, "bundle_ms": 34.0, "method": "alternating"}, on_host=True,
                           candidate=chosen[0])  # fmt: skip
    verdicts = iter([
        SimpleNamespace(result={"passed": False, "failures": ["host speed-up 0.63x < 1"], "failures_kind": "slower",
                                "host_speedup": gate}),
        SimpleNamespace(result={"passed": True, "failures": [], "failures_kind": None}),
    ])  # fmt: skip
    order: list[str] = []

    def logged(name, fn):
        return lambda *a: order.append(name) or fn(*a)

    for name, fn in {"clear_final_outputs": lambda: None, "calibrate_host": lambda: None, "finetune": lambda: "ft",
                     "baseline": lambda ft: "base", "exits": lambda ft: None, "plan": plan, "prune": lambda *a: "pr", "export": lambda *a: "ex",
                     "measure": lambda ft, plan, built, attempt, not_built=None: SimpleNamespace(result={
                         "chosen_index": 0, "why": "the plan's #1", "rows": [{"candidate": built[0][0]["candidate"], "meets": True}]}),
                     "verify": lambda *a: next(verdicts)}.items():  # fmt: skip
        monkeypatch.setattr(c, name, logged(name, fn))
    reported = {}
    monkeypatch.setattr(report, "write_reports", lambda comp, **kw: reported.update(kw) or {})
    c.run()
    assert seen == [[], [{"slower": chosen[0]}]]
    assert order.index("calibrate_host") < order.index("baseline") < order.index("plan")  # this machine's table before any plan
    assert reported["passed"]["attempt"] == 2 and reported["attempts"][0]["verify"].result["failures_kind"] == "slower"


def test_size_budget_holds_for_every_artifact_of_the_bundle():
    from edgenlp.compress.verify import size_check

    sizes = {"model.pte": 14_318_984, "model.onnx": 29_854_583, "vocab.txt": 231_508}  # the main job's bundle before #25.8
    c = size_check(sizes, budget_mb=25.0, predicted_mb=13.9, runtime="executorch")
    assert c["measured"] == 14.319 and c["artifact"] == "model.pte"  # reported on the target's own runtime file
    assert c["artifacts"] == {"model.onnx": 29.855, "model.pte": 14.319} and c["over_budget"] == ["model.onnx"]
    assert not c["passed"]
    failures, kind = judge({"accuracy": {"passed": True}, "size_mb": c}, on_host=False)
    assert kind == "budget" and failures == ["size model.onnx 29.855 MB > budget 25.0 MB"]
    onnx = size_check(sizes, budget_mb=25.0, predicted_mb=13.9, runtime="onnx")
    assert onnx["artifact"] == "model.onnx" and onnx["measured"] == 29.855 and not onnx["passed"]
    assert size_check(sizes, budget_mb=30.0, predicted_mb=13.9, runtime="onnx")["passed"]
    assert size_check(sizes, budget_mb=None, predicted_mb=13.9, runtime="executorch")["passed"]
    assert size_check({"model.pte": 20_000_000}, budget_mb=25.0, predicted_mb=19.0, runtime="onnx")["artifacts"] == {"model.pte": 20.0}


def test_size_budget_counts_a_dynamic_bundles_onnx_files_together():
    """A dynamic bundle's ONNX Runtime side needs model.onnx, every segment file and their shared weights at once."""
    from edgenlp.compress.verify import ONNX_SET, size_check

    sizes = {"model.pte": 9_000_000, "model.onnx": 400_000, "model.embed.onnx": 30_000, "model.seg0.onnx": 60_000,
             "model.seg1.onnx": 50_000, "model.onnx.data": 9_500_000, "vocab.txt": 231_508}
    c = size_check(sizes, budget_mb=10.0, predicted_mb=8.9, runtime="executorch")
    assert c["artifacts"] == {ONNX_SET: 10.04, "model.pte": 9.0} and c["over_budget"] == [ONNX_SET] and not c["passed"]
    onnx = size_check(sizes, budget_mb=10.5, predicted_mb=8.9, runtime="onnx")
    assert onnx["artifact"] == ONNX_SET and onnx["measured"] == 10.04 and onnx["passed"]
