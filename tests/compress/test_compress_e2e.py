"""``compress`` end to end on a tiny model: every stage, the bundle, the reports, resume (through the CLI too)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from edgenlp.compress import config as compress_config
from edgenlp.compress.config import CompressConfig
from edgenlp.compress.pipeline import STAGES, compress


@pytest.fixture
def quick_tiny(monkeypatch):
    """The quick preset scaled to a 4-row task (a few steps, few timed runs)."""
    small = dataclasses.replace(compress_config.PRESETS["quick"], max_steps=12, method_steps=(), train_limit=None, priming_steps=4,
                                prune_samples=8, profile_runs=2)
    monkeypatch.setitem(compress_config.PRESETS, "quick", small)
    # Two sequence buckets per bundle, the budgets' 32 and the longest: each bucket is one more XNNPACK lowering
    # (tens of seconds even for this model), and the buckets have tests of their own (tests/export).
    from edgenlp.export import executorch as et

    monkeypatch.setattr(et, "default_buckets", lambda max_seq_len: tuple(b for b in (32,) if b < max_seq_len) + (max_seq_len,))
    # Built bundles take the budget's length only (the product builds them to at least 128 tokens, which is one more
    # bucket here: the tiny model's 64 positions).
    from edgenlp.compress.pipeline import Compressor

    monkeypatch.setattr(Compressor, "max_len", property(lambda self: self.budgets.seq_len))


def test_compress_quick_end_to_end_and_resume(tmp_path, tiny_model_dir, tiny_task_dir, quick_tiny, monkeypatch, fake_calibrate):
    import shutil

    from edgenlp.bundle import Bundle
    from edgenlp.run.base import get_runner
    from edgenlp.targets.costmodel import host_table_path, reference_table_path

    monkeypatch.setenv("EDGENLP_CACHE_DIR", str(tmp_path / "cache"))  # a fresh cache: compress calibrates (fake_calibrate) once

    # A size budget below the fp32 program forces the planner to quantize; the accuracy limit is the default 1 point,
    # so a bundle that gets one more of the 3 dev sentences wrong than the fine-tuned model does not pass.
    cfg = CompressConfig(model=str(tiny_model_dir), task=str(tiny_task_dir), target="host", seq_len=32, size_mb=3.0,
                         max_drop=1.0, measure=1)  # one candidate built (tests/compress/test_measured.py: choosing among more)
    events: list[str] = []
    res = compress(cfg, tmp_path / "run", progress=False, echo=events.append)
    s = res.summary
    assert s["passed"] and res.bundle.is_dir()
    assert len(fake_calibrate) == 1 and host_table_path().is_file()  # the host was calibrated first, once
    for stage in STAGES:
        assert (tmp_path / "run" / stage / "stage.json").is_file(), stage
    # The bundle fits the size budget, carries the whole recipe and the target, and really runs.
    bundle = Bundle.open(res.bundle)
    assert bundle.manifest["sizes"]["model.pte"] / 1e6 <= 3.0
    assert bundle.manifest["target"]["name"] == "host" and bundle.manifest["budgets"]["size_mb"] == 3.0
    steps = [st["step"] for st in bundle.manifest["applied"]]
    assert steps[0] == "finetune" and steps[-1] == "export" and "quantize" in steps
    assert s["chosen"]["bits"] != "fp32" or s["chosen"]["embeddings"] is not None
    from edgenlp.data.tasks import load_task

    dev = load_task(tiny_task_dir).dev
    with get_runner(res.bundle, runtime="executorch") as r:
        pred = r.predict_logits(list(dev.texts)).argmax(-1)
    acc = float((pred == dev.label_ids(bundle.labels)).mean())
    assert s["predicted"]["accuracy"]["measured"] == pytest.approx(acc)  # the report is the final bundle's accuracy
    # Against the fine-tuned model's own dev accuracy (the finetune stage's record), within the limit.
    reference = json.loads((tmp_path / "run" / "finetune" / "stage.json").read_text())["result"]["dev"]["accuracy"]
    assert s["predicted"]["accuracy"]["reference"] == pytest.approx(reference)
    assert 100 * (reference - acc) <= cfg.max_drop, (reference, acc)
    doc = json.loads((tmp_path / "run" / "compress.json").read_text())
    assert doc["recipe"] == bundle.manifest["applied"] and doc["predicted"]["size_mb"]["passed"]
    report = (tmp_path / "run" / "report.md").read_text()
    assert "## Budgets" in report and "## Recipe" in report and "candidates.png" in report
    # Measured planning: the plan's best was built and scored on validation rows held out of train; the
    # chosen one is the measure stage's choice, and verification ran on its bundle.
    measured = json.loads((tmp_path / "run" / "measure" / "measure.json").read_text())
    plan_doc = json.loads((tmp_path / "run" / "plan" / "plan.json").read_text())
    # (a candidate whose lowering fails its parity check on this host is reported as not built, beside the others)
    tried = [r["candidate"] for r in measured["rows"]] + [n["candidate"] for n in measured["not_built"]]
    assert sorted(map(json.dumps, tried)) == sorted(json.dumps(p["candidate"]) for p in plan_doc["shortlist"])
    assert len(tried) == min(1, sum(p["fits"] for p in plan_doc["considered"])) and measured["rows"]
    assert s["chosen"] == measured["chosen"] == measured["rows"][measured["chosen_index"]]["candidate"]
    verify_rec = json.loads((tmp_path / "run" / "verify" / "stage.json").read_text())
    assert verify_rec["inputs"]["candidate"] == s["chosen"]
    assert "## Candidates built and measured" in report and s["measured"]["val_rows"] == 1
    ft_rec = json.loads((tmp_path / "run" / "finetune" / "stage.json").read_text())["result"]
    assert ft_rec["train_rows"] == 3 and ft_rec["val_rows"] == 1  # 4 train rows: 1 held out for validation
    assert (tmp_path / "run" / "candidates.png").stat().st_size > 0
    # The speed-up comes from the fp32 program and the bundle timed alternately in one process.
    sp = s["host_speedup_detail"]
    assert sp["method"].startswith("alternating") and sp["runs"] >= 20
    assert (tmp_path / "run" / "baseline" / "lowered" / "model.pte").is_file()
    # Stage records name models relative to the run folder, so a copied run folder never reads the original's.
    prune_rec = json.loads((tmp_path / "run" / "prune" / "stage.json").read_text())
    assert not Path(prune_rec["result"]["model"]).is_absolute()
    assert s["host_speedup_vs_uncompressed"] == pytest.approx(sp["baseline_ms"] / sp["bundle_ms"], rel=1e-2)

    # The same config spelled on the command line: the CLI builds the identical config (the stage fingerprints
    # match), so every stage is reused, the chain's and any attempt's after a re-plan (plan-2, export-2, ...).
    from click.testing import CliRunner

    from edgenlp.cli import main

    r = CliRunner().invoke(main, ["compress", "--model", str(tiny_model_dir), "--task", str(tiny_task_dir),
                                  "--target", "host", "--seq-len", "32", "--size-mb", "3", "--max-drop", "1.0", "--measure", "1",
                                  "--out", str(tmp_path / "run")], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    doc2 = json.loads((tmp_path / "run" / "compress.json").read_text())
    assert doc2["passed"] and set(STAGES) <= set(doc2["stages_skipped"])
    ran = [line for line in r.output.splitlines() if line.startswith("[") and not line.endswith("up to date, skipped")]
    assert not ran, ran  # no stage ran again (other lines, e.g. a recorded attempt's "planning again", may repeat)
    assert doc2["recipe"] == doc["recipe"] and (tmp_path / "run" / "report.md").is_file()

    # A changed accuracy limit redoes the plan, not the fine-tune, the baseline or the exits stage (which this task is
    # too small for; with exits it runs again: their threshold is calibrated to half the limit). (The stages up to
    # the plan, through the same Compressor the run uses: what follows a plan is the run above.)
    from edgenlp.compress.pipeline import Compressor

    def replan(config) -> tuple:
        run = Compressor(config, tmp_path / "run", data_dir=None, device="cpu", progress=False, echo=events.append)
        run.calibrate_host()
        ft = run.finetune()
        base, ex = run.baseline(ft), run.exits(ft)
        return (ft, base, ex), run.plan(ft, 1, [], ex)

    kept, plan3 = replan(dataclasses.replace(cfg, max_drop=50.0, measure=1))
    assert [r.stage for r in kept if not r.skipped] == [] and not plan3.skipped
    # ... and plans with what the first run measured (the local cache), in place of the prior's drops
    cached = json.loads((tmp_path / "cache" / "measured-candidates.json").read_text())["rows"]
    assert {json.dumps(r["candidate"], sort_keys=True) for r in cached} >= {json.dumps(r["candidate"], sort_keys=True)
                                                                           for r in measured["rows"]}
    replanned = json.loads((tmp_path / "run" / "plan" / "plan.json").read_text())
    assert replanned["measured_rows_used"] >= len(measured["rows"])
    for r in measured["rows"]:
        point = next(p for p in replanned["considered"] if p["candidate"] == r["candidate"])
        assert point["predicted_drop"] == pytest.approx(r["measured_drop"]) and point["prior"]["basis"] == "measured"

    # Calibrating this machine since the last run re-plans too: the plan's fingerprint names the cost tables.
    host_table_path().parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(reference_table_path(), host_table_path())
    kept, plan4 = replan(dataclasses.replace(cfg, max_drop=50.0, measure=1))
    assert [r.stage for r in kept if not r.skipped] == [] and not plan4.skipped
    plan_rec = json.loads((tmp_path / "run" / "plan" / "stage.json").read_text())
    assert [Path(t["path"]) for t in plan_rec["inputs"]["cost_tables"]] == [host_table_path().resolve()]
    # a task this small gets no exits: the stage says why, and nothing in the plan has them
    exits_rec = json.loads((tmp_path / "run" / "exits" / "stage.json").read_text())["result"]
    assert not exits_rec["enabled"] and "too few" in exits_rec["why"] and not any(
        p["candidate"].get("exits") for p in replanned["considered"])
