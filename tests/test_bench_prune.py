"""tools/bench/prune.py --merge: runs trained in parallel processes become one document, timed again together."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tools.bench import prune as bench  # noqa: E402

BUDGET = {"cofi_train_limit": 8000, "cofi_epochs": 3.0, "cofi_finetune_epochs": 2.0, "cofi_mask_lr": 0.1,
          "cofi_lagrangian_lr": 0.05, "cofi_lr": 5e-5, "cofi_no_hidden": False, "samples": 1024, "importance_samples": 512,
          "max_seq_len": 64, "threads": 1}


def _run(bundle: Path, sparsity: float, accuracy: float) -> dict:
    bundle.mkdir(parents=True)
    (bundle / "model.pte").write_bytes(b"pte")
    report = {"method": "cofi", "target": {"sparsity": sparsity},
              "achieved": {"encoder_params": sparsity, "total_params": sparsity / 2, "flops": sparsity},
              "dev_after": {"accuracy": accuracy}, "shape": {"hidden": 384, "heads": [6] * 6, "ffn": [768] * 6},
              "learn_wall_s": 10.0, "wall_s": 12.0}
    return {"report": report, "export": {"bundle": str(bundle), "pte_mb": 1.0}}


def _doc(tmp: Path, name: str, task: str, runs: dict[str, tuple[float, float]], **config) -> Path:
    """A results file as one prune.py process writes it: its own workdir, its unpruned bundle, its runs."""
    workdir = tmp / name
    unpruned = workdir / task / "bundle-unpruned"
    unpruned.mkdir(parents=True)
    (unpruned / "model.pte").write_bytes(b"pte")
    doc = {"config": {**BUDGET, "tasks": [task], "cofi_tasks": [task], "methods": ["cofi"], "sparsities": [],
                      "cofi_sparsities": [], "workdir": str(workdir), "rounds": 1, "iters": 3, **config},
           "isa": "avx2 fma", "note": "", "tasks": {task: {"teacher": f"/teachers/{task}", "runs": {},
                                                            "baseline": {"accuracy": 0.9, "pte_mb": 2.0}}},
           "latency": {f"{task}/unpruned": {"128": {"median_ms": 99.0}}}, "not_run": []}  # timed under load: dropped
    for run, (sparsity, acc) in runs.items():
        doc["tasks"][task]["runs"][run] = _run(workdir / task / f"bundle-{run}", sparsity, acc)
        doc["config"]["cofi_sparsities"].append(sparsity)
    path = tmp / f"{name}.json"
    path.write_text(json.dumps(doc))
    return path


def _args(tmp: Path, **kw):
    return argparse.Namespace(**{"rounds": 2, "iters": 5, "out": tmp / "merged", "note": "", **kw})


@pytest.fixture
def timed(monkeypatch):
    """Every bundle timed once here: the unpruned at 20 ms and each pruned one at 10 ms (seq 128 and 32)."""
    seen = []

    def measure(bundles, *, iters, rounds):
        seen.append(dict(bundles))
        return {name: {s: {"median_ms": 20.0 if name.endswith("/unpruned") else 10.0} for s in ("128", "32")}
                for name in bundles}

    monkeypatch.setattr(bench, "measure", measure)
    return seen


def test_merge_times_every_run_of_every_file_together(tmp_path, timed):
    a = _doc(tmp_path, "a", "sst2", {"cofi-70": (0.7, 0.88)})
    b = _doc(tmp_path, "b", "banking77", {"cofi-50": (0.5, 0.9), "cofi-70": (0.7, 0.89)})
    assert bench.merge([a, b], _args(tmp_path)) == 0
    (bundles,) = timed
    assert set(bundles) == {"sst2/unpruned", "sst2/cofi-70", "banking77/unpruned", "banking77/cofi-50", "banking77/cofi-70"}
    doc = json.loads((tmp_path / "merged.json").read_text())
    rows = {(r["task"], r["target"]): r for r in doc["rows"]}
    assert set(rows) == {("sst2", 0.7), ("banking77", 0.5), ("banking77", 0.7)}
    assert all(r["speedup_128"] == 2.0 for r in rows.values())  # this timing, not the files' own (99 ms under load)
    assert rows[("banking77", 0.7)]["drop_points"] == pytest.approx(1.0)
    assert doc["config"]["tasks"] == ["banking77", "sst2"] and doc["config"]["cofi_sparsities"] == [0.5, 0.7]
    assert doc["config"]["merged_from"] == [str(a), str(b)]


@pytest.mark.parametrize("case", ["budget", "teacher", "twice", "missing bundle"])
def test_merge_refuses_files_that_do_not_belong_together(tmp_path, timed, case):
    a = _doc(tmp_path, "a", "sst2", {"cofi-70": (0.7, 0.88)})
    if case == "budget":
        b = _doc(tmp_path, "b", "banking77", {"cofi-50": (0.5, 0.9)}, cofi_epochs=1.0)
        match = "another budget.*cofi_epochs"
    elif case == "teacher":
        b = _doc(tmp_path, "b", "sst2", {"cofi-50": (0.5, 0.9)})
        doc = json.loads(b.read_text())
        doc["tasks"]["sst2"]["teacher"] = "/teachers/other"
        b.write_text(json.dumps(doc))
        match = "two teachers"
    elif case == "twice":
        b = _doc(tmp_path, "b", "sst2", {"cofi-70": (0.7, 0.87)})
        match = "sst2/cofi-70 is in two"
    else:
        b = _doc(tmp_path, "b", "banking77", {"cofi-50": (0.5, 0.9)})
        (tmp_path / "b" / "banking77" / "bundle-cofi-50" / "model.pte").unlink()
        match = "bundles not found"
    with pytest.raises(SystemExit, match=match):
        bench.merge([a, b], _args(tmp_path))
    assert not timed and not (tmp_path / "merged.json").exists()
