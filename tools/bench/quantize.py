"""Benchmark quantization schemes on fine-tuned teachers: accuracy, size, latency (ExecuTorch, ONNX Runtime).

For each task (teacher model directory with finetune.json), in one run:
  * bundles: fp32, int8, int4, int8 + int8 embeddings, int4 + int4 embeddings,
    int4 + int4 embeddings + trimmed vocabulary, mixed at two size budgets
    (--budgets, fractions of the fp32 weight bytes);
  * dev accuracy through the lowered ExecuTorch bundle (--dev-limit sentences);
  * sizes of model.pte / model.onnx;
  * model-only latency, median of --iters runs, at seq 32/128 with 1/2
    threads: the ExecuTorch Python runtime and ONNX Runtime (fp32, int8
    per-channel MatMulInteger, int4 MatMulNBits), each (variant, runtime,
    seq, threads) a fresh process per round (tools/bench/workers.py
    ``latency``: the library's runners, buckets from ``pick_bucket``), in
    --rounds interleaved rounds; ratios against the fp32 bundle of the same
    round and runtime. The native runtime columns (latency and peak RSS of a
    fresh ``edgenlp-run --bench`` process) come from NATIVE_HOOK.

    .venv/bin/python tools/bench/quantize.py --teachers /work/artifacts/teachers --tasks sst2 banking77

Writes quantize.json and quantize.md to --out, with the CPU's ISA flags.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tools.bench.harness import Results, fresh_process, median, run_rounds  # noqa: E402

log = logging.getLogger("bench.quantize")

VARIANTS = {
    "fp32": None,
    "int8": dict(scheme="int8"),
    "int4": dict(scheme="int4"),
    "int8+emb8": dict(scheme="int8", embeddings="int8"),
    "int4+emb4": dict(scheme="int4", embeddings="int4"),
    "int4+emb4+trim": dict(scheme="int4", embeddings="int4", trim_vocab=True),
}

def NATIVE_HOOK(bundle: Path, *, seq_len: int, threads: int, iters: int) -> dict | None:
    """The native runtime on ``bundle`` in a fresh process: ``{"median": ms, "peak_rss_mb": MB}``, None if not built."""
    run = REPO / "runtime" / "build" / os.uname().machine / "edgenlp-run"
    if not run.is_file():
        log.warning("native runtime not built (%s): native columns stay empty", run)
        return None
    # Peak RSS through GNU time: a child forked from this (torch-sized) process inherits its high-water
    # mark in ru_maxrss across exec, so the runner's own peak_rss_kb would report ours.
    out = subprocess.run(["/usr/bin/time", "-f", "maxrss_kb=%M", str(run), str(bundle), "--bench", str(iters), "--seq-len",
                          str(seq_len), "--threads", str(threads), "--warmup", "3"], capture_output=True, text=True)
    if out.returncode != 0:
        log.warning("native %s: %s", bundle.name, out.stderr.strip().splitlines()[-1:] or out.returncode)
        return None
    doc = json.loads(out.stdout)
    rss_kb = next(int(l.split("=")[1]) for l in out.stderr.splitlines() if l.startswith("maxrss_kb="))
    return {"median": doc["latency_ms"]["median"], "peak_rss_mb": rss_kb / 1024}


def remeasure_rss(result: dict, *, seq_len: int) -> None:
    """Fill every variant's ``native_peak_rss_mb`` again (a fresh process, one bucket, 1 thread)."""
    for rows in result["tasks"].values():
        for name, r in rows.items():
            nat = NATIVE_HOOK(Path(r["path"]), seq_len=seq_len, threads=1, iters=3)
            if nat and "latency" in r:
                r["latency"]["native_peak_rss_mb"] = round(nat["peak_rss_mb"], 1)
                log.info("%s: native peak RSS %.1f MB", name, nat["peak_rss_mb"])


def model_ms(bundle: Path, runtime: str, *, seq_len: int, threads: int, iters: int) -> list[float] | None:
    """Model-only times (ms) of ``runtime`` on ``bundle`` in a fresh process (workers.latency); None if it failed."""
    try:
        return fresh_process("latency", {"runtime": runtime, "bundle": str(bundle), "seq_len": seq_len, "threads": threads,
                                         "iters": iters, "warmup": 3, "modes": ["model"]}, threads=threads)["model_ms"]
    except RuntimeError as exc:
        log.warning("%s/%s: %s", bundle.name, runtime, str(exc).strip().splitlines()[-1:])
        return None


def build(task_name: str, teacher: Path, out: Path, *, budgets, seq_len: int) -> dict:
    from edgenlp.data.tasks import load_task
    from edgenlp.export.api import ExportConfig, export_bundle
    from edgenlp.models.registry import load_model
    from edgenlp.compress.guard import quantize_bundle
    from edgenlp.quantize.config import QuantizeConfig
    from edgenlp.quantize.sensitivity import QuantizeError

    data = load_task(task_name)
    model, info = load_model(str(teacher), labels=data.labels)
    fp32_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    ecfg = ExportConfig(max_seq_len=seq_len, buckets=(32, seq_len) if seq_len > 32 else (seq_len,), parity_samples=16)
    variants = dict(VARIANTS)
    for frac in budgets:  # below ~22% of fp32 an int8 word table alone leaves no room: int4 embeddings there
        variants[f"mixed@{frac:.0%}"] = dict(scheme="mixed", embeddings="int8" if frac >= 0.22 else "int4",
                                             size_mb=round(fp32_bytes * frac / 1e6, 2))
    built, skipped = {}, {}
    for name, kw in variants.items():
        path = out / task_name / name
        t0 = time.perf_counter()
        if path.exists() and (path / "manifest.json").exists():
            log.info("%s/%s: reusing %s", task_name, name, path)
        elif kw is None:
            export_bundle(model, info, path, config=ecfg, task=data)
        else:
            try:
                quantize_bundle(model, info, path, QuantizeConfig(**kw), task=data, export_config=ecfg, progress=False)
            except QuantizeError as exc:  # a budget the scheme cannot meet is a result, not a crash
                log.warning("%s/%s: %s", task_name, name, exc)
                skipped[name] = str(exc)
                continue
        built[name] = {"path": str(path), "build_s": round(time.perf_counter() - t0, 1)}
        log.info("%s/%s built in %.0fs", task_name, name, time.perf_counter() - t0)
    return built, skipped


def evaluate(path: Path, task_name: str, limit: int | None) -> dict:
    from edgenlp.bundle import Bundle
    from edgenlp.data.tasks import load_task
    from edgenlp.run.base import get_runner
    from edgenlp.run.evaluate import evaluate_split

    b = Bundle.open(path)
    dev = load_task(task_name).dev
    out = {"pte_mb": b.manifest["sizes"].get("model.pte", 0) / 1e6, "onnx_mb": b.manifest["sizes"].get("model.onnx", 0) / 1e6}
    with get_runner(path, runtime="executorch") as r:
        out["acc_executorch"] = evaluate_split(r, dev, limit=limit)["accuracy"]
    with get_runner(path, runtime="onnx") as r:
        out["acc_onnx"] = evaluate_split(r, dev, limit=limit)["accuracy"]
    q = b.manifest.get("quantization")
    if q:
        from collections import Counter

        out["bits"] = dict(Counter(f"int{v}" if v < 32 else "fp32" for v in q["linears"].values()))
    out["delegate_calls"] = b.manifest["artifacts"]["pte"]["delegate_calls_per_method"]
    return out


def latency(paths: dict[str, Path], *, seq_lens, threads, iters: int, rounds: int) -> dict:
    """Interleaved rounds: every (variant, runtime, seq, threads) once per round, a fresh process each.

    ``{variant: {runtime: {"seq/threads": ms}, "vs_fp32": {runtime: {"seq/threads": ratio}}, "native_peak_rss_mb": MB}}``:
    ms = median over rounds of each round's median; ratio = median of the
    per-round ratios against the fp32 bundle on the same runtime.
    """
    rss: dict[str, float] = {}

    def native(p: Path, name: str, L: int, t: int) -> list[float] | None:
        nat = NATIVE_HOOK(p, seq_len=L, threads=t, iters=iters)
        if nat:
            rss[name] = max(rss.get(name, 0.0), nat["peak_rss_mb"])
        return [nat["median"]] if nat else None

    cands = {}
    for L in seq_lens:
        for t in threads:
            for name, p in paths.items():
                key = f"{L}/{t}"
                cands[(name, "executorch", key)] = lambda p=p, L=L, t=t: model_ms(p, "executorch", seq_len=L, threads=t, iters=iters)
                if name in ("fp32", "int8", "int4"):
                    cands[(name, "onnx", key)] = lambda p=p, L=L, t=t: model_ms(p, "onnx", seq_len=L, threads=t, iters=iters)
                cands[(name, "native", key)] = lambda p=p, name=name, L=L, t=t: native(p, name, L, t)
    per = run_rounds(cands, rounds=rounds)
    res: dict = {}
    for (name, rt, key), rs in per.items():
        meds = [median(r) for r in rs if r]
        res.setdefault(name, {}).setdefault(rt, {})[key] = round(median(meds), 2) if meds else None
        base = per.get(("fp32", rt, key))
        if base is not None:
            ratios = [median(r) / median(b) for r, b in zip(rs, base) if r and b]
            if ratios:
                res[name].setdefault("vs_fp32", {}).setdefault(rt, {})[key] = round(median(ratios), 3)
    for name, mb in rss.items():
        res[name]["native_peak_rss_mb"] = round(mb, 1)
    return res


def markdown(result: dict) -> str:
    lines = [f"# Quantization benchmark ({result['date']})", "",
             f"Host: {result['cpu']}, ISA flags: {result['isa']}. Shared machine: times carry noise; ratios are within one run.", ""]
    for task, rows in result["tasks"].items():
        when = result.get("measured", {}).get(task)
        lines += [f"## {task}", ""]
        if when:
            lines += [f"Measured {when.get('date')} on {when.get('cpu')} ({when.get('isa')})"
                      + ("" if when.get("latency", True) else "; accuracy and size only (no latency rounds)") + ".", ""]
        lines += [
                  "| variant | linears | acc ET | acc ORT | pte MB | % fp32 | ET 32/1 | ET 128/1 | ET 128/2 | ×fp32 (128/1) | ORT 128/1 | ORT 128/2 | native 128/1 | native 128/2 | native RSS MB |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        base = rows["fp32"]
        for name, r in rows.items():
            et = r.get("latency", {}).get("executorch", {})
            ort = r.get("latency", {}).get("onnx", {})
            nat = r.get("latency", {}).get("native", {})
            b128 = base.get("latency", {}).get("executorch", {}).get("128/1")
            same_round = r.get("latency", {}).get("vs_fp32", {}).get("executorch", {}).get("128/1")
            ratio = (f"{1 / same_round:.2f}" if same_round else f"{b128 / et['128/1']:.2f}" if b128 and et.get("128/1") else "–")
            f = lambda v: "–" if v is None else f"{v:.1f}"  # noqa: E731
            lines.append(f"| {name} | {r.get('bits', {'fp32': 'all'})} | {100 * r['acc_executorch']:.2f} | {100 * r['acc_onnx']:.2f} | "
                         f"{r['pte_mb']:.1f} | {100 * r['pte_mb'] / base['pte_mb']:.0f}% | {f(et.get('32/1'))} | {f(et.get('128/1'))} | "
                         f"{f(et.get('128/2'))} | {ratio} | {f(ort.get('128/1'))} | {f(ort.get('128/2'))} | {f(nat.get('128/1'))} | "
                         f"{f(nat.get('128/2'))} | {f(r.get('latency', {}).get('native_peak_rss_mb'))} |")
        for name, why in result.get("not_built", {}).get(task, {}).items():
            lines.append(f"\n{name}: not built: {why}")
        lines.append("")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--teachers", type=Path, default=Path("/work/artifacts/teachers"))
    ap.add_argument("--tasks", nargs="+", default=["sst2", "banking77"])
    ap.add_argument("--work", type=Path, default=Path("out/bench-quantize"), help="Where bundles are built (reused when present).")
    ap.add_argument("--out", type=Path, default=REPO / "tools/bench/results")
    ap.add_argument("--budgets", type=float, nargs="*", default=[0.25, 0.18], help="Mixed-precision budgets as fractions of fp32 bytes.")
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--dev-limit", type=int, default=None)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--no-latency", action="store_true")
    ap.add_argument("--latency-tasks", nargs="*", default=None,
                    help="Tasks whose bundles are timed (default: all; the tasks' bundles differ only in the classifier)")
    ap.add_argument("--rss-only", action="store_true", help="Re-measure the native peak RSS column of an existing quantize.json.")
    ap.add_argument("--merge", action="store_true",
                    help="Keep the other tasks of an existing quantize.json (each task records when and where it was measured).")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from edgenlp.utils import isa_flags

    results = Results(script="quantize", threads=list(args.threads))
    if args.rss_only:
        result = json.loads((args.out / "quantize.json").read_text())
        result.pop("host", None)
        remeasure_rss(result, seq_len=args.seq_len)
        results.write(args.out / "quantize", result, markdown(result))
        return 0
    env = results.environment
    result = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "isa": isa_flags(),
              "cpu": env.get("cpu", {}).get("model", "?"), "environment": env, "args": {k: str(v) for k, v in vars(args).items()},
              "tasks": {}}
    if args.merge and (args.out / "quantize.json").is_file():
        old = json.loads((args.out / "quantize.json").read_text())
        for t, rows in old.get("tasks", {}).items():
            if t not in args.tasks:
                result["tasks"][t] = rows
                result.setdefault("measured", {})[t] = old.get("measured", {}).get(t, {k: old.get(k) for k in ("date", "cpu", "isa")})
                result.setdefault("not_built", {})[t] = old.get("not_built", {}).get(t, {})
    for task in args.tasks:
        teacher = args.teachers / task
        if not teacher.exists():
            log.error("no teacher at %s", teacher)
            continue
        built, skipped = build(task, teacher, args.work, budgets=args.budgets, seq_len=args.seq_len)
        rows = {name: {**b, **evaluate(Path(b["path"]), task, args.dev_limit)} for name, b in built.items()}
        if not args.no_latency and (args.latency_tasks is None or task in args.latency_tasks):
            lat = latency({n: Path(b["path"]) for n, b in built.items()}, seq_lens=(32, args.seq_len), threads=args.threads,
                          iters=args.iters, rounds=args.rounds)
            for name in rows:
                rows[name]["latency"] = lat.get(name, {})
        result["tasks"][task] = rows
        result.setdefault("measured", {})[task] = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "cpu": result["cpu"],
                                                   "isa": result["isa"], "latency": any("latency" in r for r in rows.values())}
        result.setdefault("not_built", {})[task] = skipped
        results.write(args.out / "quantize", result, markdown(result))
    print(markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
