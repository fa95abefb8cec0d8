"""Peak RSS of a fresh native process that has used every bucket, with and without XNNPACK's weights cache.

For each bundle (fp32, int8, int4; see quant_bundles.py) and each mode, a new
``edgenlp-run BUNDLE --load-all --input TEXTS`` process classifies one text
per bucket (lengths chosen so that every bucket method runs) and its peak RSS
(``wait4`` rusage of that child) is recorded; ``--repeats`` interleaved rounds
of one process per cell, median. Modes:

* ``per-method packing``: ``--no-weight-cache`` (ExecuTorch's default: every
  bucket method's XNNPACK delegate packs its own copy of the weights);
* ``weights cache``: the runtime's default, one packed copy shared by name.

Goal (issue #11): peak RSS <= 1.5 x the bundle's weight bytes + 30 MB; the
weight bytes are taken as the size of model.pte (weights dominate it).

    .venv/bin/python tools/bench/memory.py [--bundles-dir DIR] [--out tools/bench/results]

Writes memory.json and memory.md to --out.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tools.bench.harness import Results, median, run_rounds  # noqa: E402
from tools.bench.quant_bundles import REPO, VARIANTS, build_bundles, isa_flags, native_run  # noqa: E402

log = logging.getLogger("bench.memory")
MODES = {"per-method packing": ["--no-weight-cache"], "weights cache": []}


def bucket_texts(bundle: Path) -> list[str]:
    """One text per bucket that fills it: L - 2 one-token words + [CLS] and [SEP]."""
    manifest = json.loads((bundle / "manifest.json").read_text())
    lens = sorted(m["seq_len"] for m in manifest["artifacts"]["pte"]["methods"])
    return [" ".join(["film"] * max(1, L - 2)) for L in lens]


def peak_rss_mb(cmd: list[str]) -> float:
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}): {err[-2000:]}")
    return usage.ru_maxrss / 1024.0


def measure(bundles: dict[str, Path], *, repeats: int, threads: int) -> list[dict]:
    """Peak RSS per (bundle, mode): ``repeats`` interleaved rounds of a fresh edgenlp-run process each, median."""
    run = native_run()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        cmds = {}
        for name, bundle in bundles.items():
            texts = Path(tmp) / f"{name}.txt"
            texts.write_text("\n".join(bucket_texts(bundle)) + "\n")
            for mode, flags in MODES.items():
                cmds[(name, mode)] = [str(run), str(bundle), "--load-all", "--threads", str(threads), "--input", str(texts), *flags]
        per = run_rounds({key: (lambda cmd=cmd: peak_rss_mb(cmd)) for key, cmd in cmds.items()}, rounds=repeats)
    for name, bundle in bundles.items():
        pte_mb = (bundle / "model.pte").stat().st_size / 1e6
        row = {"bundle": name, "path": str(bundle), "weight_mb": round(pte_mb, 2),
               "goal_mb": round(1.5 * pte_mb + 30, 1), "buckets": len(bucket_texts(bundle))}
        for mode in MODES:
            runs = per[(name, mode)]
            row[mode] = {"peak_rss_mb": round(median(runs), 1), "runs": [round(r, 1) for r in runs]}
            log.info("%s / %s: %.1f MB", name, mode, row[mode]["peak_rss_mb"])
        after = row["weights cache"]["peak_rss_mb"]
        row["meets_goal"] = after <= row["goal_mb"]
        row["saved_mb"] = round(row["per-method packing"]["peak_rss_mb"] - after, 1)
        rows.append(row)
    return rows


def markdown(rows: list[dict], meta: dict) -> str:
    lines = [
        "# Native runtime memory: peak RSS after using every bucket",
        "",
        f"Host {meta['machine']} ({meta['isa']}); edgenlp-run, {meta['threads']} thread(s), every bucket method loaded "
        f"and run once; median of {meta['repeats']} fresh processes. Weight bytes = model.pte size. "
        "Goal: weights cache <= 1.5 x weight MB + 30 MB.",
        "",
        "| bundle | buckets | weight MB | per-method packing MB | weights cache MB | saved MB | goal MB | meets goal |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(f"| {r['bundle']} | {r['buckets']} | {r['weight_mb']:.1f} | {r['per-method packing']['peak_rss_mb']:.1f} | "
                     f"{r['weights cache']['peak_rss_mb']:.1f} | {r['saved_mb']:.1f} | {r['goal_mb']:.1f} | "
                     f"{'yes' if r['meets_goal'] else 'no'} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bundles-dir", type=Path, default=REPO / ".cache" / "bench-quant-bundles")
    ap.add_argument("--model", default="minilm-l6")
    ap.add_argument("--task", default="sst2")
    ap.add_argument("--buckets", default="16,32,64,128")
    ap.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", type=Path, default=REPO / "tools" / "bench" / "results")
    args = ap.parse_args(argv)
    results = Results(script="memory", threads=args.threads)
    bundles = build_bundles(args.bundles_dir, model=args.model, task=args.task, buckets=args.buckets,
                            variants=tuple(args.variants))
    rows = measure(bundles, repeats=args.repeats, threads=args.threads)
    meta = {"machine": platform.machine(), "isa": isa_flags(), "threads": args.threads, "repeats": args.repeats,
            "model": args.model, "task": args.task, "buckets": args.buckets}
    results.write(args.out / "memory", {"meta": meta, "rows": rows}, markdown(rows, meta))
    print(markdown(rows, meta))
    return 0


if __name__ == "__main__":
    sys.exit(main())
