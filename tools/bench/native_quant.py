"""Native-runtime latency of fp32 vs int8 vs int4 bundles, measured in one run.

For each (seq_len, threads) cell and each bundle (see quant_bundles.py),
``edgenlp-run BUNDLE --bench N --seq-len L --threads T`` runs in a fresh
process; the bundles are interleaved inside each of ``--rounds`` rounds, and a
cell's latency is the median over rounds of each round's median. Ratios are
bundle / fp32, the median of the per-round ratios (each against the fp32 run
of the same round), so they hold on a shared, noisy host where absolute times
do not.

:func:`native_latency` is the hook for tools/bench/quantize.py's native
columns: ``native_latency({"fp32": dir, "int8": dir}, seqs=(32, 128), threads=(1, 2))``.

    .venv/bin/python tools/bench/native_quant.py [--bundles-dir DIR] [--iters 20] [--rounds 3]

Writes native_quant.json and native_quant.md to --out.
"""

from __future__ import annotations

import argparse
import json
import logging
import platform
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tools.bench.harness import Results, Timings, median, run_rounds  # noqa: E402
from tools.bench.quant_bundles import REPO, VARIANTS, build_bundles, isa_flags, native_run  # noqa: E402

log = logging.getLogger("bench.native_quant")


def _bench(run: Path, bundle, *, seq_len: int, threads: int, iters: int, warmup: int) -> dict:
    path, flags = (bundle, []) if isinstance(bundle, (str, Path)) else bundle
    out = subprocess.run([str(run), str(path), "--bench", str(iters), "--seq-len", str(seq_len),
                          "--threads", str(threads), "--warmup", str(warmup), *flags],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def native_latency(bundles: dict[str, Path], *, seqs=(32, 128), threads=(1, 2), iters: int = 20, rounds: int = 3,
                   warmup: int = 3, baseline: str = "fp32", arch: str = "x86_64") -> list[dict]:
    """One row per (seq_len, threads, bundle): median ms over rounds, ratio to ``baseline`` (same-round), peak RSS.

    A value of ``bundles`` is a bundle directory or ``(directory, [extra edgenlp-run flags])``.
    """
    run = native_run(arch)
    rows = []
    for seq in seqs:
        for t in threads:
            per = run_rounds({name: (lambda b=b: _bench(run, b, seq_len=seq, threads=t, iters=iters, warmup=warmup))
                              for name, b in bundles.items()}, rounds=rounds)  # the order flips every round
            timings = Timings.from_rounds({name: [x["latency_ms"]["median"] for x in runs] for name, runs in per.items()})
            for name, runs in per.items():
                med = timings.round_medians(name)
                row = {"seq_len": seq, "threads": t, "bundle": name, "latency_ms": round(median(med), 3),
                       "rounds_ms": [round(m, 3) for m in med],
                       "peak_rss_mb": round(max(x["peak_rss_kb"] for x in runs) / 1024, 1)}
                if baseline in per:
                    r = timings.ratio_summary(name, baseline)
                    row["ratio_to_" + baseline] = round(r["median"], 3)
                    row[f"ratio_to_{baseline}_p10"], row[f"ratio_to_{baseline}_p90"] = round(r["p10"], 3), round(r["p90"], 3)
                rows.append(row)
                log.info("seq %d threads %d %s: %.2f ms", seq, t, name, row["latency_ms"])
    return rows


def markdown(rows: list[dict], meta: dict) -> str:
    names = list(dict.fromkeys(r["bundle"] for r in rows))
    head = "| seq | threads | " + " | ".join(f"{n} ms | {n}/fp32" if n != "fp32" else "fp32 ms" for n in names) + " |"
    sep = "|---|---|" + "|".join("---|---" if n != "fp32" else "---" for n in names) + "|"
    lines = ["# Native runtime latency: fp32 vs int8 vs int4", "",
             f"Host {meta['machine']} ({meta['isa']}), {meta['cores']} cores shared with other jobs; edgenlp-run --bench, "
             f"{meta['iters']} iterations x {meta['rounds']} interleaved rounds; ms = median over rounds of each round's "
             "median; ratio = median of per-round ratios against the fp32 bundle of the same round.",
             "Bundles: " + "; ".join(f"{n}: {meta['bundles'][n]}" for n in names), "", head, sep]
    cells = {}
    for r in rows:
        cells.setdefault((r["seq_len"], r["threads"]), {})[r["bundle"]] = r
    for (seq, t), by in cells.items():
        parts = []
        for n in names:
            r = by[n]
            parts.append(f"{r['latency_ms']:.2f}" if n == "fp32" else f"{r['latency_ms']:.2f} | {r.get('ratio_to_fp32', float('nan')):.2f}")
        lines.append(f"| {seq} | {t} | " + " | ".join(parts) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bundles-dir", type=Path, default=REPO / ".cache" / "bench-quant-bundles")
    ap.add_argument("--model", default="minilm-l6")
    ap.add_argument("--task", default="sst2")
    ap.add_argument("--buckets", default="16,32,64,128")
    ap.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    ap.add_argument("--seqs", nargs="+", type=int, default=[32, 128])
    ap.add_argument("--threads", nargs="+", type=int, default=[1, 2])
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--no-weight-cache-row", action="store_true",
                    help="Also time the fp32 bundle with --no-weight-cache (per-method packing), to show the cache costs no speed.")
    ap.add_argument("--out", type=Path, default=REPO / "tools" / "bench" / "results")
    args = ap.parse_args(argv)
    if "fp32" not in args.variants:
        ap.error("--variants must include fp32 (the baseline)")
    results = Results(script="native_quant", threads=list(args.threads))
    built = build_bundles(args.bundles_dir, model=args.model, task=args.task, buckets=args.buckets,
                          variants=tuple(args.variants))
    bundles: dict = dict(built)
    if args.no_weight_cache_row:
        bundles["fp32-no-cache"] = (built["fp32"], ["--no-weight-cache"])
    rows = native_latency(bundles, seqs=tuple(args.seqs), threads=tuple(args.threads), iters=args.iters,
                          rounds=args.rounds)
    import os

    sizes = {n: round((p / "model.pte").stat().st_size / 1e6, 1) for n, p in built.items()}
    described = {n: f"{sizes[n]} MB, " + (", ".join(f"{k} {v}" for k, v in VARIANTS[n].items()) or "fp32")
                 for n in built}
    if args.no_weight_cache_row:
        described["fp32-no-cache"] = "the fp32 bundle run with --no-weight-cache"
    meta = {"machine": platform.machine(), "isa": isa_flags(), "cores": os.cpu_count(), "iters": args.iters,
            "rounds": args.rounds, "model": args.model, "task": args.task, "bundles": described}
    results.write(args.out / "native_quant", {"meta": meta, "rows": rows}, markdown(rows, meta))
    print(markdown(rows, meta))
    return 0


if __name__ == "__main__":
    sys.exit(main())
