"""How long the export-heavy tests take with the ExecuTorch methods lowered in 1 process and in N.

Runs the same pytest selection (default: the quantize, compress and export
tests, CI's markers) once per setting per round, alternating the order each
round, each in a fresh pytest process with ``EDGENLP_LOWER_PROCESSES`` set:
``1`` is how every export lowered before ``edgenlp.export.lowering`` (the
baseline), ``N`` (default 2) the parallel lowering. Records wall seconds,
the pass/fail counts and the slowest tests of each run.

    PYTHONPATH=. python tools/bench/test_time.py --rounds 2

Writes tools/bench/results/test-time.{json,md}.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tools.bench.harness import REPO, RESULTS, Results, load_average, median  # noqa: E402

log = logging.getLogger("bench.test_time")

SELECTION = ["tests/quantize", "tests/compress", "tests/export", "tests/test_export.py"]
SUMMARY = re.compile(r"^=*\s*(\d+ (?:passed|failed).*?) in ([\d.]+)s")


def run_once(selection: list[str], processes: int) -> dict:
    env = {**os.environ, "EDGENLP_LOWER_PROCESSES": str(processes),
           "PYTHONPATH": os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])}
    cmd = [sys.executable, "-m", "pytest", "-q", "-m", "not slow", "-p", "no:cacheprovider", "--durations=8", *selection]
    load0, t0 = load_average(), time.perf_counter()
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    tail = proc.stdout.strip().splitlines()
    summary = next((m.group(1) for line in reversed(tail) if (m := SUMMARY.search(line))), "?")
    slowest = [line.strip() for line in tail if re.match(r"^\s*[\d.]+s (call|setup|teardown)", line)]
    if proc.returncode != 0:
        log.warning("pytest exited %d with %s", proc.returncode, "EDGENLP_LOWER_PROCESSES=%d" % processes)
    return {"processes": processes, "wall_s": round(wall, 1), "exit_status": proc.returncode, "summary": summary,
            "slowest": slowest, "load_avg_before": load0, "load_avg_after": load_average()}


def markdown(doc: dict) -> str:
    lines = [f"# Test time with the ExecuTorch methods lowered in 1 process and in {doc['processes']}", "",
             f"Selection: `{' '.join(doc['selection'])}` (`-m \"not slow\"`), {doc['rounds']} round(s), alternating order.", "",
             "| lowered in | wall s (median) | vs 1 process | runs (s) | pytest summary |", "|---|---|---|---|---|"]
    base = doc["summary"].get("1")
    for p, s in doc["summary"].items():
        speed = f"{base['wall_s'] / s['wall_s']:.2f}x" if base else ""
        outcome = s["pytest"] if s["pytest"] != "?" else f"exit status {s.get('exit_status', '?')}"
        lines.append(f"| {p} process{'es' * (int(p) > 1)} | {s['wall_s']:.0f} | {speed} | "
                     f"{', '.join(f'{w:.0f}' for w in s['runs'])} | {outcome} |")
    lines += ["", f"Load average after each run: {doc['load_during']}.", ""]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--processes", type=int, default=2)
    ap.add_argument("--report-only", action="store_true", help="re-render test-time.md from test-time.json")
    ap.add_argument("selection", nargs="*", default=SELECTION)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    if args.report_only:
        import json

        doc = json.loads((RESULTS / "test-time.json").read_text())
        for p, s in doc["summary"].items():
            s["exit_status"] = max(x["exit_status"] for x in doc["rows"] if str(x["processes"]) == p)
        host = doc.get("host", {})
        (RESULTS / "test-time.md").write_text(markdown(doc) + "\n" + Results.host_line(host) + "\n")
        return 0
    results = Results(script="test_time", threads=None)
    settings = [1, args.processes]
    rows: list[dict] = []
    for r in range(args.rounds):
        for p in (settings if r % 2 == 0 else settings[::-1]):
            log.info("round %d: lowered in %d process(es)", r, p)
            rows.append({**run_once(args.selection, p), "round": r})
            summary = {}
            for q in settings:
                got = [x for x in rows if x["processes"] == q]
                if got:
                    summary[str(q)] = {"wall_s": median([x["wall_s"] for x in got]), "runs": [x["wall_s"] for x in got],
                                       "pytest": got[-1]["summary"], "exit_status": max(x["exit_status"] for x in got)}
            doc = {"selection": args.selection, "processes": args.processes, "rounds": r + 1, "rows": rows,
                   "summary": summary, "load_during": [x["load_avg_after"][0] for x in rows]}
            results.write(RESULTS / "test-time", doc, markdown(doc))
    return 0 if all(x["exit_status"] == 0 for x in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
