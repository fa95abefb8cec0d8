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
from edgenlp.bundle import Bundle, pad_to_bucket, pick_bucket
t_import = time.perf_counter()
from executorch.runtime import Runtime
b = Bundle.open(bundle, verify=False)
meth = pick_bucket(b.pte_methods, L)
method = Runtime.get().load_program(b.artifact("pte")).load_method(meth.name)
x, mask = pad_to_bucket([101] + [1037] * (L - 2) + [102], meth, pad_id=0)
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


RUNTIMES = ("native", "executorch", "onnx")  # the bundle's runtimes, in the order each round runs them
BASELINE = "executorch"
MODES = {"model": "model only (tokenized, padded, masked ids -> logits)", "e2e": "end to end (text -> label, Runner.predict)"}


def measure_worker(args: dict) -> dict:
    """Body of one fresh process: one runtime at one (seq_len, threads); model-only and end-to-end runs alternate."""
    import resource

    from edgenlp.bundle import pad_to_bucket, pick_bucket
    from edgenlp.models.tokenizer import pad_batch
    from edgenlp.profile.native import text_of_length
    from edgenlp.run.base import get_runner

    runtime, bundle, threads = args["runtime"], args["bundle"], int(args["threads"])
    iters, warmup = int(args["iters"]), int(args["warmup"])
    text = text_of_length(int(args["seq_len"]))
    runner = get_runner(bundle, runtime=runtime, threads=threads)
    ids = runner.token_ids([text])[0]
    traced = None
    if runtime == "native":
        from edgenlp.run.native import NativeHandle

        traced = NativeHandle(bundle)
        traced.enable_etdump()
        model = lambda: traced.logits([text])  # noqa: E731  timed by its ETDump Method::execute events
    elif runtime == "executorch":
        m = pick_bucket(runner.methods, len(ids))
        x, mask = pad_to_bucket(ids, m, pad_id=runner.pad_id)
        method = runner._method(m.name)
        model = lambda: method.execute([x, mask])  # noqa: E731
    else:
        x, mask = pad_batch([ids], pad_id=runner.pad_id)
        model = lambda: runner.run_batch(x, mask)  # noqa: E731
    for _ in range(warmup):
        model()
        runner.predict([text])
    model_ms, e2e_ms = [], []
    for _ in range(iters):
        t0 = time.perf_counter()
        model()
        model_ms.append((time.perf_counter() - t0) * 1e3)
        t0 = time.perf_counter()
        runner.predict([text])
        e2e_ms.append((time.perf_counter() - t0) * 1e3)
    if traced is not None:
        from edgenlp.profile._et_worker import read_etdump

        with tempfile.TemporaryDirectory() as tmp:
            traced.write_etdump(Path(tmp) / "run.etdp")
            _, method_ms = read_etdump(Path(tmp) / "run.etdp")
        model_ms = method_ms[-iters:]
    runner.close()
    return {"tokens": len(ids), "model_ms": model_ms, "e2e_ms": e2e_ms,
            "peak_rss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}


def run_worker(args: dict) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS=str(args["threads"]))
    proc = subprocess.run([sys.executable, __file__, "--worker", json.dumps(args)], capture_output=True, text=True,
                          env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"worker {args['runtime']} failed: {proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def latency(bundle: Path, *, seq_len: int, threads: int, runtimes: tuple[str, ...], rounds: int, iters: int) -> dict:
    """Both modes for every runtime, ``rounds`` interleaved rounds; ratios against the baseline of the same round."""
    per: dict[str, list[dict]] = {rt: [] for rt in runtimes}
    for _ in range(rounds):
        for rt in runtimes:
            per[rt].append(run_worker({"runtime": rt, "bundle": str(bundle), "seq_len": seq_len, "threads": threads,
                                       "iters": iters, "warmup": 3}))
    row: dict = {"seq_len": seq_len, "threads": threads, "tokens": per[runtimes[0]][0]["tokens"]}
    for rt, rs in per.items():
        row[rt] = {"peak_rss_kb": med(r["peak_rss_kb"] for r in rs)}
        for mode in MODES:
            round_medians = [med(r[f"{mode}_ms"]) for r in rs]
            row[rt][mode] = {"median_ms": med(round_medians), "round_medians_ms": round_medians,
                             "p90_ms": med(float(np.percentile(r[f"{mode}_ms"], 90)) for r in rs)}
            if BASELINE in per:
                row[rt][mode]["vs_baseline"] = med(
                    med(r[f"{mode}_ms"]) / med(b[f"{mode}_ms"]) for r, b in zip(rs, per[BASELINE]))
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
    from edgenlp.cli.types import parse_int_list

    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if argv is None and len(sys.argv) == 3 and sys.argv[1] == "--worker":
        print(json.dumps(measure_worker(json.loads(sys.argv[2]))))
        return 0
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
    from edgenlp.utils import environment

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
    env = environment()
    result = {"bundle": str(args.bundle), "iters": args.iters, "rounds": args.rounds, "environment": env,
              "load_avg_at_end": os.getloadavg(), "baseline": BASELINE, "modes": MODES,
              "methods": {"native": {"model": "ETDump Method::execute events of a second handle, same process",
                                     "e2e": "NativeRunner.predict (ctypes: native tokenizer + ExecuTorch C++)"},
                          "executorch": {"model": "perf_counter around Method.execute (pybindings)",
                                         "e2e": "ExecuTorchRunner.predict (HF fast tokenizer + pybindings)"},
                          "onnx": {"model": "perf_counter around InferenceSession.run",
                                   "e2e": "OnnxRunner.predict (HF fast tokenizer + ONNX Runtime)"}},
              "latency": rows, "cold_start": cold, "tokenizer": tok, "sizes": None if args.skip_extras else sizes()}
    args.out.mkdir(parents=True, exist_ok=True)
    stem = "runtime-latency" if args.skip_extras else "runtime"
    (args.out / f"{stem}.json").write_text(json.dumps(result, indent=2))
    cpu = env["cpu"]
    names = {"native": "native", "executorch": "ExecuTorch Python", "onnx": "ONNX Runtime"}
    others = [rt for rt in runtimes if rt != BASELINE]
    md = ["# Runtime benchmark", "",
          f"Bundle `{args.bundle}`; {cpu.get('model', '?')}, {cpu.get('cpu_count')} cores, ISA flags: "
          f"{' '.join(cpu.get('isa', [])) or 'none listed'}; load average {os.getloadavg()[0]:.1f} at the end.", "",
          f"{args.rounds} interleaved rounds (a fresh process per runtime and round) of {args.iters} iterations; "
          "within a process model-only and end-to-end runs alternate. Latency in ms = median over rounds of each "
          f"round's median; ratio = runtime / {names[BASELINE]}, median of the per-round ratios (each against the "
          "baseline measured in the same round). The text tokenizes to exactly `seq` tokens.", "",
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
        (args.out / f"{stem}.md").write_text("\n".join(md) + "\n")
        log.info("wrote %s", args.out / f"{stem}.md")
        return 0
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
