"""The bench harness: interleaving, statistics, the results writer, the fresh-process workers, every script's --help."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from edgenlp.profile.timing import Timings, interleave, percentile, run_rounds, summarize  # noqa: E402
from tools.bench.harness import Results, fresh_process  # noqa: E402

BENCH = ROOT / "tools" / "bench"
SCRIPTS = sorted(p.name for p in BENCH.glob("*.py") if '__name__ == "__main__"' in p.read_text() and p.name != "workers.py")


class FakeClock:
    """A clock that only moves when a fake candidate says how long it took."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def fake_candidates(clock: FakeClock, durations: dict[str, list[float]], log: list[str]):
    """Callables that log their name and advance the clock by their next scripted duration."""
    its = {n: iter(d) for n, d in durations.items()}

    def make(name):
        def call():
            log.append(name)
            clock.now += next(its[name])

        return call

    return {n: make(n) for n in durations}


# --------------------------------------------------------------------------- interleaving


@pytest.mark.parametrize("alternate", [True, False])
def test_interleave_runs_every_candidate_in_every_round(alternate):
    log: list[str] = []
    calls = {n: (lambda n=n: log.append(n)) for n in "abc"}
    t = interleave(calls, rounds=3, iters=2, warmup=1, alternate=alternate)
    warm, timed = log[:3], log[3:]
    assert warm == ["a", "b", "c"]
    fwd, rev = ["a", "a", "b", "b", "c", "c"], ["c", "c", "b", "b", "a", "a"]
    assert timed == fwd + (rev if alternate else fwd) + fwd
    assert t.rounds == 3 and all(len(r) == 2 for n in "abc" for r in t.samples[n])


def test_run_rounds_hands_each_round_its_input_first():
    seen: list[tuple[str, int]] = []
    current = {}
    cands = {n: (lambda n=n: seen.append((n, current["r"])) or current["r"] * 10) for n in ("x", "y")}
    out = run_rounds(cands, rounds=3, before_round=lambda r: current.update(r=r))
    assert seen == [("x", 0), ("y", 0), ("y", 1), ("x", 1), ("x", 2), ("y", 2)]
    assert out == {"x": [0, 10, 20], "y": [0, 10, 20]}


# --------------------------------------------------------------------------- statistics


def test_summarize_by_hand():
    s = summarize([4, 1, 3, 2])
    assert s["median"] == pytest.approx(2.5)
    assert s["p10"] == pytest.approx(1.3)  # linear between order statistics: 1 + 0.3 x (2 - 1)
    assert s["p90"] == pytest.approx(3.7)
    assert s["mean"] == pytest.approx(2.5)
    assert s["std"] == pytest.approx(math.sqrt(5 / 3))  # sample std
    assert s["n"] == 4
    assert summarize([7])["std"] == 0.0
    assert math.isnan(percentile([], 50))


def test_timed_samples_medians_percentiles_and_same_round_ratios():
    clock, log = FakeClock(), []
    base = [10, 12, 11, 13, 100]  # the last round disturbed: both candidates see it
    fast = [5, 6, 5.5, 6.5, 50]
    t = interleave(fake_candidates(clock, {"base": base, "fast": fast}, log), rounds=5, clock=clock, scale=1.0)
    assert t.values("base") == base and t.values("fast") == fast
    s = t.summary("base")
    assert s["median"] == 12
    assert s["p10"] == pytest.approx(10.4)  # sorted 10 11 12 13 100, position 0.4
    assert s["p90"] == pytest.approx(65.2)  # position 3.6: 13 + 0.6 x 87
    assert s["mean"] == pytest.approx(29.2)
    r = t.ratio_summary("fast", "base")
    assert t.ratios("fast", "base") == pytest.approx([0.5] * 5)
    assert (r["median"], r["p10"], r["p90"]) == pytest.approx((0.5, 0.5, 0.5))


def test_median_is_over_round_medians_and_ratios_pair_rounds():
    clock, log = FakeClock(), []
    # round medians: a 1, 2, 3 -> 2 (the median of all nine samples would be 3); b 2, 2, 6
    a = [1, 1, 9, 2, 2, 9, 3, 3, 9]
    b = [2, 2, 2, 2, 2, 2, 6, 6, 6]
    t = interleave(fake_candidates(clock, {"a": a, "b": b}, log), rounds=3, iters=3, clock=clock, scale=1.0, alternate=False)
    assert t.round_medians("a") == [1, 2, 3]
    assert t.summary("a")["median"] == 2
    assert t.ratios("a", "b") == pytest.approx([0.5, 1.0, 0.5])
    assert t.ratio_summary("a", "b")["median"] == pytest.approx(0.5)
    rep = t.report(baseline="b")
    assert rep["a"]["median_ms"] == 2 and rep["a"]["round_medians_ms"] == [1, 2, 3] and rep["a"]["n"] == 9
    assert rep["a"]["vs_b"]["median"] == pytest.approx(0.5)


def test_from_rounds_takes_numbers_or_lists_per_round():
    t = Timings.from_rounds({"x": [3.0, 1.0, 2.0], "y": [[1.0, 3.0], [2.0], [4.0]]})
    assert t.round_medians("x") == [3.0, 1.0, 2.0] and t.round_medians("y") == [2.0, 2.0, 4.0]
    with pytest.raises(ValueError):
        Timings.from_rounds({"x": [1.0], "y": [1.0, 2.0]})


# --------------------------------------------------------------------------- results writer


def test_results_writer_records_the_host(tmp_path):
    from edgenlp.utils import cpu_info, isa_flags

    res = Results(script="example", threads=[1, 2], argv=["--rounds", "3"])
    drawn = []
    res.write(tmp_path / "example", {"rows": [1, 2], "isa": "kept as written"}, "# Example\n",
              plot=lambda p: (drawn.append(p), p.write_bytes(b"png")))
    doc = json.loads((tmp_path / "example.json").read_text())
    assert doc["rows"] == [1, 2] and doc["isa"] == "kept as written"
    host = doc["host"]
    assert host["cpu_model"] == cpu_info().get("model", cpu_info()["machine"])
    assert host["isa_flags"] == isa_flags() and host["cpu_count"] == os.cpu_count()
    assert host["threads"] == [1, 2] and host["argv"] == ["--rounds", "3"]
    for key in ("load_avg_before", "load_avg_after"):
        assert len(host[key]) == 3 and all(isinstance(x, float) for x in host[key])
    assert host["git_commit"] is None or re.fullmatch(r"[0-9a-f]{40}", host["git_commit"])
    md = (tmp_path / "example.md").read_text()
    assert md.startswith("# Example\n") and f"ISA flags {isa_flags()}" in md and "load average" in md
    assert (tmp_path / "example.png").read_bytes() == b"png" and drawn[0].name != "example.png"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["example.json", "example.md", "example.png"]


def test_results_writer_leaves_no_figure_when_drawing_fails(tmp_path):
    def broken(path):
        path.write_bytes(b"half")
        raise RuntimeError("matplotlib fell over")

    with pytest.raises(RuntimeError):
        Results(script="example").write(tmp_path / "example", {}, "# x\n", plot=broken)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["example.json", "example.md"]


# --------------------------------------------------------------------------- fresh processes and scripts


@pytest.mark.parametrize("runtime", ["executorch", "onnx"])
def test_latency_worker_in_a_fresh_process(tiny_bundle, runtime):
    out = fresh_process("latency", {"runtime": runtime, "bundle": str(tiny_bundle), "seq_len": 12, "threads": 1, "iters": 3,
                                    "warmup": 1})
    assert out["tokens"] == 12
    assert len(out["model_ms"]) == 3 and len(out["e2e_ms"]) == 3 and all(x > 0 for x in out["model_ms"] + out["e2e_ms"])
    assert out["peak_rss_kb"] > 0


def test_cold_start_worker_opens_without_verifying(tiny_bundle, tmp_path):
    import shutil

    copy = tmp_path / "bundle"
    shutil.copytree(tiny_bundle, copy)
    with open(copy / "model.onnx", "ab") as f:  # a checksum mismatch: a verifying open would refuse the bundle
        f.write(b"\0")
    out = fresh_process("cold_start", {"runtime": "executorch", "bundle": str(copy), "seq_len": 8, "threads": 1})
    assert out["cold_start_ms"] > 0 and out["import_ms"] > 0 and out["peak_rss_kb"] > 0


def test_a_failing_worker_raises_with_its_stderr(tmp_path):
    with pytest.raises(RuntimeError, match="latency failed"):
        fresh_process("latency", {"runtime": "onnx", "bundle": str(tmp_path / "missing"), "seq_len": 8, "threads": 1, "iters": 1})


def test_workers_module_names_its_workers():
    proc = subprocess.run([sys.executable, "-m", "tools.bench.workers", "nope", "{}"], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 2 and "latency" in proc.stderr


@pytest.mark.parametrize("script", SCRIPTS)
def test_bench_script_help(script, tmp_path):
    """Every bench script parses --help from any folder (imports resolve, no timing starts)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, str(BENCH / script), "--help"], cwd=tmp_path, capture_output=True, text=True,
                          env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.startswith("usage:")
    assert list(tmp_path.iterdir()) == []


def test_fresh_clone_reads_the_suites_counts_and_slowest_tests():
    from tools.bench.fresh_clone import markdown, suite_summary

    log = "\n".join([
        "[setup] ready", "....F..s [100%]", "============ slowest 25 durations ============",
        "136.33s call     tests/compress/test_compress_e2e.py::test_compress_quick_end_to_end_and_resume",
        "134.17s setup    tests/dynamic/test_dynamic.py::test_sentences_have_odd_lengths_across_buckets[8-32]",
        "(3 durations < 0.005s hidden.  Use -vv to show these durations.)",
        "=========== short test summary info ===========", "FAILED tests/a.py::test_b - assert 1 == 2",
        "1 failed, 1084 passed, 12 skipped, 2 errors, 92 warnings in 665.35s (0:11:05)"])
    s = suite_summary(log)
    assert s["counts"] == {"failed": 1, "passed": 1084, "skipped": 12, "error": 2}
    assert [(r["seconds"], r["phase"]) for r in s["slowest"]] == [(136.33, "call"), (134.17, "setup")]
    assert s["slowest"][1]["test"].endswith("[8-32]")
    doc = {"date": "d", "host": "h", "cores": 2, "isa_flags": "avx2", "commit": "0" * 40, "steps": {}, "load": {},
           "suite": s}
    md = markdown(doc)
    assert "Suite: 1 failed, 1084 passed, 12 skipped, 2 error." in md and "| 136.3 | call |" in md
