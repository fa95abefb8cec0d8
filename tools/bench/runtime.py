"""Benchmark the native runtime against the ExecuTorch Python runtime and ONNX Runtime.

For one bundle (with model.pte and model.onnx), measured in one run:
  * latency per (seq_len, threads) for every runtime of the bundle (native
    through libedgenlp, ExecuTorch Python, ONNX Runtime), both ways, in the
    same process and alternating run by run:
      - model only: the program on ids already tokenized, padded into the
        bucket (edgenlp.bundle.pick_bucket/pad_to_bucket) and masked; ExecuTorch
        Python and ONNX Runtime are timed around execute/run, the native runtime
        by its ETDump ``Method::execute`` event (the C API takes text, so the
        program's own timer is the only model-only clock it has);
      - end to end: text in, label out through ``Runner.predict`` (tokenizer,
        bucket, pad, execute, softmax, argmax), the same call for every runtime;
    --rounds interleaved rounds of a fresh process per runtime; medians and
    ratios against the ExecuTorch Python runtime measured in the same round;
  * cold start (open bundle -> first result, seq 128, 1 thread): --cold-runs
    fresh processes per runtime, interleaved, median; native with and
    without sha256 verification (ExecuTorch Python and ONNX Runtime verify
    nothing; their import time is reported apart);
  * tokenizer throughput, native (ctypes, batch) vs BertTokenizerFast;
  * stripped sizes of libedgenlp + edgenlp-run and of the ExecuTorch
    libraries they load, per architecture built.

    .venv/bin/python tools/bench/runtime.py --bundle out/minilm-sst2 [--iters 30] [--rounds 3] [--cold-runs 7]

Writes runtime.json and runtime.md to --out (with the host's CPU model and ISA flags).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tools.bench.harness import Results, Timings, fresh_process, interleave, median, run_rounds  # noqa: E402

log = logging.getLogger("bench.runtime")


def run_native(run: Path, bundle: Path, *, seq_len: int, threads: int, iters: int, warmup: int = 3,
               extra: tuple[str, ...] = ()) -> dict:
    """``edgenlp-run BUNDLE --bench`` in a fresh process: its JSON (latency_ms, open_ms, cold_start_ms, peak_rss_kb)."""
    out = subprocess.run([str(run), str(bundle), "--bench", str(iters), "--seq-len", str(seq_len),
                          "--threads", str(threads), "--warmup", str(warmup), *extra],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


RUNTIMES = ("native", "executorch", "onnx")  # the bundle's runtimes, in the order each round runs them
BASELINE = "executorch"
MODES = {"model": "model only (tokenized, padded, masked ids -> logits)", "e2e": "end to end (text -> label, Runner.predict)"}


def latency(bundle: Path, *, seq_len: int, threads: int, runtimes: tuple[str, ...], rounds: int, iters: int) -> dict:
    """Both modes for every runtime: ``rounds`` interleaved rounds of a fresh process per runtime (workers.latency).

    Latency = median over rounds of each round's median; ratio = median of the
    per-round ratios against the baseline runtime of the same round.
    """
    per = run_rounds({rt: (lambda rt=rt: fresh_process("latency", {
        "runtime": rt, "bundle": str(bundle), "seq_len": seq_len, "threads": threads, "iters": iters, "warmup": 3},
        threads=threads)) for rt in runtimes}, rounds=rounds)
    row: dict = {"seq_len": seq_len, "threads": threads, "tokens": per[runtimes[0]][0]["tokens"]}
    for rt, rs in per.items():
        row[rt] = {"peak_rss_kb": median([r["peak_rss_kb"] for r in rs])}
    for mode in MODES:
        t = Timings({rt: [r[f"{mode}_ms"] for r in rs] for rt, rs in per.items()})
        for rt in per:
            s = t.summary(rt)
            row[rt][mode] = {"median_ms": s["median"], "round_medians_ms": s["round_medians"], "p10_ms": s["p10"],
                             "p90_ms": s["p90"]}
            if BASELINE in per:
                r = t.ratio_summary(rt, BASELINE)
                row[rt][mode].update(vs_baseline=r["median"], vs_baseline_p10=r["p10"], vs_baseline_p90=r["p90"])
    return row


def tokenizer_throughput(bundle: Path) -> dict:
    from edgenlp.data.tasks import default_data_dir, read_tsv
    from edgenlp.models.tokenizer import build_tokenizer
    from edgenlp.run.native import NativeHandle

    texts = list(read_tsv(default_data_dir() / "sst2" / "dev.tsv").texts) * 5
    manifest = json.loads((bundle / "manifest.json").read_text())
    hf = build_tokenizer(bundle / manifest["tokenizer"]["vocab"], manifest["tokenizer"])
    handle = NativeHandle(bundle)
    nbytes = sum(len(t.encode()) for t in texts)
    calls = {"native": lambda: handle.tokenize(texts),
             "hf_fast_batch": lambda: hf(texts, truncation=True, max_length=handle.max_seq_len),
             "hf_fast_one_by_one": lambda: [hf(t, truncation=True, max_length=handle.max_seq_len) for t in texts]}
    t = interleave(calls, rounds=3, scale=1.0, unit="s")
    res = {}
    for name in calls:
        best = min(t.values(name))  # throughput: the least disturbed of the interleaved rounds
        res[name] = {"texts_per_s": len(texts) / best, "mb_per_s": nbytes / best / 1e6, "median_s": median(t.values(name))}
    handle.close()
    res["texts"] = len(texts)
    return res


def stripped_size(path: Path, strip: str) -> int:
    with tempfile.TemporaryDirectory() as d:
        dst = Path(d) / path.name
        shutil.copyfile(path, dst)
        subprocess.run([strip, "--strip-unneeded", str(dst)], check=True, capture_output=True)
        return dst.stat().st_size


def sizes() -> dict:
    out = {}
    et_libs = ["libexecutorch.so", "libexecutorch_threadpool.so", "libexecutorch_kernels_optimized.so",
               "libexecutorch_backend_xnnpack.so", "libexecutorch_etdump.so"]
    import executorch

    et_dirs = {"x86_64": Path(list(executorch.__path__)[0]) / "lib",
               "aarch64": REPO / "runtime/.deps/executorch-1.5.1-aarch64/executorch/lib"}
    for arch, strip in (("x86_64", "strip"), ("aarch64", "aarch64-linux-gnu-strip")):
        b = REPO / "runtime/build" / arch
        if not (b / "libedgenlp.so").exists() or shutil.which(strip) is None:
            continue
        own = {n: stripped_size((b / n).resolve(), strip) for n in ("libedgenlp.so", "edgenlp-run", "classify")}
        et = {n: stripped_size(et_dirs[arch] / n, strip) for n in et_libs if (et_dirs[arch] / n).exists()}
        out[arch] = {"own": own, "executorch": et, "total_bytes": sum(own.values()) - own["classify"] + sum(et.values())}
    return out


def cold_start(run: Path, bundle: Path, *, runs: int, has_onnx: bool) -> dict:
    """Open -> first result at seq 128, 1 thread: ``runs`` fresh processes per runtime, interleaved."""
    kinds = {
        "native": lambda: run_native(run, bundle, seq_len=128, threads=1, iters=1, warmup=0),
        "native_no_verify": lambda: run_native(run, bundle, seq_len=128, threads=1, iters=1, warmup=0,
                                               extra=("--no-verify",)),
        "executorch_python": lambda: fresh_process("cold_start", {"runtime": "executorch", "bundle": str(bundle),
                                                                  "seq_len": 128, "threads": 1}, threads=1),
    }
    if has_onnx:
        kinds["onnxruntime"] = lambda: fresh_process("cold_start", {"runtime": "onnx", "bundle": str(bundle), "seq_len": 128,
                                                                    "threads": 1}, threads=1)
    samples = run_rounds(kinds, rounds=runs)
    out = {}
    for k, rs in samples.items():
        out[k] = {"cold_start_ms": median([r["cold_start_ms"] for r in rs]),
                  "runs_ms": [round(r["cold_start_ms"], 1) for r in rs],
                  "peak_rss_kb": median([r["peak_rss_kb"] for r in rs])}
        if "open_ms" in rs[0]:
            out[k]["open_ms"] = median([r["open_ms"] for r in rs])
        if "import_ms" in rs[0]:
            out[k]["import_ms"] = median([r["import_ms"] for r in rs])
    out["runs"] = runs
    return out


def main(argv: list[str] | None = None) -> int:
    from edgenlp.cli.types import parse_int_list

    logging.basicConfig(level=logging.INFO, format="%(message)s")
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bundle", type=Path, required=True)
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds per (seq_len, threads)")
    ap.add_argument("--cold-runs", type=int, default=7, help="fresh processes per runtime for cold start")
    ap.add_argument("--seq-lens", type=parse_int_list, default="32,128")
    ap.add_argument("--threads", type=parse_int_list, default="1,2")
    ap.add_argument("--skip-extras", action="store_true",
                    help="latency only (no cold start, tokenizer or sizes), written to runtime-latency.{json,md}")
    ap.add_argument("--out", type=Path, default=REPO / "tools/bench/results")
    args = ap.parse_args(argv)
    results = Results(script="runtime", threads=list(args.threads))

    run = REPO / "runtime/build/x86_64/edgenlp-run"
    subprocess.run(["bash", str(REPO / "runtime/build.sh")], check=True, capture_output=True)
    has_onnx = (args.bundle / "model.onnx").exists()
    runtimes = tuple(rt for rt in RUNTIMES if rt != "onnx" or has_onnx)
    rows = []
    for L in args.seq_lens:
        for T in args.threads:
            log.info("seq %d threads %d", L, T)
            rows.append(latency(args.bundle, seq_len=L, threads=T, runtimes=runtimes, rounds=args.rounds,
                                iters=args.iters))
    cold = tok = None
    if not args.skip_extras:
        log.info("cold start")
        cold = cold_start(run, args.bundle, runs=args.cold_runs, has_onnx=has_onnx)
        tok = tokenizer_throughput(args.bundle)
    env = results.environment
    result = {"bundle": str(args.bundle), "iters": args.iters, "rounds": args.rounds, "environment": env,
              "load_avg_at_end": list(os.getloadavg()), "baseline": BASELINE, "modes": MODES,
              "methods": {"native": {"model": "ETDump Method::execute events of a second handle, same process",
                                     "e2e": "NativeRunner.predict (ctypes: native tokenizer + ExecuTorch C++)"},
                          "executorch": {"model": "perf_counter around Method.execute (pybindings)",
                                         "e2e": "ExecuTorchRunner.predict (HF fast tokenizer + pybindings)"},
                          "onnx": {"model": "perf_counter around InferenceSession.run",
                                   "e2e": "OnnxRunner.predict (HF fast tokenizer + ONNX Runtime)"}},
              "latency": rows, "cold_start": cold, "tokenizer": tok, "sizes": None if args.skip_extras else sizes()}
    stem = "runtime-latency" if args.skip_extras else "runtime"
    cpu = env["cpu"]
    names = {"native": "native", "executorch": "ExecuTorch Python", "onnx": "ONNX Runtime"}
    others = [rt for rt in runtimes if rt != BASELINE]
    md = ["# Runtime benchmark", "",
          f"Bundle `{args.bundle}`; {cpu.get('model', '?')}, {cpu.get('cpu_count')} cores, ISA flags: "
          f"{' '.join(cpu.get('isa', [])) or 'none listed'}; load average {os.getloadavg()[0]:.1f} at the end.", "",
          f"{args.rounds} interleaved rounds (a fresh process per runtime and round) of {args.iters} iterations; "
          "within a process model-only and end-to-end runs alternate. Latency in ms = median over rounds of each "
          f"round's median; ratio = runtime / {names[BASELINE]}, median of the per-round ratios (each against the "
          "baseline measured in the same round; p10–p90 of those ratios in the JSON). The text tokenizes to exactly "
          "`seq` tokens.", "",
          "- model only: " + "; ".join(f"{names[rt]}: {result['methods'][rt]['model']}" for rt in runtimes),
          "- end to end: " + "; ".join(f"{names[rt]}: {result['methods'][rt]['e2e']}" for rt in runtimes), "",
          "| seq | threads | mode | " + " | ".join(names[rt] for rt in runtimes) + " | "
          + " | ".join(f"{names[rt]} ÷ {names[BASELINE]}" for rt in others) + " |",
          "|---|---|---|" + "---:|" * (len(runtimes) + len(others))]
    for r in rows:
        for mode in MODES:
            md.append(f"| {r['seq_len']} | {r['threads']} | {mode} | "
                      + " | ".join(f"{r[rt][mode]['median_ms']:.2f}" for rt in runtimes) + " | "
                      + " | ".join(f"{r[rt][mode]['vs_baseline']:.2f}" for rt in others) + " |")
    md += ["", "Peak RSS (MB, median over rounds; each a Python worker process, so the native runtime's includes the "
           "interpreter and numpy; edgenlp-run alone is in runtime.md's cold-start table): " + "; ".join(
        f"seq {r['seq_len']}/{r['threads']}t: " + ", ".join(f"{names[rt]} {r[rt]['peak_rss_kb'] / 1024:.0f}"
                                                           for rt in runtimes) for r in rows)]
    if args.skip_extras:
        results.write(args.out / stem, result, "\n".join(md))
        return 0
    md += ["", f"Cold start (open bundle -> first result, seq 128, 1 thread; median of {cold['runs']} fresh processes "
           "per runtime, interleaved; the Python runtimes through their registry runner: bundle open without "
           "verification, tokenizer, program load, one predict_logits):", "",
           "| runtime | cold start ms | runs | peak RSS MB |", "|---|---|---|---|"]
    names = {"native": "native (sha256 verified)", "native_no_verify": "native, EDGENLP_OPEN_SKIP_VERIFY",
             "executorch_python": "ExecuTorch Python (no verification)", "onnxruntime": "ONNX Runtime (no verification)"}
    for k, name in names.items():
        if k not in cold:
            continue
        c = cold[k]
        extra = f" (+ {c['import_ms']:.0f} ms imports before)" if "import_ms" in c else ""
        md.append(f"| {name} | {c['cold_start_ms']:.1f}{extra} | {', '.join(f'{x:.0f}' for x in c['runs_ms'])} | "
                  f"{c['peak_rss_kb'] / 1024:.0f} |")
    t = result["tokenizer"]
    md += ["", f"Tokenizer ({t['texts']} SST-2 dev texts): native {t['native']['texts_per_s']:.0f} texts/s "
           f"({t['native']['mb_per_s']:.1f} MB/s), HF fast batch {t['hf_fast_batch']['texts_per_s']:.0f} texts/s, "
           f"HF fast one by one {t['hf_fast_one_by_one']['texts_per_s']:.0f} texts/s", "",
           "Stripped sizes (bytes):", ""]
    for arch, s in result["sizes"].items():
        md.append(f"- {arch}: {', '.join(f'{k} {v}' for k, v in s['own'].items())}; ExecuTorch libs "
                  f"{sum(s['executorch'].values())}; total shipped {s['total_bytes']}")
    results.write(args.out / stem, result, "\n".join(md))
    return 0


if __name__ == "__main__":
    sys.exit(main())
