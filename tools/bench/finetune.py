"""Benchmark: cheap fine-tuning methods against full fine-tuning on MiniLM-L6 (not CI).

Every (task, method, seed) runs ``edgenlp finetune`` in its own subprocess, so
peak RSS is per run; all runs share one epoch count, thread count and
sequence length. Writes ``tools/bench/results/finetune.json`` (all reports)
and ``finetune.md`` (the table), updated after every run so a cut-short
benchmark still leaves its numbers.

    python tools/bench/finetune.py --budget-min 50     # default plan, nothing new started after 50 min
    python tools/bench/finetune.py --seeds 0 1 2 --epochs 3 --workdir /tmp/ftb   # rerun reuses finished runs
    python tools/bench/finetune.py --only full learner --tasks sst2
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

log = logging.getLogger("bench.finetune")

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "tools" / "bench" / "results"

# name -> (method, extra CLI args); the priming share is set per run from --priming-epochs.
VARIANTS: dict[str, tuple[str, list[str]]] = {
    "full": ("full", []),
    "learner": ("learner", ["--priming-epochs", "{priming}"]),
    "far": ("far", []),
    "bitfit": ("bitfit", []),
    "freeze-ffn": ("freeze-ffn", []),
    "learner-no-priming": ("learner", ["--priming-epochs", "0"]),
    "learner-rank-auto": ("learner", ["--rank", "auto", "--priming-epochs", "{priming}"]),
}
MAIN = ("full", "learner", "far")  # the comparison the targets are about: run first
TASK_ARGS = {"sst2": ["--train-limit", "8000"], "banking77": []}


def run_one(task: str, variant: str, seed: int, args, workdir: Path) -> dict:
    method, extra = VARIANTS[variant]
    extra = [a.format(priming=args.priming_epochs) for a in extra]
    out = workdir / f"{task}-{variant}-{seed}"
    report = workdir / f"{task}-{variant}-{seed}.json"
    if report.exists():  # finished by an earlier, interrupted invocation with the same --workdir
        log.info("reuse: %s", report)
        data = json.loads(report.read_text())
        data["bench"] = {"task": task, "variant": variant, "seed": seed, "process_wall_s": None, "reused": True}
        return data
    cmd = [sys.executable, "-m", "edgenlp.cli", "finetune", args.model, "--task", task, "--method", method, *extra,
           *TASK_ARGS[task], "--epochs", str(args.epochs), "--batch-size", str(args.batch_size),
           "--max-seq-len", str(args.max_seq_len), "--seed", str(seed), "--threads", str(args.threads),
           "--out", str(out), "--json", str(report), "--quiet"]
    if args.data_dir:
        cmd += ["--data-dir", args.data_dir]
    log.info("run: %s", " ".join(cmd[3:]))
    t0 = time.perf_counter()
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{task}/{variant}/seed {seed} failed ({proc.returncode}): {proc.stderr.strip()[-2000:]}")
    data = json.loads(report.read_text())
    data["bench"] = {"task": task, "variant": variant, "seed": seed, "process_wall_s": round(time.perf_counter() - t0, 1)}
    return data


def interleaved_step_times(args, *, steps: int, task: str = "sst2") -> dict:
    """Mean optimizer-step time per method, steps taken round-robin in one process on the same batches.

    On a machine shared with other jobs, separate runs see different load; here
    each method's k-th step runs right after the others' k-th step, so load
    hits all methods alike and the ratios hold even when the seconds do not.
    Learner and FAR are timed in their steady phase (after priming).
    """
    import torch

    from edgenlp.data.tasks import load_task
    from edgenlp.finetune.config import FarConfig, FinetuneConfig, LearnerConfig
    from edgenlp.finetune.methods import METHOD_TYPES
    from edgenlp.finetune.trainer import collate, encode_split, load_tokenizer
    from edgenlp.models.registry import load_model

    torch.set_num_threads(args.threads)
    data = load_task(task, data_dir=args.data_dir)
    split = data.train.sample(8000, seed=0)
    configs = {"full": FinetuneConfig(method="full"), "learner": FinetuneConfig(method="learner", learner=LearnerConfig(priming_steps=1)),
               "far": FinetuneConfig(method="far", far=FarConfig()), "bitfit": FinetuneConfig(method="bitfit"),
               "freeze-ffn": FinetuneConfig(method="freeze-ffn")}
    runners = {}
    enc = None
    for name, cfg in configs.items():
        model, info = load_model(args.model, labels=data.labels, seed=0)
        if enc is None:
            enc = encode_split(load_tokenizer(info), split, data.labels, max_len=args.max_seq_len)
        method = METHOD_TYPES[cfg.method](model, cfg, total_steps=100, steps_per_epoch=50)
        groups = method.phases()[-1].enter()  # steady phase (FAR reconfigures from an untrained delta: same shapes)
        runners[name] = (model, torch.optim.AdamW(groups))
        model.train()
    g = torch.Generator().manual_seed(0)
    perm = torch.randperm(len(enc), generator=g).tolist()
    times: dict[str, list[float]] = {n: [] for n in runners}
    for k in range(steps + 2):
        ids, mask, labels = collate(enc, perm[k * args.batch_size:(k + 1) * args.batch_size], pad_id=0)
        for name, (model, opt) in runners.items():
            t0 = time.perf_counter()
            torch.nn.functional.cross_entropy(model(ids, mask), labels).backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            if k >= 2:  # first steps allocate optimizer state
                times[name].append(time.perf_counter() - t0)
    out = {n: {"mean_s": statistics.mean(t), "median_s": statistics.median(t), "steps": len(t)} for n, t in times.items()}
    for n in out:
        out[n]["vs_full"] = out[n]["median_s"] / out["full"]["median_s"]
    log.info("interleaved step times: %s", {n: round(v["vs_full"], 3) for n, v in out.items()})
    return out


def _phase(report: dict, name: str) -> dict | None:
    return next((p for p in report["phases"] if p["name"] == name), None)


def summarize(runs: list[dict]) -> list[dict]:
    """One row per (task, variant): mean and spread (max - min) over seeds."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in runs:
        groups.setdefault((r["bench"]["task"], r["bench"]["variant"]), []).append(r)
    rows = []
    for (task, variant), rs in groups.items():
        acc = [r["dev"]["accuracy"] * 100 for r in rs]
        f1 = [r["dev"]["macro_f1"] * 100 for r in rs if "macro_f1" in r["dev"]]
        main_phase = rs[0]["phases"][-1]  # the steady phase: learners-only / reconfigured / the only one
        rows.append({
            "task": task,
            "variant": variant,
            "seeds": [r["seed"] for r in rs],
            "accuracy": statistics.mean(acc),
            "accuracy_spread": max(acc) - min(acc),
            "macro_f1": statistics.mean(f1) if f1 else None,
            "trainable": main_phase["trainable_params"],
            "trainable_percent": main_phase["trainable_percent"],
            "trainable_peak": rs[0]["trainable_params"]["peak_count"],
            "s_per_epoch": statistics.mean(statistics.mean(r["wall_s_per_epoch"]) for r in rs),
            "step_s": statistics.mean(r["phases"][-1]["step_s"] for r in rs),
            "phase_step_s": {p["name"]: p["step_s"] for p in rs[0]["phases"]},
            "peak_rss_mb": statistics.mean(r["peak_rss_mb"] for r in rs),
            "ranks": rs[0].get("learner", {}).get("ranks"),
        })
    return rows


def targets(rows: list[dict], steps: dict | None = None) -> list[str]:
    """Target checks; step-time ratios come from the interleaved timing (``steps``) when there is one."""
    by = {(r["task"], r["variant"]): r for r in rows}
    ratio = {n: v["vs_full"] for n, v in (steps or {}).get("methods", {}).items()}
    out = []
    for task in sorted({r["task"] for r in rows}):
        full = by.get((task, "full"))
        if not full:
            continue
        for variant, label in (("learner", "Learner (primed)"), ("far", "FAR")):
            r = by.get((task, variant))
            if not r:
                continue
            gap = full["accuracy"] - r["accuracy"]
            step = ratio.get(variant, r["step_s"] / full["step_s"])
            line = f"{task}: {label} accuracy {r['accuracy']:.2f} vs full {full['accuracy']:.2f} (gap {gap:+.2f} pt, target <= 1.0: {'met' if gap <= 1.0 else 'MISSED'})"
            if variant == "learner":
                share = r["trainable"] / full["trainable"]
                line += (f"; trainable {100 * share:.1f}% of full (target <= 10%: {'met' if share <= 0.10 else 'MISSED'})"
                         f"; learner-phase step time {100 * step:.0f}% of full (target <= 75%: {'met' if step <= 0.75 else 'MISSED'})"
                         f"; peak RSS {r['peak_rss_mb']:.0f} vs {full['peak_rss_mb']:.0f} MiB ({'lower' if r['peak_rss_mb'] < full['peak_rss_mb'] else 'NOT lower'})")
            else:
                line += f"; reconfigured step time {100 * step:.0f}% of full ({'lower' if step < 1 else 'NOT lower'})"
            out.append(line)
    return out


def markdown(rows: list[dict], meta: dict, steps: dict | None = None, *, extra_steps: list[dict] = (),
             skipped: list[str] = ()) -> str:
    lines = [
        "# Fine-tuning methods on MiniLM-L6",
        "",
        f"{meta['epochs']} epochs for every method (priming included), batch {meta['batch_size']}, max_seq_len "
        f"{meta['max_seq_len']}, {meta['threads']} threads, seeds {meta['seeds']}; SST-2: seeded subset of 8,000 train rows, "
        f"full dev; banking77: full train, full dev ({meta.get('rows', {})}). Accuracy is mean ± spread (max−min) over seeds. "
        "Trainable = parameters trained in the steady phase (after priming); peak = most trained at once in any phase. "
        "s/epoch counts training steps only (no eval); step s is the steady phase's mean step time.",
        "",
        f"Machine: {meta['cpu']}. {meta.get('note') or 'Shared with other jobs, so times carry noise.'}",
        "",
        "| task | method | dev acc (%) | macro-F1 | trainable | % | peak trainable | s/epoch | step s (phases) | peak RSS MiB |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in sorted(rows, key=lambda r: (r["task"], list(VARIANTS).index(r["variant"]))):
        f1 = f"{r['macro_f1']:.2f}" if r["macro_f1"] is not None else "–"
        phases = ", ".join(f"{k} {v:.3f}" for k, v in r["phase_step_s"].items())
        lines.append(f"| {r['task']} | {r['variant']} | {r['accuracy']:.2f} ± {r['accuracy_spread']:.2f} | {f1} | "
                     f"{r['trainable']:,} | {r['trainable_percent']:.2f} | {r['trainable_peak']:,} | {r['s_per_epoch']:.0f} | "
                     f"{phases} | {r['peak_rss_mb']:.0f} |")
    for timing in [t for t in (steps, *extra_steps) if t]:
        steps_ = timing
        lines += ["", f"## Step time, interleaved in one process ({steps_['methods']['full']['steps']} steps each, "
                  f"{steps_['threads']} threads, batch {steps_['batch_size']}, SST-2 batches)", "",
                  "| method (steady phase) | median step s | vs full |", "|---|---|---|"]
        for n, v in steps_["methods"].items():
            lines.append(f"| {n} | {v['median_s']:.3f} | {100 * v['vs_full']:.0f}% |")
    lines += ["", "## Targets", ""] + [f"- {t}" for t in targets(rows, steps)]
    if skipped:
        lines += ["", "## Not run", "", "Left out for time (budget or --report-only): " + ", ".join(skipped) + "."]
    ranks = {r["task"]: r["ranks"] for r in rows if r["variant"] == "learner-rank-auto" and r["ranks"]}
    if ranks:
        lines += ["", "## Ranks chosen by `--rank auto`", ""]
        for task, rk in ranks.items():
            lines.append(f"- {task}: " + ", ".join(f"{k}={v}" for k, v in rk.items()))
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="minilm-l6")
    p.add_argument("--tasks", nargs="+", default=["sst2", "banking77"])
    p.add_argument("--only", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    p.add_argument("--seeds", nargs="+", type=int, default=[0])
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--priming-epochs", type=float, default=0.25)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--max-seq-len", type=int, default=64)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--data-dir", default=None)
    p.add_argument("--budget-min", type=float, default=None, help="Skip runs not started within this many minutes.")
    p.add_argument("--workdir", default=None, help="Keep per-run outputs here; reports already there are reused.")
    p.add_argument("--note", default=None, help="A sentence added under the table header (e.g. machine load).")
    p.add_argument("--report-only", action="store_true", help="Only rebuild the table from reports in --workdir.")
    p.add_argument("--step-timing", type=int, default=0, metavar="STEPS",
                   help="Only time STEPS interleaved steps per method in one process (writes <out>-steps.json).")
    p.add_argument("--out", default=str(RESULTS / "finetune"), help="Results path without extension.")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    # tools/bench/profile.py would shadow the standard library's ``profile`` (torch imports cProfile).
    here = Path(__file__).resolve().parent
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != here]
    sys.path.insert(0, str(ROOT))
    from edgenlp.utils import atomic_write_json, atomic_write_text, environment

    env = environment()
    if args.step_timing:
        result = {"threads": args.threads, "batch_size": args.batch_size, "max_seq_len": args.max_seq_len,
                  "methods": interleaved_step_times(args, steps=args.step_timing), "environment": env}
        atomic_write_json(Path(args.out + "-steps.json"), result)
        return 0
    meta = {"model": args.model, "epochs": args.epochs, "priming_epochs": args.priming_epochs, "batch_size": args.batch_size,
            "max_seq_len": args.max_seq_len, "threads": args.threads, "seeds": args.seeds, "note": args.note,
            "cpu": env["cpu"].get("model", env["cpu"].get("machine")), "environment": env}
    # Order: the main comparison first (task by task), so a cut-short run still answers it.
    main_v = [v for v in args.only if v in MAIN]
    extra_v = [v for v in args.only if v not in MAIN]
    out = Path(args.out)
    steps_file = Path(args.out + "-steps.json")
    steps = json.loads(steps_file.read_text()) if steps_file.exists() else None
    extra_steps = [json.loads(f.read_text()) for f in sorted(out.parent.glob(out.name + "-*thread-steps.json"))]
    plan = [(t, v, s) for s in args.seeds for vs in (main_v, extra_v) for t in args.tasks for v in vs]
    runs, skipped = [], []
    start = time.perf_counter()
    if args.workdir:
        Path(args.workdir).mkdir(parents=True, exist_ok=True)
    with (contextlib.nullcontext(args.workdir) if args.workdir else tempfile.TemporaryDirectory(prefix="bench-finetune-")) as tmp:
        for task, variant, seed in plan:
            finished = Path(tmp) / f"{task}-{variant}-{seed}.json"
            over = args.budget_min is not None and time.perf_counter() - start > args.budget_min * 60
            if over or (args.report_only and not finished.exists()):
                skipped.append(f"{task}/{variant}/{seed}")
                continue
            runs.append(run_one(task, variant, seed, args, Path(tmp)))
            r = runs[-1]
            meta.setdefault("rows", {})[task] = f"train {r['task']['train_rows_used']}, dev {r['task']['dev_rows']}"
            log.info("%s/%s/%d: acc %.4f, %.1fs/epoch, rss %.0f MiB", task, variant, seed, r["dev"]["accuracy"],
                     statistics.mean(r["wall_s_per_epoch"]), r["peak_rss_mb"])
            rows = summarize(runs)
            slim = [{k: v for k, v in r.items() if k != "environment"} for r in runs]
            atomic_write_json(out.with_suffix(".json"), {"meta": meta, "rows": rows, "targets": targets(rows, steps),
                                                        "step_timing": steps, "skipped": skipped, "runs": slim})
            atomic_write_text(out.with_suffix(".md"), markdown(rows, meta, steps, extra_steps=extra_steps, skipped=skipped))
    if skipped:
        log.warning("not run: %s", ", ".join(skipped))
        atomic_write_text(out.with_suffix(".md"), markdown(summarize(runs), meta, steps, extra_steps=extra_steps, skipped=skipped))
        atomic_write_json(out.with_suffix(".json"), {"meta": meta, "rows": summarize(runs), "targets": targets(summarize(runs), steps),
                                                    "step_timing": steps, "skipped": skipped, "runs": [{k: v for k, v in r.items() if k != "environment"} for r in runs]})
    log.info("done in %.1f min: %s", (time.perf_counter() - start) / 60, out.with_suffix(".md"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
