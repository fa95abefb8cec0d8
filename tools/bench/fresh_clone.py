"""Benchmark: what a new user waits for, timed in a fresh clone (not CI; takes most of an hour).

Clones this repository's ``HEAD`` into a temporary folder (no virtualenv, no
native build, nothing cached in the clone, an empty ``$EDGENLP_CACHE_DIR``) and times, one after the other:

1. ``bash tools/setup.sh`` — set-up alone (virtualenv, pinned dependencies,
   Debian packages for the native runtime, the native build);
2. ``bash .ci/run`` — the test suite as CI runs it (set-up again, now a no-op);
3. ``bash tools/setup.sh run`` — the main job (``edgenlp compress`` on its defaults).

Each step records its wall time and the load average before and after it
(other jobs on a shared machine lengthen every step; the load says how much).
Writes ``tools/bench/results/fresh-clone.{json,md}`` with the host's CPU model
and ISA flags, the date and the commit; ``tools/readme.py`` renders the JSON
into the README.

    python tools/bench/fresh_clone.py                      # all three steps
    python tools/bench/fresh_clone.py --skip-suite         # set-up and main job only
    python tools/bench/fresh_clone.py --data-dir /data     # where the clone finds sst2/ (default: this checkout's)

JSON keys: ``setup_s``, ``suite_s``, ``main_job_s`` (null when skipped),
``main_job`` (what the main job chose and measured, from its ``compress.json``),
``host`` (CPU model), ``isa_flags``, ``cores``, ``load`` (per step: 1/5/15-minute
load averages before and after), ``date``, ``commit``, ``steps`` (command,
exit status, seconds, log file).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "tools" / "bench" / "results"
STEPS = (("setup", ["bash", "tools/setup.sh"]), ("suite", ["bash", ".ci/run"]), ("main_job", ["bash", "tools/setup.sh", "run"]))

log = logging.getLogger("fresh_clone")


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def _host() -> dict:
    sys.path.insert(0, str(REPO))
    from edgenlp.utils import cpu_info

    info = cpu_info()
    return {"host": info.get("model") or "unknown CPU", "isa_flags": " ".join(info.get("isa", ())), "cores": info.get("cpu_count")}


def _commit() -> str:
    return subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()


def run_steps(clone: Path, *, skip: set[str], env: dict, logs: Path) -> dict:
    out: dict = {"steps": {}, "load": {}}
    for name, argv in STEPS:
        if name in skip:
            out[f"{name}_s"] = None
            continue
        log_file = logs / f"{name}.log"
        before = _load()
        log.info("%s: %s (load %s)", name, " ".join(argv), before)
        t0 = time.perf_counter()
        with open(log_file, "w") as f:
            rc = subprocess.run(argv, cwd=clone, env=env, stdout=f, stderr=subprocess.STDOUT).returncode
        seconds = round(time.perf_counter() - t0, 1)
        after = _load()
        out[f"{name}_s"] = seconds
        out["load"][name] = {"before": before, "after": after}
        out["steps"][name] = {"command": " ".join(argv), "exit_status": rc, "seconds": seconds, "log": str(log_file)}
        log.info("%s: %.0f s, exit %d", name, seconds, rc)
        if name == "suite":
            out["suite"] = suite_summary(log_file.read_text(errors="replace"))
        if rc != 0:
            log.error("%s failed (exit %d); see %s", name, rc, log_file)
            break
    return out


_DURATION = re.compile(r"^\s*([0-9.]+)s (setup|call|teardown)\s+(\S.*)$")
_COUNTS = re.compile(r"(\d+) (passed|failed|skipped|errors?|xfailed|xpassed)")


def suite_summary(log_text: str) -> dict:
    """The suite log's result counts (pytest's last line) and its slowest tests (``--durations``)."""
    lines = log_text.splitlines()
    summary = next((ln for ln in reversed(lines) if " in " in ln and _COUNTS.search(ln)), "")
    counts = {kind.rstrip("s") if kind.startswith("error") else kind: int(n) for n, kind in _COUNTS.findall(summary)}
    slowest, inside = [], False
    for ln in lines:
        if "slowest" in ln and "durations" in ln:
            inside = True
            continue
        m = _DURATION.match(ln) if inside else None
        if m:
            slowest.append({"seconds": float(m.group(1)), "phase": m.group(2), "test": m.group(3).strip()})
        elif inside and slowest:
            break
    return {"counts": counts, "slowest": slowest}


def main_job_summary(clone: Path) -> dict | None:
    """What the main job chose and measured, from ``<clone>/out/compress/compress.json`` (None when absent)."""
    path = clone / "out" / "compress" / "compress.json"
    if not path.is_file():
        return None
    s = json.loads(path.read_text())
    acc, m = s["predicted"]["accuracy"], s.get("measured") or {}
    return {"passed": s["passed"], "chosen": s["chosen"], "dev_accuracy": acc["measured"], "dev_reference": acc["reference"],
            "drop_points": acc["drop_points"], "host_speedup": s["host_speedup_vs_uncompressed"],
            "size_mb": s["predicted"]["size_mb"]["measured"], "finetune": s.get("finetune"),
            "measured": measured_rows(m.get("rows", [])), "measured_why": m.get("why"), "val_rows": m.get("val_rows"),
            "stage_seconds": s["stage_seconds"], "wall_s": s["wall_s"],
            "earlier_attempts": earlier_attempts(path.parent, s.get("attempts") or [])}


def earlier_attempts(run: Path, attempts: list[dict]) -> list[dict]:
    """The attempts before the last, each with the candidates it measured on validation (``measure[-k]/measure.json``)
    and why verification failed it: what a main job that planned again spent its time on."""
    sys.path.insert(0, str(REPO))
    from edgenlp.compress.pipeline import stage_name

    out = []
    for a in attempts[:-1]:
        stage = stage_name("measure", a["attempt"])
        try:
            rows = json.loads((run / stage / "measure.json").read_text()).get("rows", [])
        except (OSError, ValueError):
            rows = []
        out.append({"attempt": a["attempt"], "chosen": a["chosen"], "failures": a.get("failures", []),
                    "measured": measured_rows(rows)})
    return out


def measured_rows(rows: list[dict]) -> list[dict]:
    """What the summary keeps of a measure stage's rows: the candidate, its predicted and measured drop, size, verdict."""
    return [{k: r[k] for k in ("candidate", "predicted_drop", "measured_drop", "measured_size_mb", "meets")} for r in rows]


def markdown(doc: dict) -> str:
    def fmt(s):
        return "not run" if s is None else f"{s:.0f} s ({int(s) // 60} min {int(s) % 60:02d} s)"

    lines = [f"# A fresh clone, timed (tools/bench/fresh_clone.py, {doc['date']})", "",
             f"Host: {doc['host']}, {doc['cores']} cores, ISA flags {doc['isa_flags']}. Commit {doc['commit'][:12]}.", "",
             "| step | command | wall time | load before → after (1/5/15 min) | exit |", "|---|---|---:|---|---:|"]
    for name, _ in STEPS:
        step = doc["steps"].get(name)
        if step is None:
            lines.append(f"| {name} | | not run | | |")
            continue
        load = doc["load"][name]
        lines.append(f"| {name} | `{step['command']}` | {fmt(step['seconds'])} | "
                     f"{' / '.join(map(str, load['before']))} → {' / '.join(map(str, load['after']))} | {step['exit_status']} |")
    suite = doc.get("suite")
    if suite:
        counts = ", ".join(f"{n} {kind}" for kind, n in suite["counts"].items())
        lines += ["", f"Suite: {counts or 'no result line'}. Slowest tests (pytest `--durations`):", "",
                  "| seconds | phase | test |", "|---:|---|---|"]
        lines += [f"| {r['seconds']:.1f} | {r['phase']} | `{r['test']}` |" for r in suite["slowest"]]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--skip-suite", action="store_true", help="do not run .ci/run")
    ap.add_argument("--skip-main-job", action="store_true", help="do not run the main job")
    ap.add_argument("--data-dir", type=Path, default=None, help="shared data folder (default: the one this checkout uses)")
    ap.add_argument("--workdir", type=Path, default=None, help="clone here (default: a temporary folder, removed after)")
    ap.add_argument("--out", type=Path, default=RESULTS / "fresh-clone", help="output stem (.json and .md)")
    ap.add_argument("--summarize", type=Path, default=None, metavar="WORKDIR",
                    help="only add the main job's summary from a kept --workdir to the results (after a run)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    if args.summarize is not None:
        doc = json.loads(args.out.with_suffix(".json").read_text())
        doc["main_job"] = main_job_summary(args.summarize / "edgenlp")
        args.out.with_suffix(".json").write_text(json.dumps(doc, indent=1) + "\n")
        return 0 if doc["main_job"] else 2

    sys.path.insert(0, str(REPO))
    from edgenlp.data.tasks import default_data_dir

    data_dir = (args.data_dir or default_data_dir()).resolve()
    if not (data_dir / "sst2" / "train.tsv").is_file():
        log.error("no sst2/train.tsv under %s: pass --data-dir", data_dir)
        return 2
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="edgenlp-fresh-"))
    clone = workdir / "edgenlp"
    if clone.exists():
        log.error("%s exists: pass an empty --workdir", clone)
        return 2
    commit = _commit()
    subprocess.run(["git", "clone", "--quiet", "--no-hardlinks", str(REPO), str(clone)], check=True)
    subprocess.run(["git", "-C", str(clone), "checkout", "--quiet", commit], check=True)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["EDGENLP_DATA_DIR"] = str(data_dir)
    # edgenlp's own cache (the host's cost table, measured candidates) starts empty, as on a new user's machine:
    # a cost table calibrated earlier, or candidates an earlier main job measured, would change what the main job
    # does and how long it takes
    env["EDGENLP_CACHE_DIR"] = str(workdir / "edgenlp-cache")
    logs = workdir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    skip = {name for name, flag in (("suite", args.skip_suite), ("main_job", args.skip_main_job)) if flag}
    doc = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "commit": commit, **_host(), "data_dir": str(data_dir)}
    doc.update(run_steps(clone, skip=skip, env=env, logs=logs))
    doc["main_job"] = main_job_summary(clone)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_name(args.out.name + ".json.tmp")
    tmp.write_text(json.dumps(doc, indent=1) + "\n")
    os.replace(tmp, args.out.with_suffix(".json"))
    args.out.with_suffix(".md").write_text(markdown(doc))
    log.info("wrote %s.{json,md}", args.out)
    if args.workdir is None and all(s["exit_status"] == 0 for s in doc["steps"].values()):
        shutil.rmtree(workdir)
    return 0 if all(s["exit_status"] == 0 for s in doc["steps"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
