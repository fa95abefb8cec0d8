"""Benchmark: the cost model's predicted vs measured latency on pruned/quantized MiniLM-sized variants (not CI).

Builds ``--variants`` uneven MiniLM-sized encoders (hidden 384, head_dim 32,
4 to 6 layers, random heads and FFN widths per layer, some layers without
attention or FFN; seeded random weights — latency does not depend on the
values), none of them in the calibration grid, lowers each the way a bundle
is, measures it through the real runtime with the profiler's measurers
(:func:`edgenlp.targets.calibrate.measure_shape`) and compares with
``CostModel.predict`` from the host calibration (``edgenlp targets calibrate
host``). Variants cycle through ``--precisions`` (default fp32 and int8) and run through each of
``--runtimes`` (default ExecuTorch, the runtime the device targets use; int8 =
the quantize step's per-channel int8 linears on XNNPACK, or ONNX Runtime's
dynamic per-channel flow).

Before and after the variants it re-measures calibration shape 0 (the full
MiniLM shape): its drift from the calibration shows how much the shared
machine's load moved between calibration and validation.

The comparison uses each variant's fastest plain run (the least disturbed on a
shared machine, the statistic the calibration fits); the median is reported
too. Writes ``tools/bench/results/cost_model.{json,md}`` (CPU ISA flags,
runtime versions, load averages included), after every variant.

    python tools/bench/cost_model.py                       # 20 variants, seq 128, 1 thread, ExecuTorch fp32/int8
    python tools/bench/cost_model.py --variants 24 --threads 2 --runtimes executorch,onnx
    python tools/bench/cost_model.py --variants 8 --precisions int4 --out tools/bench/results/cost_model-int4
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import tempfile
import time
from pathlib import Path

# tools/bench/profile.py shadows the standard library's ``profile`` (torch imports it through cProfile)
# when this folder is on the import path: drop the script's folder first.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
ROOT = _HERE.parents[1]
sys.path.insert(0, str(ROOT))

from tools.bench.harness import RESULTS, Results  # noqa: E402

log = logging.getLogger("bench.cost_model")


def variants(n: int, seed: int = 0):
    """``n`` uneven MiniLM-sized shapes (deterministic)."""
    import numpy as np

    from edgenlp.models.encoder import EncoderShape
    from edgenlp.targets.calibrate import MINILM

    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        layers = int(rng.integers(4, 7))
        heads = tuple(int(h) for h in rng.integers(0, 13, size=layers))
        ffn = tuple(int(f) * 32 for f in rng.integers(0, 49, size=layers))
        if rng.random() < 0.5:  # a uniformly pruned-looking one every other time
            keep = float(rng.uniform(0.2, 0.9))
            heads, ffn = (max(1, round(12 * keep)),) * layers, (round(1536 * keep / 32) * 32,) * layers
        out.append(EncoderShape(heads=heads, ffn=ffn, **MINILM))
    return out


def stats(rows: list[dict], key: str) -> dict:
    errs = [abs(r["predicted_ms"] - r[key]) / r[key] for r in rows]
    if not errs:
        return {}
    return {"n": len(errs), "mean_rel_err_pct": round(100 * sum(errs) / len(errs), 1), "max_rel_err_pct": round(100 * max(errs), 1)}


def write(result: dict, out: Path, writer: Results) -> None:
    env = result["environment"]
    lines = [
        "# Cost model: predicted vs measured latency on the host",
        "",
        f"CPU: {env['cpu'].get('model')} ({env['cpu'].get('cpu_count')} cores), ISA flags: {', '.join(env['cpu'].get('isa', []))}; "
        f"versions: {', '.join(f'{k} {v}' for k, v in env['versions'].items())}.",
        f"seq {result['seq_len']}, {result['threads']} thread(s); {result['runs']} timed runs per variant; "
        f"load average during the run: {result['load_avg_start']} → {result['load_avg_end']}.",
        f"Calibration table: {result['table']} ({result['table_observations']} observations; measured: {', '.join(result['table_measured'])}).",
        "",
        "Relative error |predicted − measured| / measured, against each variant's fastest plain run (what the calibration fits) "
        "and its median run:",
        "",
        "| runtime / precision | variants | mean err (load-normalized) | max err (load-normalized) | mean err (fastest, raw) | "
        "max err (fastest, raw) | mean err (median, raw) | max err (median, raw) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for k, v in result["summary"].items():
        m = result["summary_median"].get(k, {})
        nm = result.get("summary_normalized", {}).get(k, {})
        lines.append(f"| {k} | {v['n']} | {nm.get('mean_rel_err_pct')}% | {nm.get('max_rel_err_pct')}% | {v['mean_rel_err_pct']}% | "
                     f"{v['max_rel_err_pct']}% | {m.get('mean_rel_err_pct')}% | {m.get('max_rel_err_pct')}% |")  # fmt: skip
    lines += ["", "Load-normalized: each variant's fastest run × (reference time in the calibration / reference time measured "
              "just before the variant), the reference being a 2-layer MiniLM-width encoder through ONNX Runtime fp32; "
              "it removes most of the load other jobs put on a shared machine (compare the load column)."]
    lines += ["", "Reference (calibration shape 0, full MiniLM shape) re-measured now vs its calibration observation:", ""]
    for r in result["reference"]:
        lines.append(f"- {r['when']} {r['runtime']}/{r['precision']}: measured {r['measured_min_ms']:.2f} ms (fastest), "
                     f"predicted {r['predicted_ms']:.2f} ms, calibration observed {r.get('calibration_ms', float('nan')):.2f} ms")  # fmt: skip
    lines += ["", "| # | runtime | bits | layers | heads | FFN | predicted ms | normalized ms | error | fastest raw ms | median raw ms | load |",
              "|---:|---|---|---:|---|---|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
    for i, r in enumerate(result["variants"]):
        meas = r["measured_normalized_ms"] or r["measured_min_ms"]
        err = 100 * (r["predicted_ms"] - meas) / meas
        lines.append(f"| {i} | {r['runtime']} | {r['precision']} | {len(r['heads'])} | {','.join(map(str, r['heads']))} | "
                     f"{','.join(map(str, r['ffn']))} | {r['predicted_ms']:.2f} | {meas:.2f} | {err:+.1f}% | {r['measured_min_ms']:.2f} | "
                     f"{r['measured_median_ms']:.2f} | {r['load_avg'][0]} |")  # fmt: skip
    lines += ["", f"Wall time {result['wall_s']:.0f} s. Goal: mean ≤ 15%, max ≤ 30%."]
    writer.write(out, result, "\n".join(lines))


def summarize(result: dict) -> None:
    groups: dict = {}
    for r in result["variants"]:
        groups.setdefault(f"{r['runtime']}/{r['precision']}", []).append(r)
    groups["all"] = result["variants"]
    result["summary"] = {k: stats(v, "measured_min_ms") for k, v in groups.items()}
    result["summary_median"] = {k: stats(v, "measured_median_ms") for k, v in groups.items()}
    if all(r.get("measured_normalized_ms") for r in result["variants"]):
        result["summary_normalized"] = {k: stats(v, "measured_normalized_ms") for k, v in groups.items()}


def repredict(args, table, models, writer: Results) -> None:
    from edgenlp.models.encoder import EncoderShape
    from edgenlp.targets.calibrate import MINILM

    result = json.loads(args.out.with_name(args.out.name + ".json").read_text())
    result.pop("host", None)
    seen = {(r["runtime"], r["precision"], tuple(r["heads"]), tuple(r["ffn"])) for r in result["variants"]}
    for extra in args.also:
        for r in json.loads(extra.read_text())["variants"]:
            k = (r["runtime"], r["precision"], tuple(r["heads"]), tuple(r["ffn"]))
            if k not in seen:
                seen.add(k)
                result["variants"].append(r)
    for r in result["variants"] + result["reference"]:
        shape = EncoderShape(heads=tuple(r["heads"]), ffn=tuple(r["ffn"]), **MINILM)
        pred = models[r["runtime"]].predict(shape, bits=r["precision"], seq_len=result["seq_len"], threads=result["threads"])
        r["predicted_ms"], r["estimated"] = pred.latency_ms, pred.estimated
        r["predicted_components_ms"] = {k: round(v, 3) for k, v in pred.components_ms.items()}
    result.update(table_observations=len(table.observations), table_measured=table.notes.get("measured", []))
    summarize(result)
    write(result, args.out, writer)
    log.info("summary (load-normalized): %s", json.dumps(result.get("summary_normalized")))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--variants", type=int, default=20)
    ap.add_argument("--runtimes", default="executorch", help="comma-separated: executorch, onnx (each variant runs on each)")
    ap.add_argument("--precisions", default="fp32,int8", help="comma-separated: fp32, int8, int4 (variants cycle through them; "
                    "int4 is ExecuTorch only)")
    ap.add_argument("--slice", default=":", help="measure only these variants of the plan (Python slice, e.g. 10:20)")
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--table", type=Path, help="cost table (default: the host calibration in the user cache)")
    ap.add_argument("--out", type=Path, default=RESULTS / "cost_model")
    ap.add_argument("--workdir", type=Path)
    ap.add_argument("--also", type=Path, action="append", default=[], help="with --repredict: append the variants of these results")
    ap.add_argument("--repredict", action="store_true",
                    help="recompute predictions of an existing result (--out) with the current table and model; measure nothing")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    for name in ("torch", "torchao", "executorch", "onnxscript", "onnx_ir", "transformers", "root"):
        logging.getLogger(name).setLevel(logging.ERROR)
    logging.getLogger().setLevel(logging.WARNING)
    log.setLevel(logging.INFO)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    from edgenlp.errors import EdgeNLPError
    from edgenlp.targets.costmodel import Prediction
    from edgenlp.targets.calibrate import grid_shapes, measure_shape, reference_ms
    from edgenlp.targets.costmodel import CostModel, host_table_path, load_host_table
    from edgenlp.targets.target import load_target

    writer = Results(script="cost_model", threads=args.threads)
    table = load_host_table(args.table)
    host = load_target("host")
    models = {rt: CostModel(host, table, host=host, runtime=rt) for rt in ("onnx", "executorch")}
    if args.repredict:
        repredict(args, table, models, writer)
        return
    start = time.time()
    result = {
        "schema": "edgenlp.bench.cost_model/1", "seq_len": args.seq_len, "threads": args.threads, "runs": args.runs,
        "table": str(args.table or host_table_path(table.key)), "table_observations": len(table.observations),
        "table_measured": table.notes.get("measured", []), "environment": writer.environment,
        "load_avg_start": [round(x, 2) for x in os.getloadavg()], "reference": [], "variants": [],
    }  # fmt: skip
    runtimes = [r.strip() for r in args.runtimes.split(",") if r.strip()]
    if not runtimes or set(runtimes) - {"executorch", "onnx"}:
        raise SystemExit(f"error: --runtimes takes executorch and/or onnx, got {args.runtimes!r}")
    precs = [p.strip() for p in args.precisions.split(",") if p.strip()]
    if not precs or set(precs) - {"fp32", "int8", "int4"} or ("int4" in precs and "onnx" in runtimes):
        raise SystemExit(f"error: --precisions takes fp32, int8 and int4 (int4 with ExecuTorch only), got {args.precisions!r}")
    plan = [(shape, rt, precs[i % len(precs)])
            for i, shape in enumerate(variants(args.variants, seed=args.seed)) for rt in runtimes]
    a, _, b = args.slice.partition(":")
    plan = plan[int(a) if a else None : int(b) if b else None]
    ref = grid_shapes()[0]

    ref_cal = table.notes.get("reference_ms")

    def measure(shape, rt, prec, workdir):
        ref_now = reference_ms(workdir.parent, threads=args.threads, runs=args.runs) if ref_cal else None
        docs: list = []
        ob = measure_shape(shape, runtime=rt, precision=prec, seq_lens=(args.seq_len,), threads=(args.threads,), runs=args.runs,
                           warmup=2, workdir=workdir, docs=docs)[0]  # fmt: skip
        try:
            pred = models[rt].predict(shape, bits=prec, seq_len=args.seq_len, threads=args.threads)
        except EdgeNLPError as exc:  # no rows for this runtime yet: measure now, --repredict later
            log.warning("no prediction yet: %s", exc)
            pred = Prediction(float("nan"), float("nan"), float("nan"), True)
        doc = docs[0]
        return {"runtime": rt, "precision": prec, "heads": list(shape.heads), "ffn": list(shape.ffn), "predicted_ms": pred.latency_ms,
                "estimated": pred.estimated, "measured_min_ms": ob.total_ms, "measured_median_ms": doc["total"]["latency_ms"][rt],
                "predicted_components_ms": {k: round(v, 3) for k, v in pred.components_ms.items()},
                "measured_components_ms": {k: round(v, 3) for k, v in ob.components.items()},
                "load_avg": [round(x, 2) for x in os.getloadavg()], "reference_now_ms": ref_now,
                "measured_normalized_ms": ob.total_ms * ref_cal / ref_now if ref_cal else None}  # fmt: skip

    def reference(when: str, workdir: Path) -> None:
        r = measure(ref, "onnx", "fp32", workdir / "reference")
        cal = [o.total_ms for o in table.observations if o.runtime == "onnx" and o.precision == "fp32" and o.threads == args.threads
               and o.seq_len == args.seq_len and tuple(o.shape["heads"]) == ref.heads and tuple(o.shape["ffn"]) == ref.ffn]  # fmt: skip
        result["reference"].append({**r, "when": when, "calibration_ms": cal[0] if cal else float("nan")})

    with tempfile.TemporaryDirectory(prefix="edgenlp-bench-cost-") as tmp:
        workdir = args.workdir or Path(tmp)
        reference("before", workdir)
        for i, (shape, rt, prec) in enumerate(plan):
            log.info("variant %d/%d: %s %s heads %s ffn %s", i + 1, len(plan), rt, prec, shape.heads, shape.ffn)
            result["variants"].append(measure(shape, rt, prec, workdir / f"v{i}"))
            groups: dict = {}
            for r in result["variants"]:
                groups.setdefault(f"{r['runtime']}/{r['precision']}", []).append(r)
            groups["all"] = result["variants"]
            result["summary"] = {k: stats(v, "measured_min_ms") for k, v in groups.items()}
            if ref_cal:
                result["summary_normalized"] = {k: stats(v, "measured_normalized_ms") for k, v in groups.items()}
            result["summary_median"] = {k: stats(v, "measured_median_ms") for k, v in groups.items()}
            result["load_avg_end"] = [round(x, 2) for x in os.getloadavg()]
            result["wall_s"] = time.time() - start
            write(result, args.out, writer)
        reference("after", workdir)
        result["wall_s"] = time.time() - start
        write(result, args.out, writer)
    log.info("summary: %s", json.dumps(result["summary"]))


if __name__ == "__main__":
    main()
