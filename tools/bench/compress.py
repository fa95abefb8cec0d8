"""Benchmark: ``edgenlp compress`` over tasks x device targets (not CI).

For each task and each target, one ``compress`` run (the Python API, the same
stages and reports as the CLI) under the target's default budgets. The
fine-tune stage does not depend on the target: the first target of a task runs
it, the others start from a copy of that stage folder, which the resumable
stage runner recognises (same inputs fingerprint) and skips. A finished run
(its ``compress.json`` exists) is reused as it is, and ``--seed-run
TASK:TARGET=DIR`` adopts a run made elsewhere (e.g. the README's main job).

Per (task, target): the chosen configuration, the budgets, the predicted
latency / memory / size for the target (estimated for every target but
``host``: the cost model transfers the host calibration by throughput ratios),
the measured size, dev accuracy of the bundle against the uncompressed
fine-tuned model, the host-measured latency and its speed-up over the
uncompressed model on this machine, and the wall time per stage. Writes
``<out>.json`` and ``<out>.md`` after every run, with the CPU's ISA flags.

    python tools/bench/compress.py --tasks sst2 banking77 --targets pixel-7 raspberry-pi-5 raspberry-pi-4 host \\
        --workdir /tmp/compress-bench --seed-run sst2:pixel-7=out/compress
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tools.bench.harness import RESULTS, Results  # noqa: E402

log = logging.getLogger("bench.compress")


def run_one(task: str, target: str, run_dir: Path, *, args, finetune_from: Path | None) -> dict:
    """One compress run (or the finished one in ``run_dir``); returns its compress.json."""
    from edgenlp.compress.config import CompressConfig
    from edgenlp.compress.pipeline import compress

    done = run_dir / "compress.json"
    if done.is_file():
        log.info("%s/%s: reusing %s", task, target, run_dir)
        return json.loads(done.read_text())
    if finetune_from is not None and not (run_dir / "finetune").exists():
        run_dir.mkdir(parents=True, exist_ok=True)
        shutil.copytree(finetune_from, run_dir / "finetune")
    cfg = CompressConfig(model=args.model, task=task, target=target, max_drop=args.max_drop, preset=args.preset)
    t0 = time.perf_counter()
    res = compress(cfg, run_dir, data_dir=args.data_dir, progress=False, echo=lambda m: log.info("%s/%s %s", task, target, m))
    log.info("%s/%s: %s in %.0f s", task, target, "passed" if res.summary["passed"] else "FAILED", time.perf_counter() - t0)
    return json.loads(done.read_text())


def row(task: str, target: str, doc: dict) -> dict:
    p = doc["predicted"]
    acc = p["accuracy"]
    return {
        "task": task, "target": target, "passed": doc["passed"], "chosen": doc["chosen"], "budgets": doc["budgets"],
        "latency_ms": {k: p["latency_ms"].get(k) for k in ("budget", "predicted", "estimated", "host_measured")},
        "memory_mb": {k: p["memory_mb"].get(k) for k in ("budget", "predicted", "estimated")},
        "size_mb": {k: p["size_mb"].get(k) for k in ("budget", "predicted", "measured")},
        "accuracy": {k: acc.get(k) for k in ("reference", "measured", "drop_points")},
        "host_speedup": doc.get("host_speedup_vs_uncompressed"), "baseline_host_ms": doc.get("baseline_latency_ms"),
        "host_speedup_detail": doc.get("host_speedup_detail"),
        "stage_seconds": doc.get("stage_seconds"), "stages_skipped": doc.get("stages_skipped"), "wall_s": doc.get("wall_s"),
    }


def chosen_text(c: dict) -> str:
    parts = []
    if c.get("prune_method"):
        parts.append(f"{c['prune_method']} {100 * c['sparsity']:.0f}%")
    bits = c.get("bits", "fp32")
    parts.append(bits if isinstance(bits, str) else "per layer " + "/".join(map(str, bits)))  # the full preset plans bits per layer
    if c.get("embeddings"):
        parts.append(f"emb {c['embeddings']}")
    if c.get("trim_vocab"):
        parts.append("trimmed vocab")
    if c.get("block_sparsity"):
        parts.append(f"{c['block_sparsity']:.0%} blocks zero")
    if c.get("exits"):
        parts.append("early exits")
    return ", ".join(parts)


def markdown(result: dict) -> str:
    f = lambda v, d=1: "–" if v is None else f"{v:.{d}f}"  # noqa: E731
    lines = [f"# `edgenlp compress` across targets ({result['date']})", "",
             f"Host: {result['cpu']}, ISA flags: {result['isa']}; preset `{result['preset']}`, max drop {result['max_drop']} points. "
             "Predicted latency and memory are the cost model's for the target (estimated: transferred from the host table by "
             "throughput ratios) at the target's budget length and threads; host ms and speed-up are this machine's, "
             "against the uncompressed fine-tuned model profiled in the same run folder. " + result.get("note", ""), "",
             "| task | target | chosen | dev acc (uncompressed) | drop | latency budget / predicted ms | memory budget / predicted MB "
             "| size budget / measured MB | host ms | host speed-up | passed | wall s |",
             "|---|---|---|---|---:|---|---|---|---:|---:|---|---:|"]
    for r in result["rows"]:
        lat, mem, size, acc = r["latency_ms"], r["memory_mb"], r["size_mb"], r["accuracy"]
        est = " (est.)" if lat.get("estimated") else ""
        lines.append(f"| {r['task']} | {r['target']} | {chosen_text(r['chosen'])} | {100 * acc['measured']:.2f}% "
                     f"({100 * acc['reference']:.2f}%) | {f(acc['drop_points'], 2)} | {f(lat['budget'])} / {f(lat['predicted'])}{est} | "
                     f"{f(mem['budget'], 0)} / {f(mem['predicted'])} | {f(size['budget'])} / {f(size['measured'])} | "
                     f"{f(lat['host_measured'], 2)} | {f(r['host_speedup'], 2)}× | {'yes' if r['passed'] else 'no'} | {f(r['wall_s'], 0)} |")
    if result.get("failed"):
        lines += ["", "Runs not finished: " + "; ".join(result["failed"])]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="minilm-l6")
    p.add_argument("--tasks", nargs="+", default=["sst2", "banking77"])
    p.add_argument("--targets", nargs="+", default=["pixel-7", "raspberry-pi-5", "raspberry-pi-4", "host"])
    p.add_argument("--preset", default="quick")
    p.add_argument("--max-drop", type=float, default=1.0)
    p.add_argument("--data-dir", default=None)
    p.add_argument("--seed-run", action="append", default=[], metavar="TASK:TARGET=DIR",
                   help="adopt a finished compress run folder for (task, target)")
    p.add_argument("--budget-min", type=float, default=None, help="start no new run after this many minutes")
    p.add_argument("--workdir", type=Path, default=Path("/tmp/compress-bench"))
    p.add_argument("--note", default="")
    p.add_argument("--out", type=Path, default=RESULTS / "compress")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    from edgenlp.errors import EdgeNLPError
    from edgenlp.utils import isa_flags

    for spec in args.seed_run:
        key, _, src = spec.partition("=")
        task, _, target = key.partition(":")
        dst = args.workdir / task / target
        if not dst.exists() and Path(src, "compress.json").is_file():
            shutil.copytree(src, dst)
    results = Results(script="compress")
    env = results.environment
    result = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "cpu": env.get("cpu", {}).get("model", "?"),
              "isa": isa_flags(), "preset": args.preset, "max_drop": args.max_drop, "note": args.note, "rows": [], "failed": [],
              "environment": env}
    t_start = time.perf_counter()
    for task in args.tasks:
        finetune_from = None
        for target in args.targets:
            run_dir = args.workdir / task / target
            if finetune_from is None and (run_dir / "finetune" / "stage.json").is_file():
                finetune_from = run_dir / "finetune"
            over = args.budget_min is not None and (time.perf_counter() - t_start) / 60 > args.budget_min
            if over and not (run_dir / "compress.json").is_file():
                result["failed"].append(f"{task}/{target}: not run (time budget)")
                continue
            try:
                doc = run_one(task, target, run_dir, args=args, finetune_from=finetune_from)
            except EdgeNLPError as exc:
                log.error("%s/%s: %s", task, target, exc)
                result["failed"].append(f"{task}/{target}: {exc}")
                continue
            if finetune_from is None:
                finetune_from = run_dir / "finetune"
            result["rows"].append(row(task, target, doc))
            results.write(args.out, result, markdown(result))
    results.write(args.out, result, markdown(result))
    print(markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
