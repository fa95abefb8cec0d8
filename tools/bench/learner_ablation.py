"""Benchmark: what the Learner recipe misses on a many-class task at a short budget (not CI).

One change at a time against today's Learner recipe on banking77 (77 classes),
MiniLM-L6, 1 epoch (priming included), batch 32, max_seq_len 64, 1 thread per
run. The protocol keeps the choice honest: ``--val-rows`` rows of train
(seeded, fixed across run seeds) are held out as the validation split the
trainer evaluates on (and would early-stop on); every variant trains on the
rest; the variant is chosen on validation accuracy and reported on the real
dev split, which no choice has seen. Seed 0 for the sweep; ``--seeds`` then
runs the chosen variant (and the references) on more seeds.

Every run is its own process (``--run NAME --seed S``), so peak RSS and
thread pools are per run; ``--jobs`` runs go side by side. Finished runs are
kept in ``--workdir`` and reused. Writes ``learner-ablation.json``/``.md``
after every run, and with ``--curves`` a plot of dev accuracy against steps
and against training wall time for full, FAR and Learner from the per-epoch
records of ``finetune-3epochs.json`` (``learner-ablation.png``).

    nice -n 10 python tools/bench/learner_ablation.py --jobs 2 --workdir /tmp/lab
    python tools/bench/learner_ablation.py --seeds 1 2 --variants default full lr3e-3+head+bitfit --workdir /tmp/lab
    python tools/bench/learner_ablation.py --report-only --workdir /tmp/lab --curves
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tools.bench.harness import RESULTS, Results  # noqa: E402

log = logging.getLogger("bench.learner_ablation")

# name -> (what changes, FinetuneConfig fields, LearnerConfig fields). "default" is today's Learner
# at a 1-epoch budget: the library's 1-epoch priming cannot fit, so priming takes 0.25 epoch as in
# tools/bench/finetune.py's 1-epoch runs (rates: Learner 1e-3, head 2e-3, priming 5e-5).
BASE_LEARNER = {"priming_epochs": 0.25, "probe_epochs": 0.0}
BASE_FINETUNE = {"head_lr": 2e-3}  # today's head rate, set explicitly: the library's default now follows the task
VARIANTS: dict[str, tuple[str, dict, dict]] = {
    "default": ("today's Learner: priming 0.25 epoch at 5e-5, Learners 1e-3, head 2e-3, warm-up 6%", {}, {}),
    "full": ("full fine-tuning at its tuned rates (body 1.6e-4, head 6.4e-3; tools/bench/finetune.py)",
             {"method": "full", "lr": 1.6e-4, "head_lr": 6.4e-3}, None),
    "no-priming": ("no priming: Learners and head from the first step", {}, {"priming_epochs": 0.0}),
    "priming-rate": ("priming at full fine-tuning's tuned rate 1.6e-4", {}, {"priming_lr": 1.6e-4}),
    "lr2e-3": ("Learner rate 2e-3 with 10% warm-up", {"lr": 2e-3, "warmup_fraction": 0.1}, {}),
    "lr3e-3": ("Learner rate 3e-3 with 10% warm-up", {"lr": 3e-3, "warmup_fraction": 0.1}, {}),
    "head-lr": ("head rate 6.4e-3 (full's tuned head rate)", {"head_lr": 6.4e-3}, {}),
    "head-lr2": ("head rate 2e-2", {"head_lr": 2e-2}, {}),
    "lp-ft": ("linear probing first: 0.1 epoch of head only, then priming and Learners", {}, {"probe_epochs": 0.1}),
    "bitfit": ("biases and layer norms (embeddings' too) train with the Learners", {}, {"bitfit": True}),
    "rank48": ("Learner rank 48 (hidden / 8; the default is hidden / 12 = 32)", {}, {"rank": 48}),
    "rank64": ("Learner rank 64 (hidden / 6; the default is hidden / 12 = 32)", {}, {"rank": 64}),
    "lib": ("the library's defaults: learner_schedule decides priming, probe, head rate and rank",
            {"head_lr": None}, {"priming_epochs": None, "probe_epochs": None}),
    "lr1e-3": ("Learner rate 1e-3 (the default from 2 steps per class up)", {"lr": 1e-3}, {}),
    "rank32": ("Learner rank 32 (hidden / 12, the default from 2 steps per class up)", {}, {"rank": 32}),
    "full-lib": ("full fine-tuning at the library's defaults (body DEFAULT_LR['full']; head from the budget, "
                 "default_head_lr)", {"method": "full", "head_lr": None}, None),
    "full-5e-5": ("full fine-tuning, body at 5e-5 (the library's default before FinetuneConfig version 3), head from "
                  "the budget (default_head_lr)", {"method": "full", "lr": 5e-5, "head_lr": None}, None),
    "full-body": ("full fine-tuning, body at its tuned rate 1.6e-4, head from the budget (default_head_lr)",
                  {"method": "full", "lr": 1.6e-4, "head_lr": None}, None),
    "far": ("FAR at its tuned rates (body 1.6e-4, head 6.4e-3)", {"method": "far", "lr": 1.6e-4, "head_lr": 6.4e-3}, None),
}
REFERENCES = ("full", "full-lib", "full-5e-5", "full-body", "far")


def combine(names: list[str]) -> tuple[str, dict, dict]:
    """``a+b``: the variants' changes applied together (later ones win on a shared field)."""
    desc, ft, lc = [], dict(BASE_FINETUNE), dict(BASE_LEARNER)
    for n in names:
        d, f, l = VARIANTS[n]
        desc.append(n)
        ft.update(f)
        lc.update(l or {})
    return " + ".join(desc), ft, lc


def variant(name: str) -> tuple[str, dict, dict | None]:
    if "+" in name:
        return combine(name.split("+"))
    desc, ft, lc = VARIANTS[name]
    return desc, ({**BASE_FINETUNE, **ft} if lc is not None else ft), (None if lc is None else {**BASE_LEARNER, **lc})


def run_in_process(name: str, seed: int, args) -> dict:
    """Train one variant on train minus validation; accuracy on validation and on dev."""
    import torch

    from edgenlp.data.tasks import Split, TaskData, load_task
    from edgenlp.finetune.config import FinetuneConfig, LearnerConfig
    from edgenlp.finetune.trainer import encode_split, evaluate, finetune, load_tokenizer
    from edgenlp.models.registry import load_model

    torch.set_num_threads(args.threads)
    task = load_task(args.task, data_dir=args.data_dir)
    val = task.train.sample(args.val_rows, seed=args.split_seed)
    held = set(zip(val.texts, val.labels))
    keep = [i for i, row in enumerate(zip(task.train.texts, task.train.labels)) if row not in held]
    fit = Split(tuple(task.train.texts[i] for i in keep), tuple(task.train.labels[i] for i in keep), task.train.path)
    fit = fit.sample(args.fit_rows or None, seed=args.split_seed)  # a shorter budget: fewer rows, the same classes
    tuned = TaskData(task.name, task.labels, fit, val, task.primary_metric)
    desc, ft, lc = variant(name)
    fields = {"method": "learner", **ft}
    if fields["method"] == "learner":
        fields["learner"] = LearnerConfig(**lc)
    cfg = FinetuneConfig(epochs=args.epochs, batch_size=32, max_seq_len=args.max_seq_len, threads=args.threads, seed=seed,
                         **fields)
    model, info = load_model(args.model, labels=task.labels, seed=seed)
    load_before = [round(x, 2) for x in os.getloadavg()]
    res = finetune(model, info, tuned, cfg)
    dev = encode_split(load_tokenizer(info), task.dev, task.labels, max_len=args.max_seq_len)
    dev_metrics = evaluate(res.model, dev, num_labels=task.num_labels)
    r = res.report
    return {"variant": name, "description": desc, "seed": seed, "val": r["dev"], "dev": dev_metrics,
            "fit_rows": len(fit), "val_rows": len(val), "dev_rows": len(task.dev), "steps": r["steps"],
            "train_s": round(sum(r["wall_s_per_epoch"]), 1), "trainable_percent": r["trainable_params"]["percent"],
            "trainable": r["trainable_params"]["count"], "phases": [{k: p[k] for k in ("name", "steps", "step_s", "lr_groups")}
                                                                    for p in r["phases"]],
            "config": r["config"], "peak_rss_mb": r["peak_rss_mb"],
            "load_avg": {"before": load_before, "after": [round(x, 2) for x in os.getloadavg()]}}


def run_one(name: str, seed: int, args, workdir: Path) -> dict:
    path = workdir / f"{name}-{seed}.json"
    if path.exists():
        return json.loads(path.read_text())
    cmd = [sys.executable, str(Path(__file__).resolve()), "--run", name, "--seed", str(seed), "--out-run", str(path),
           "--threads", str(args.threads), "--epochs", str(args.epochs), "--task", args.task, "--model", args.model,
           "--val-rows", str(args.val_rows), "--fit-rows", str(args.fit_rows), "--split-seed", str(args.split_seed), "--max-seq-len", str(args.max_seq_len)]
    if args.data_dir:
        cmd += ["--data-dir", args.data_dir]
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{name}/seed {seed} failed: {proc.stderr.strip()[-2000:]}")
    data = json.loads(path.read_text())
    data["process_wall_s"] = round(time.perf_counter() - t0, 1)
    path.write_text(json.dumps(data))
    return data


def summarize(runs: list[dict]) -> list[dict]:
    by: dict[str, list[dict]] = {}
    for r in runs:
        by.setdefault(r["variant"], []).append(r)
    rows = []
    for name, rs in by.items():
        rs = sorted(rs, key=lambda r: r["seed"])
        val = [100 * r["val"]["accuracy"] for r in rs]
        dev = [100 * r["dev"]["accuracy"] for r in rs]
        s0 = [r for r in rs if r["seed"] == 0]
        rows.append({"variant": name, "description": rs[0]["description"], "seeds": [r["seed"] for r in rs],
                     "val_seed0": round(100 * s0[0]["val"]["accuracy"], 2) if s0 else None,
                     "val_mean": round(statistics.mean(val), 2), "dev_mean": round(statistics.mean(dev), 2),
                     "dev_std": round(statistics.stdev(dev), 2) if len(dev) > 1 else None,
                     "dev_per_seed": [round(x, 2) for x in dev], "trainable_percent": rs[0]["trainable_percent"],
                     "train_s": round(statistics.mean(r["train_s"] for r in rs), 1), "steps": rs[0]["steps"]})
    return rows


def markdown(rows: list[dict], meta: dict, verdict: list[str]) -> str:
    fmt = lambda r: f"{r['dev_mean']:.2f}" + (f" ± {r['dev_std']:.2f}" if r["dev_std"] is not None else "")  # noqa: E731
    rows_note = f", {meta['fit_rows']:,} training rows" if meta.get("fit_rows_asked") else ", every training row but validation"
    md = [f"# Learner ablation on {meta['task']} at {meta['epochs']} epoch{'s' if meta['epochs'] > 1 else ''}{rows_note} "
          "(tools/bench/learner_ablation.py)", "",
          f"MiniLM-L6, {meta['task']} ({meta['classes']} classes), {meta['epochs']} epoch (priming included), batch 32, "
          f"max_seq_len {meta['max_seq_len']}, {meta['threads']} thread per run, {meta['jobs']} runs side by side, CPU. "
          f"{meta['val_rows']} train rows (split seed {meta['split_seed']}) are held out as validation: every run trains on "
          f"{meta['fit_rows']} of the others (seeded), the trainer evaluates on validation, variants are ranked on validation "
          f"accuracy (seed 0), the finalists rerun on more seeds and compared on their mean validation accuracy, and "
          f"everything is reported on the full dev split ({meta['dev_rows']} rows). One change at a time against "
          "`default`; `a+b` applies both. Training seconds count training steps only, on a shared, loaded host.", "",
          "| variant | what changes | seeds | validation acc (%) seed 0 | dev acc (%) | trainable % | steps | train s |",
          "|---|---|---|---|---|---|---|---|"]
    for r in sorted(rows, key=lambda r: -(r["val_seed0"] or 0)):
        md.append(f"| {r['variant']} | {r['description']} | {','.join(map(str, r['seeds']))} | "
                  f"{r['val_seed0'] if r['val_seed0'] is not None else '–'} | {fmt(r)} | {r['trainable_percent']:.2f} | "
                  f"{r['steps']} | {r['train_s']:.0f} |")
    md += ["", *verdict]
    if meta.get("not_run"):
        md += ["", f"Not finished (variant/seed): {', '.join(meta['not_run'])}."]
    return "\n".join(md) + "\n"


def verdict_lines(rows: list[dict], max_trainable: float | None = None, keep: str | None = None,
                  min_gain: float = 0.0) -> tuple[list[str], dict]:
    by = {r["variant"]: r for r in rows}
    out, facts = [], {}
    learners = [r for r in rows if r["variant"] not in REFERENCES and r["val_seed0"] is not None]
    if max_trainable is not None:  # a constraint of the choice, not a result: above it a variant cannot be chosen
        over = [r for r in learners if r["trainable_percent"] > max_trainable]
        learners = [r for r in learners if r not in over]
        if over:
            facts["over_trainable_cap"] = [r["variant"] for r in over]
            out.append(f"- Not eligible, above {max_trainable:g}% trainable: "
                       + ", ".join(f"`{r['variant']}` ({r['trainable_percent']:.1f}%, validation mean {r['val_mean']:.2f}%)"
                                   for r in over) + ".")
    if not learners:
        return out, facts
    most = max(len(r["seeds"]) for r in learners)
    if most > 1:  # the sweep ranked on seed 0; its finalists reran on more seeds and are compared on their mean
        finalists = [r for r in learners if len(r["seeds"]) == most]
        best = max(finalists, key=lambda r: r["val_mean"])
        facts["chosen"] = best["variant"]
        out.append(f"- Chosen on validation: the sweep on seed 0 picked the finalists "
                   f"{', '.join('`' + r['variant'] + '`' for r in finalists)}, "
                   f"rerun on seeds {best['seeds']}; by mean validation accuracy `{best['variant']}` "
                   f"({best['val_mean']:.2f}%; " + ", ".join(f"`{r['variant']}` {r['val_mean']:.2f}%" for r in finalists
                                                              if r is not best) + ").")
        kept = by.get(keep) if keep else None
        if kept is not None and kept is not best and kept in finalists and best["val_mean"] - kept["val_mean"] < min_gain:
            # a lead smaller than the seed-to-seed noise is no reason to change a default
            out.append(f"- `{best['variant']}` leads `{keep}` by {best['val_mean'] - kept['val_mean']:.2f} points, under the "
                       f"{min_gain:g} a change must win by: `{keep}` stays.")
            facts["kept"] = {"variant": keep, "leader": best["variant"], "lead_points": round(best["val_mean"] - kept["val_mean"], 2)}
            best = kept
            facts["chosen"] = best["variant"]
    else:
        best = max(learners, key=lambda r: r["val_seed0"])
        facts["chosen"] = best["variant"]
        out.append(f"- Chosen on validation (seed 0): `{best['variant']}` ({best['val_seed0']:.2f}%).")
    if "default" in by:
        d = by["default"]
        facts["default_dev"] = d["dev_mean"]
        out.append(f"- Today's Learner: dev {d['dev_mean']:.2f}% (seeds {d['seeds']}); chosen: dev {best['dev_mean']:.2f}% "
                   f"(seeds {best['seeds']}).")
    if "full" in by:
        f = by["full"]
        gap = f["dev_mean"] - best["dev_mean"]
        facts.update({"full_dev": f["dev_mean"], "chosen_dev": best["dev_mean"], "gap_points": round(gap, 2),
                      "target_met": gap <= 1.0})
        out.append(f"- Gap to tuned full fine-tuning (dev {f['dev_mean']:.2f}%, seeds {f['seeds']}): {gap:+.2f} points "
                   f"(target <= 1.0: {'met' if gap <= 1.0 else 'MISSED'}).")
    if "far" in by:
        out.append(f"- FAR at its tuned rates: dev {by['far']['dev_mean']:.2f}% (seeds {by['far']['seeds']}).")
    return out, facts


# task -> [(results file, the (variant, setting) runs to draw from it, a label suffix)]: the defaults, and full
# fine-tuning's tuned rates. Learner runs under the schedule sit in their own files beside the older ones.
D, TUNED = "lr=default,head=default", "lr=0.00016,head=0.0064"
CURVES = {
    "banking77, 3 epochs": [("finetune-3epochs", {("full", D), ("full", TUNED), ("far", D)}, ""),
                            ("finetune-3epochs", {("learner", D)}, ", before the schedule"),
                            ("finetune-3epochs-schedule12", {("learner", D)}, "")],
    "154 classes, 4,000 rows, 5 epochs": [("finetune-154-classes", {("full", D), ("far", D)}, ""),
                                          ("finetune-154-classes", {("learner", D)}, ", before the schedule"),
                                          ("finetune-154-classes-5epochs", {("learner", D), ("full", TUNED)}, "")],
    "154 classes, 4,000 rows, 2 epochs": [("finetune-154-classes-2epochs", {("full", D), ("full", TUNED), ("learner", D)}, "")],
    "SST-2, 8,000 rows: full 1 epoch, Learner 290 steps (equal time)": [
        ("finetune", {("full", D), ("full", TUNED)}, ""), ("finetune-sst2-equal-time", {("learner", D)}, "")],
}


def curve_data() -> dict | None:
    """Per task: dev accuracy after each epoch against steps and training seconds, seed 0, for full, FAR and Learner."""
    from edgenlp.finetune.config import format_rate

    out = {}
    for task, sources in CURVES.items():
        series: dict[str, dict[str, list]] = {}
        names = []
        for name, wanted, suffix in sources:
            src = RESULTS / f"{name}.json"
            if not src.exists():
                continue
            names.append(f"tools/bench/results/{name}.json")
            for run in json.loads(src.read_text()).get("runs", []):
                b = run.get("bench", {})
                if (b.get("variant"), b.get("setting")) not in wanted or b.get("seed") != 0:
                    continue
                wall, t = [], 0.0
                for e in run["epochs"]:
                    t += e["wall_s"]
                    wall.append(round(t, 1))
                if b["variant"] == "learner":  # its rates follow the schedule; the setting says whether it was swept
                    label = b["variant"] + ("" if b["setting"] == D else f" ({b['setting']})") + suffix
                else:  # the rates the run trained at: "defaults" named different rates in different versions
                    label = (f"{b['variant']} (body {format_rate(run['lr']['body'])}, "
                             f"head {format_rate(run['lr']['head'])}){suffix}")
                series[label] = {"steps": [e["steps"] for e in run["epochs"]], "train_s": wall,
                                 "defaults": b["setting"] == D and not suffix,
                                 "dev": [round(100 * e["dev"]["accuracy"], 2) for e in run["epochs"]]}
        if series:
            out[task] = {"source": ", ".join(dict.fromkeys(names)), "series": series}
    return {"tasks": out, "source": ", ".join(v["source"] for v in out.values())} if out else None


COLORS = {"full": "tab:blue", "far": "tab:orange", "learner": "tab:green"}


def plot_curves(curves: dict):
    def plot(path: Path) -> None:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        tasks = curves["tasks"]
        fig, axes = plt.subplots(len(tasks), 2, figsize=(11, 3.6 * len(tasks)), squeeze=False)
        for row, (task, t) in zip(axes, tasks.items()):
            for key, s in sorted(t["series"].items()):
                style = {"color": COLORS.get(key.split()[0].rstrip(","), "gray"), "ls": "-" if s.get("defaults") else "--",
                         "marker": "o"}
                row[0].plot(s["steps"], s["dev"], label=key, **style)
                row[1].plot(s["train_s"], s["dev"], label=key, **style)
            row[0].set_xlabel("optimizer steps")
            row[1].set_xlabel("training seconds (1 thread, shared hosts: not clean timings)")
            for ax in row:
                ax.set_ylabel("dev accuracy (%)")
                ax.set_title(f"{task}, seed 0", fontsize=9)
                ax.grid(alpha=0.3)
            row[0].legend(fontsize=8)
        fig.suptitle("MiniLM-L6: dev accuracy after each epoch; solid: the library's defaults when the run was made, "
                     "dashed: tuned or earlier rates", fontsize=10)
        fig.tight_layout()
        fig.savefig(path, dpi=100, format="png")
        plt.close(fig)

    return plot


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--variants", nargs="+", default=["default", "full", "priming-rate", "bitfit", "head-lr", "lr3e-3",
                                                     "lp-ft", "no-priming"])  # in priority order
    p.add_argument("--seeds", nargs="+", type=int, default=[0])
    p.add_argument("--task", default="banking77")
    p.add_argument("--model", default="minilm-l6")
    p.add_argument("--data-dir", default=None)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--max-seq-len", type=int, default=64)
    p.add_argument("--val-rows", type=int, default=1000)
    p.add_argument("--fit-rows", type=int, default=3000,
                   help="Train on this many of the rows left after validation (seeded; 0: all of them).")
    p.add_argument("--split-seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--workdir", default=None, help="Per-run reports (reused when there). Required unless --run.")
    p.add_argument("--report-only", action="store_true")
    p.add_argument("--max-trainable", type=float, default=None, metavar="PERCENT",
                   help="Only variants training at most this share of the parameters can be chosen (e.g. 10).")
    p.add_argument("--keep", default=None, metavar="VARIANT",
                   help="The variant in use: another is chosen only when its mean validation accuracy leads by --min-gain.")
    p.add_argument("--min-gain", type=float, default=0.0, metavar="POINTS")
    p.add_argument("--note", default=None, help="A sentence for the report (e.g. the load average seen during the runs).")
    p.add_argument("--curves", action="store_true", help="Also plot the per-epoch learning curves of finetune-3epochs.json.")
    p.add_argument("--curves-only", default=None, metavar="STEM",
                   help="Only draw the learning curves (CURVES) from the results files into STEM.{json,md,png}.")
    p.add_argument("--out", default=str(RESULTS / "learner-ablation"))
    p.add_argument("--run", default=None, help=argparse.SUPPRESS)
    p.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--out-run", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    if args.run:
        data = run_in_process(args.run, args.seed, args)
        Path(args.out_run).write_text(json.dumps(data))
        return 0
    if args.curves_only:
        cur = curve_data()
        if not cur:
            log.error("none of the results files the curves draw from exists")
            return 2
        md = ["# Learning curves: dev accuracy after each epoch, seed 0 (tools/bench/learner_ablation.py --curves-only)", ""]
        for task, t in cur["tasks"].items():
            md.append(f"## {task}\n\nFrom {t['source']}.\n\n| run | steps | dev acc (%) |\n|---|---|---|")
            md += [f"| {k} | {' / '.join(map(str, v['steps']))} | {' / '.join(f'{a:.1f}' for a in v['dev'])} |"
                   for k, v in sorted(t["series"].items())]
            md.append("")
        Results(script="learner_ablation", threads=args.threads).write(Path(args.curves_only), {"curves": cur}, "\n".join(md),
                                                                      plot=plot_curves(cur))
        return 0
    if not args.workdir:
        p.error("--workdir is required")
    for v in args.variants:
        variant(v)  # unknown names fail before anything runs
    from edgenlp.data.tasks import load_task

    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    results = Results(script="learner_ablation", threads=args.threads)
    lock = threading.Lock()
    runs = [d for d in (json.loads(f.read_text()) for f in sorted(workdir.glob("*.json")))
            if "variant" in d]  # per-run reports only (an --out inside the workdir is not a run)
    meta = {"task": args.task, "model": args.model, "epochs": args.epochs, "max_seq_len": args.max_seq_len,
            "threads": args.threads, "jobs": args.jobs, "val_rows": args.val_rows, "fit_rows_asked": args.fit_rows, "split_seed": args.split_seed,
            "max_trainable_percent": args.max_trainable, "keep": args.keep, "min_gain_points": args.min_gain,
            "classes": len(load_task(args.task, data_dir=args.data_dir).labels), "note": args.note}

    def write() -> None:
        rows = summarize(runs)
        if runs:
            meta.update(fit_rows=runs[0]["fit_rows"], dev_rows=runs[0]["dev_rows"])
        meta["not_run"] = [v for v in args.variants for s in args.seeds
                           if not any(r["variant"] == v and r["seed"] == s for r in runs)]
        lines, facts = verdict_lines(rows, args.max_trainable, args.keep, args.min_gain)
        doc = {"meta": meta, "variants": {k: {"description": v[0], "finetune": v[1], "learner": v[2]}
                                           for k, v in VARIANTS.items()},
               "rows": rows, "verdict": facts, "runs": runs}
        cur = curve_data() if args.curves else None
        if cur:
            doc["curves"] = cur
        results.write(Path(args.out), doc, markdown(rows, meta, lines) if rows else "# Learner ablation\n\nno runs yet\n",
                      plot=plot_curves(cur) if cur else None)

    if not args.report_only:
        todo = [(v, s) for s in args.seeds for v in args.variants
                if not any(r["variant"] == v and r["seed"] == s for r in runs)]

        def attempt(v: str, s: int) -> None:
            r = run_one(v, s, args, workdir)
            with lock:
                runs.append(r)
                log.info("%s/seed %d: val %.4f dev %.4f, %ss", v, s, r["val"]["accuracy"], r["dev"]["accuracy"], r["train_s"])
                write()

        with ThreadPoolExecutor(max_workers=args.jobs) as pool:
            for fut in [pool.submit(attempt, v, s) for v, s in todo]:
                fut.result()
    write()
    return 0


if __name__ == "__main__":
    sys.exit(main())
