"""Benchmark the native runtime against the ExecuTorch Python runtime and ONNX Runtime.

For one bundle (with model.pte and model.onnx), measured in one run:
  * latency per (seq_len, threads): edgenlp-run --bench (C++), ExecuTorch
    pybindings, ONNX Runtime, in --rounds interleaved rounds; medians and
    ratios against the ExecuTorch Python runtime (the baseline measured in
    the same rounds);
  * cold start (open bundle -> first result, seq 128, 1 thread): --cold-runs
    fresh processes per runtime, interleaved, median; native with and
    without sha256 verification (ExecuTorch Python and ONNX Runtime verify
    nothing; their import time is reported apart);
  * tokenizer throughput, native (ctypes, batch) vs BertTokenizerFast;
  * stripped sizes of libedgenlp + edgenlp-run and of the ExecuTorch
    libraries they load, per architecture built.

    .venv/bin/python tools/bench/runtime.py --bundle out/minilm-sst2 [--iters 30] [--rounds 3] [--cold-runs 7]

Writes runtime.json and runtime.md to --out.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
log = logging.getLogger("bench.runtime")


def run_native(run: Path, bundle: Path, *, seq_len: int, threads: int, iters: int, warmup: int = 3,
               extra: tuple[str, ...] = ()) -> dict:
    out = subprocess.run([str(run), str(bundle), "--bench", str(iters), "--seq-len", str(seq_len),
                          "--threads", str(threads), "--warmup", str(warmup), *extra],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


PY_ET = r"""
import json, sys, time, statistics, resource
t0 = time.perf_counter()
import torch
from executorch.extension.pybindings.portable_lib import _unsafe_reset_threadpool
bundle, L, threads, iters = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
_unsafe_reset_threadpool(threads)
t_import = time.perf_counter()
from executorch.runtime import Runtime
m = json.load(open(bundle + "/manifest.json"))
meth = next(x for x in sorted(m["artifacts"]["pte"]["methods"], key=lambda x: x["seq_len"]) if x["seq_len"] >= L)
method = Runtime.get().load_program(bundle + "/model.pte").load_method(meth["name"])
x = torch.full((1, meth["seq_len"]), 1037, dtype=torch.int64); x[0, 0] = 101; x[0, L - 1] = 102
mask = torch.zeros(1, meth["seq_len"], dtype=torch.int64); mask[0, :L] = 1
method.execute([x, mask])
t_first = time.perf_counter()
for _ in range(3): method.execute([x, mask])
lat = []
for _ in range(iters):
    s = time.perf_counter(); method.execute([x, mask]); lat.append((time.perf_counter() - s) * 1e3)
lat.sort()
print(json.dumps({"median": statistics.median(lat), "p90": lat[int(0.9 * (len(lat) - 1))],
                  "cold_start_ms": (t_first - t_import) * 1e3, "import_ms": (t_import - t0) * 1e3,
                  "peak_rss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))
"""

PY_ORT = r"""
import json, sys, time, statistics, resource
import numpy as np
import onnxruntime as ort
bundle, L, threads, iters = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
t0 = time.perf_counter()
so = ort.SessionOptions(); so.intra_op_num_threads = threads; so.inter_op_num_threads = 1
s = ort.InferenceSession(bundle + "/model.onnx", so, providers=["CPUExecutionProvider"])
names = [i.name for i in s.get_inputs()]
x = np.full((1, L), 1037, dtype=np.int64); x[0, 0] = 101; x[0, -1] = 102
feed = {names[0]: x, names[1]: np.ones((1, L), dtype=np.int64)}
s.run(None, feed)
t_first = time.perf_counter()
for _ in range(3): s.run(None, feed)
lat = []
for _ in range(iters):
    t = time.perf_counter(); s.run(None, feed); lat.append((time.perf_counter() - t) * 1e3)
lat.sort()
print(json.dumps({"median": statistics.median(lat), "p90": lat[int(0.9 * (len(lat) - 1))],
                  "cold_start_ms": (t_first - t0) * 1e3,
                  "peak_rss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))
"""


def run_py(script: str, bundle: Path, *, seq_len: int, threads: int, iters: int) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    out = subprocess.run([sys.executable, "-c", script, str(bundle), str(seq_len), str(threads), str(iters)],
                         capture_output=True, text=True, check=True, env=env)
    return json.loads(out.stdout.strip().splitlines()[-1])


def tokenizer_throughput(bundle: Path) -> dict:
    from edgenlp.data.tasks import default_data_dir, read_tsv
    from edgenlp.models.tokenizer import build_tokenizer
    from edgenlp.run.native import NativeHandle

    texts = list(read_tsv(default_data_dir() / "sst2" / "dev.tsv").texts) * 5
    manifest = json.loads((bundle / "manifest.json").read_text())
    hf = build_tokenizer(bundle / manifest["tokenizer"]["vocab"], manifest["tokenizer"])
    handle = NativeHandle(bundle)
    nbytes = sum(len(t.encode()) for t in texts)
    res = {}
    for name, fn in (("native", lambda: handle.tokenize(texts)),
                     ("hf_fast_batch", lambda: hf(texts, truncation=True, max_length=handle.max_seq_len)),
                     ("hf_fast_one_by_one", lambda: [hf(t, truncation=True, max_length=handle.max_seq_len)
                                                     for t in texts])):
        best = float("inf")
        for _ in range(3):
            s = time.perf_counter()
            fn()
            best = min(best, time.perf_counter() - s)
        res[name] = {"texts_per_s": len(texts) / best, "mb_per_s": nbytes / best / 1e6}
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


def med(values) -> float:
    return float(statistics.median(values))


def cold_start(run: Path, bundle: Path, *, runs: int, has_onnx: bool) -> dict:
    """Open -> first result at seq 128, 1 thread: `runs` fresh processes per runtime, interleaved."""
    kinds = {
        "native": lambda: run_native(run, bundle, seq_len=128, threads=1, iters=1, warmup=0),
        "native_no_verify": lambda: run_native(run, bundle, seq_len=128, threads=1, iters=1, warmup=0,
                                               extra=("--no-verify",)),
        "executorch_python": lambda: run_py(PY_ET, bundle, seq_len=128, threads=1, iters=1),
    }
    if has_onnx:
        kinds["onnxruntime"] = lambda: run_py(PY_ORT, bundle, seq_len=128, threads=1, iters=1)
    samples: dict[str, list[dict]] = {k: [] for k in kinds}
    for i in range(runs):
        for k, fn in kinds.items():
            samples[k].append(fn())
    out = {}
    for k, rs in samples.items():
        out[k] = {"cold_start_ms": med(r["cold_start_ms"] for r in rs),
                  "runs_ms": [round(r["cold_start_ms"], 1) for r in rs],
                  "peak_rss_kb": med(r["peak_rss_kb"] for r in rs)}
        if "open_ms" in rs[0]:
            out[k]["open_ms"] = med(r["open_ms"] for r in rs)
        if "import_ms" in rs[0]:
            out[k]["import_ms"] = med(r["import_ms"] for r in rs)
    out["runs"] = runs
    return out


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bundle", type=Path, required=True)
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds per (seq_len, threads)")
    ap.add_argument("--cold-runs", type=int, default=7, help="fresh processes per runtime for cold start")
    ap.add_argument("--seq-lens", default="32,128")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--out", type=Path, default=REPO / "tools/bench/results")
    args = ap.parse_args(argv)
    run = REPO / "runtime/build/x86_64/edgenlp-run"
    subprocess.run(["bash", str(REPO / "runtime/build.sh")], check=True, capture_output=True)
    has_onnx = (args.bundle / "model.onnx").exists()
    rows = []
    for L in (int(x) for x in args.seq_lens.split(",")):
        for T in (int(x) for x in args.threads.split(",")):
            log.info("seq %d threads %d", L, T)
            ets, nats, orts = [], [], []
            for _ in range(args.rounds):
                ets.append(run_py(PY_ET, args.bundle, seq_len=L, threads=T, iters=args.iters))
                nats.append(run_native(run, args.bundle, seq_len=L, threads=T, iters=args.iters))
                if has_onnx:
                    orts.append(run_py(PY_ORT, args.bundle, seq_len=L, threads=T, iters=args.iters))
            et = {"median": med(r["median"] for r in ets), "p90": med(r["p90"] for r in ets),
                  "peak_rss_kb": med(r["peak_rss_kb"] for r in ets), "round_medians": [r["median"] for r in ets]}
            nat = {"median": med(r["latency_ms"]["median"] for r in nats), "p90": med(r["latency_ms"]["p90"] for r in nats),
                   "peak_rss_kb": med(r["peak_rss_kb"] for r in nats),
                   "round_medians": [r["latency_ms"]["median"] for r in nats]}
            ort = ({"median": med(r["median"] for r in orts), "p90": med(r["p90"] for r in orts),
                    "peak_rss_kb": med(r["peak_rss_kb"] for r in orts), "round_medians": [r["median"] for r in orts]}
                   if orts else None)
            row = {"seq_len": L, "threads": T, "executorch_python": et, "native": nat, "onnxruntime": ort,
                   # median over rounds of the per-round ratio: each against the baseline of its own round
                   "native_vs_executorch_python": med(n["latency_ms"]["median"] / e["median"] for n, e in zip(nats, ets)),
                   "onnxruntime_vs_executorch_python": (med(o["median"] / e["median"] for o, e in zip(orts, ets))
                                                        if orts else None)}
            rows.append(row)
    log.info("cold start")
    cold = cold_start(run, args.bundle, runs=args.cold_runs, has_onnx=has_onnx)
    result = {"bundle": str(args.bundle), "iters": args.iters, "rounds": args.rounds, "machine": os.uname().machine,
              "nproc": os.cpu_count(), "load_avg_at_end": os.getloadavg(), "baseline": "executorch_python",
              "latency": rows, "cold_start": cold, "tokenizer": tokenizer_throughput(args.bundle), "sizes": sizes()}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "runtime.json").write_text(json.dumps(result, indent=2))
    md = ["# Native runtime benchmark", "", f"Bundle `{args.bundle}`, {args.rounds} interleaved rounds of {args.iters} "
          "iterations; latency in ms = median over rounds of each round's median; ratio = runtime / ExecuTorch "
          "Python, median of the per-round ratios (each against the baseline measured in the same round). "
          f"{os.cpu_count()} cores shared with other jobs (load average {os.getloadavg()[0]:.1f} at the end): "
          "compare ratios, not absolute times.", "",
          "| seq | threads | ExecuTorch Python | native (edgenlp-run) | ratio | ONNX Runtime | ratio | native RSS MB | ET-Python RSS MB |",
          "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        o = r["onnxruntime"]
        md.append(f"| {r['seq_len']} | {r['threads']} | {r['executorch_python']['median']:.2f} | "
                  f"{r['native']['median']:.2f} | {r['native_vs_executorch_python']:.2f} | "
                  f"{o['median'] if o else float('nan'):.2f} | {r['onnxruntime_vs_executorch_python'] or float('nan'):.2f} | "
                  f"{r['native']['peak_rss_kb'] / 1024:.0f} | {r['executorch_python']['peak_rss_kb'] / 1024:.0f} |")
    md += ["", f"Cold start (open bundle -> first result, seq 128, 1 thread; median of {cold['runs']} fresh processes "
           "per runtime, interleaved):", "",
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
    (args.out / "runtime.md").write_text("\n".join(md) + "\n")
    log.info("wrote %s", args.out / "runtime.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
