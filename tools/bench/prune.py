"""Benchmark: structured pruning of a fine-tuned MiniLM-L6 (cofi / fast / importance), not CI.

For each task (teacher = a fine-tuned model directory) and each (method,
encoder-parameter sparsity) run, in priority order until ``--budget-min``:

1. ``edgenlp.prune.prune`` in this process (``prune.json`` kept: dev accuracy
   before/after on the full dev set, achieved sparsity, kept structure, wall
   time of mask learning and of the whole call);
2. export of the pruned model to an ExecuTorch bundle (buckets 32 and 128,
   parity against eager checked by the export);
3. after all runs, ExecuTorch latency at seq 128 and 32 with 1 thread for every
   bundle *and the unpruned teacher's bundle*, measured in ``--rounds``
   interleaved rounds in one process (median over rounds of per-round
   medians), reported as speedup = teacher latency / pruned latency.

Writes ``<out>.json``, ``<out>.md`` and ``<out>.png`` (dev accuracy vs seq-128
latency per method and task, the unpruned model, and the published CoFi
BERT-base SST-2 points for orientation). Results are rewritten after every run.
A rerun with the same ``--workdir`` reuses finished runs.

    python tools/bench/prune.py --teachers /work/artifacts/teachers --tasks sst2 banking77 \\
        --cofi-tasks sst2 --cofi-train-limit 4000 --budget-min 50 --workdir /tmp/prune-bench
    python tools/bench/prune.py --combine tools/bench/results/prune.json tools/bench/results/prune-cofi.json \\
        --out tools/bench/results/prune-all       # one figure for every method, from runs on any host
    python tools/bench/prune.py --merge /tmp/cofi/sst2-70-res.json /tmp/cofi/banking77-50-res.json \\
        --rounds 7 --iters 40 --out tools/bench/results/prune-cofi-compress   # runs trained in parallel, timed together

``--merge`` joins the runs of several results files of this script (each
trained in its own process, e.g. one run per core) into one document and
times every bundle again in one process, interleaved, on a quiet machine: the
latencies the parallel processes measured under each other's load are
dropped. Every file must have run the same prune budget.
"""

from __future__ import annotations

import sys
from pathlib import Path

# tools/bench/profile.py shadows the standard library's ``profile`` (which torch imports through
# cProfile) when a script in this folder runs: drop the script's folder from the import path first.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]

import argparse  # noqa: E402
import json  # noqa: E402
import logging  # noqa: E402
import time  # noqa: E402

ROOT = _HERE.parents[1]
sys.path.insert(0, str(ROOT))

from tools.bench.harness import RESULTS, Results, interleave  # noqa: E402

log = logging.getLogger("bench.prune")

# Published orientation points: CoFi on BERT-base, SST-2 dev accuracy (Xia, Zhong, Chen, "Structured Pruning
# Learns Compact and Accurate Models", ACL 2022; released checkpoints princeton-nlp/CoFi-SST2-s60 and -s95,
# table "Model List" of github.com/princeton-nlp/CoFiPruning). Speedups there are on a V100 GPU, batch 128.
PUBLISHED = [
    {"model": "BERT-base (CoFi-SST2-s60)", "task": "sst2", "sparsity": 0.601, "speedup": 2.1, "accuracy": 0.930},
    {"model": "BERT-base (CoFi-SST2-s95)", "task": "sst2", "sparsity": 0.945, "speedup": 12.2, "accuracy": 0.904},
]


def plan(args) -> list[tuple[str, str, float]]:
    """(task, method, sparsity) in priority order: at 50% then 70%, the cheap methods and cofi on the first task,
    then the cheap methods at 50/70 on the other tasks, then the other sparsities, then the other cofi tasks."""
    cheap = [m for m in ("fast", "importance") if m in args.methods]
    main = [s for s in (0.5, 0.7) if s in args.sparsities]
    rest = [s for s in args.sparsities if s not in main]
    runs = []
    for i, task in enumerate(args.tasks):
        for s in main:
            runs += [(task, m, s) for m in cheap]
            if i == 0 and "cofi" in args.methods and task in args.cofi_tasks and s in args.cofi_sparsities:
                runs.append((task, "cofi", s))
        if i == 0 and "cofi" in args.methods and task in args.cofi_tasks:
            runs += [(task, "cofi", s) for s in args.cofi_sparsities if s not in main]
    runs += [(task, m, s) for task in args.tasks for s in rest for m in cheap]
    if "cofi" in args.methods:
        runs += [(task, "cofi", s) for task in args.cofi_tasks[1:] if task != args.tasks[0] for s in args.cofi_sparsities]
    return runs


def run_name(method: str, sparsity: float) -> str:
    return f"{method}-{round(100 * sparsity)}"


def export(model_dir: Path, bundle_dir: Path, task) -> dict:
    from edgenlp.export.api import ExportConfig, export_bundle
    from edgenlp.models.registry import load_model

    if (bundle_dir / "manifest.json").is_file():
        m = json.loads((bundle_dir / "manifest.json").read_text())
    else:
        model, info = load_model(model_dir, labels=task.labels)
        t0 = time.perf_counter()
        export_bundle(model, info, bundle_dir, task=task,
                      config=ExportConfig(formats=("pte",), max_seq_len=128, buckets=(32, 128), parity_samples=16))
        log.info("exported %s in %.0fs", bundle_dir, time.perf_counter() - t0)
        m = json.loads((bundle_dir / "manifest.json").read_text())
    pte = bundle_dir / "model.pte"
    return {"bundle": str(bundle_dir), "pte_mb": round(pte.stat().st_size / 1e6, 2),
            "bundle_mb": round(sum(f.stat().st_size for f in bundle_dir.iterdir() if f.is_file()) / 1e6, 2),
            "parity": m.get("parity")}


def prune_run(teacher_dir: Path, task, method: str, sparsity: float, out: Path, args, *, dev_before=None) -> dict:
    from edgenlp.models.registry import load_model
    from edgenlp.prune import prune, prune_config

    if (out / "prune.json").is_file():
        return json.loads((out / "prune.json").read_text())
    model, info = load_model(teacher_dir, labels=task.labels)
    kw = dict(target_sparsity=sparsity, target="params", seq_len=128, threads=args.threads, max_seq_len=args.max_seq_len)
    if method != "cofi":
        kw.update(samples=args.importance_samples if method == "importance" else args.samples)
    if method == "cofi":
        kw.update(train_limit=args.cofi_train_limit, epochs=args.cofi_epochs, finetune_epochs=args.cofi_finetune_epochs,
                  mask_lr=args.cofi_mask_lr, lagrangian_lr=args.cofi_lagrangian_lr, lr=args.cofi_lr,
                  prune_hidden=not args.cofi_no_hidden)
    cfg = prune_config(method, **kw)
    res = prune(model, info, task, cfg, device="cpu", progress=sys.stderr.isatty(), dev_before=dev_before)
    res.save(out)
    return res.report


def measure(bundles: dict[str, Path], *, seqs=(128, 32), iters: int, rounds: int) -> dict:
    """``{name: {seq: {"median_ms", "p10_ms", "p90_ms", "rounds"}}}``: every bundle, interleaved, 1 thread, batch 1.

    Model only (ExecuTorch registry runner, the bucket from ``pick_bucket``, a
    text of exactly ``seq`` tokens padded and masked), ``iters`` runs per
    (bundle, seq) per round; median over rounds of each round's median.
    """
    import torch

    from edgenlp.bundle import pad_to_bucket, pick_bucket
    from edgenlp.profile.native import text_of_length
    from edgenlp.run.base import get_runner
    from edgenlp.run.executorch import set_threads

    set_threads(1)  # once, before the runners load their programs
    torch.set_num_threads(1)
    calls = {}
    for name, b in bundles.items():
        runner = get_runner(b, runtime="executorch")
        for s in seqs:
            ids = runner.token_ids([text_of_length(s)])[0]
            m = pick_bucket(runner.methods, len(ids))
            x, mask = pad_to_bucket(ids, m, pad_id=runner.pad_id)
            calls[f"{name}@{s}"] = lambda meth=runner._method(m.name), x=x, mask=mask: meth.execute([x, mask])
    t = interleave(calls, rounds=rounds, iters=iters, warmup=3)
    out: dict = {}
    for name in bundles:
        for s in seqs:
            r = t.summary(f"{name}@{s}")
            out.setdefault(name, {})[str(s)] = {"median_ms": round(r["median"], 3), "p10_ms": round(r["p10"], 3),
                                                "p90_ms": round(r["p90"], 3), "rounds": [round(m, 3) for m in r["round_medians"]]}
    return out


def summarize(results: dict) -> list[dict]:
    rows = []
    for task, t in results["tasks"].items():
        base = t.get("baseline", {})
        base_acc = base.get("accuracy")
        base_lat = results.get("latency", {}).get(f"{task}/unpruned", {})
        for name, r in t["runs"].items():
            rep = r.get("report")
            if not rep:
                continue
            lat = results.get("latency", {}).get(f"{task}/{name}", {})
            row = {
                "task": task, "method": rep["method"], "target": rep["target"]["sparsity"],
                "encoder_sparsity": rep["achieved"]["encoder_params"], "total_sparsity": rep["achieved"]["total_params"],
                "flops_sparsity": rep["achieved"]["flops"], "accuracy": rep["dev_after"]["accuracy"],
                "drop_points": round(100 * (base_acc - rep["dev_after"]["accuracy"]), 2) if base_acc is not None else None,
                "hidden": rep["shape"]["hidden"], "heads": rep["shape"]["heads"], "ffn": rep["shape"]["ffn"],
                "pte_mb": r.get("export", {}).get("pte_mb"), "learn_s": rep["learn_wall_s"], "wall_s": rep["wall_s"],
            }
            for s in ("128", "32"):
                if s in lat and s in base_lat:
                    row[f"ms_{s}"] = lat[s]["median_ms"]
                    row[f"speedup_{s}"] = round(base_lat[s]["median_ms"] / lat[s]["median_ms"], 2)
            rows.append(row)
    return rows


def write(results: dict, out: Path, writer: Results) -> None:
    results["rows"] = summarize(results)
    lines = ["# Structured pruning of MiniLM-L6 (tools/bench/prune.py)", "",
             f"Machine: {results['environment']['cpu'].get('model')}, ISA flags {results['isa']}. "
             f"{results.get('note') or ''}", "",
             "Dev accuracy on the full dev set (eager PyTorch; the ExecuTorch export is checked against eager at export). "
             "Sparsity = fraction of encoder parameters removed (transformer layers; embeddings and head excluded). "
             "Latency: ExecuTorch (XNNPACK), 1 thread, batch 1, a sentence filling the bucket; median over "
             f"{results['config']['rounds']} interleaved rounds of {results['config']['iters']} runs, with the "
             "unpruned model's bundle measured in the same rounds; speedup = unpruned / pruned.", ""]
    for task, t in results["tasks"].items():
        base = t.get("baseline", {})
        lat = results.get("latency", {}).get(f"{task}/unpruned", {})
        lines += [f"## {task}", "",
                  f"Unpruned teacher: `{t['teacher']}`, dev accuracy {100 * base.get('accuracy', float('nan')):.2f}%, "
                  f".pte {base.get('pte_mb')} MB, latency seq 128 {lat.get('128', {}).get('median_ms')} ms, "
                  f"seq 32 {lat.get('32', {}).get('median_ms')} ms.", "",
                  "| method | target | enc. sparsity | FLOPs@128 sparsity | dev acc | Δ points | hidden | heads per layer | "
                  "FFN per layer | .pte MB | ms @128 | speedup @128 | ms @32 | speedup @32 | prune wall s |",
                  "|---|---:|---:|---:|---:|---:|---:|---|---|---:|---:|---:|---:|---:|---:|"]
        for r in [r for r in results["rows"] if r["task"] == task]:
            lines.append(
                f"| {r['method']} | {100 * r['target']:.0f}% | {100 * r['encoder_sparsity']:.1f}% | {100 * r['flops_sparsity']:.1f}% "
                f"| {100 * r['accuracy']:.2f}% | {r['drop_points']} | {r['hidden']} | {r['heads']} | {r['ffn']} | {r['pte_mb']} "
                f"| {r.get('ms_128', '')} | {r.get('speedup_128', '')} | {r.get('ms_32', '')} | {r.get('speedup_32', '')} "
                f"| {r['wall_s']:.0f} |")
        lines.append("")
    if results.get("not_run"):
        lines += ["Not run: " + ", ".join(results["not_run"]), ""]
    lines += ["Published orientation (different model, GPU latency): " + "; ".join(
        f"{p['model']}: {100 * p['sparsity']:.1f}% sparsity, {100 * p['accuracy']:.1f}% SST-2 dev, {p['speedup']}x (V100, batch 128)"
        for p in PUBLISHED) + " — Xia et al., ACL 2022, released checkpoints (github.com/princeton-nlp/CoFiPruning).", ""]
    writer.write(out, results, "\n".join(lines), plot=lambda path: plot(results, path))


def plot(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    tasks = list(results["tasks"])
    fig, axes = plt.subplots(1, len(tasks) + 1, figsize=(5.2 * (len(tasks) + 1), 4.2))
    marks = {"cofi": "o-", "fast": "s-", "importance": "^-"}
    for ax, task in zip(axes, tasks):
        base = results["tasks"][task].get("baseline", {})
        lat = results.get("latency", {}).get(f"{task}/unpruned", {}).get("128", {}).get("median_ms")
        for method, style in marks.items():
            pts = sorted((r["ms_128"], 100 * r["accuracy"]) for r in results["rows"]
                         if r["task"] == task and r["method"] == method and "ms_128" in r)
            if pts:
                ax.plot(*zip(*pts), style, label=method)
        if lat and "accuracy" in base:
            ax.plot([lat], [100 * base["accuracy"]], "k*", markersize=12, label="unpruned")
        ax.set_title(f"MiniLM-L6, {task}: dev accuracy vs ExecuTorch latency")
        ax.set_xlabel("latency, seq 128, 1 thread (ms)")
        ax.set_ylabel("dev accuracy (%)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    ax = axes[-1]
    for method, style in marks.items():
        pts = sorted((r["speedup_128"], 100 * r["accuracy"]) for r in results["rows"]
                     if r["task"] == "sst2" and r["method"] == method and "speedup_128" in r)
        if pts:
            ax.plot(*zip(*pts), style, label=f"{method} (MiniLM-L6, ExecuTorch CPU)")
    ax.plot([p["speedup"] for p in PUBLISHED], [100 * p["accuracy"] for p in PUBLISHED], "kx", markersize=9,
            label="CoFi BERT-base 60% / 95% (published, V100)")
    ax.set_xscale("log")
    ax.set_title("SST-2: dev accuracy vs speedup over the unpruned model")
    ax.set_xlabel("speedup (seq 128)")
    ax.set_ylabel("dev accuracy (%)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def combine(files: list[Path], out: Path) -> None:
    """Every method from several result files on one figure: accuracy drop vs speed-up, per task.

    Latency in ms differs between hosts; the speed-up over the unpruned bundle
    measured in the same rounds does much less, so the runs of different hosts
    (or of different stops) share an axis. Writes ``<out>.png`` and ``<out>.md``.
    """
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    writer = Results(script="prune")
    rows, sources = [], []
    for f in files:
        doc = json.loads(Path(f).read_text())
        cpu = doc.get("environment", {}).get("cpu", {}).get("model", "?")
        sources.append(f"`{Path(f).name}`: {cpu}, ISA flags {doc.get('isa')}")
        rows += [{**r, "source": Path(f).name} for r in doc.get("rows", []) if "speedup_128" in r]
    if not rows:
        raise SystemExit(f"error: no measured rows in {', '.join(map(str, files))}")
    tasks = sorted({r["task"] for r in rows}, key=lambda t: (t != "sst2", t))
    marks = {"cofi": "o-", "fast": "s-", "importance": "^-"}
    fig, axes = plt.subplots(1, len(tasks), figsize=(5.6 * len(tasks), 4.3), squeeze=False)
    for ax, task in zip(axes[0], tasks):
        for method, style in marks.items():
            pts = sorted((r["speedup_128"], -r["drop_points"], r["target"]) for r in rows
                         if r["task"] == task and r["method"] == method)
            if not pts:
                continue
            ax.plot([x for x, _, _ in pts], [y for _, y, _ in pts], style, label=method)
            for x, y, t in pts:
                ax.annotate(f"{100 * t:.0f}%", (x, y), textcoords="offset points", xytext=(4, 3), fontsize=7)
        ax.axhline(0, color="k", lw=0.8)
        ax.set_xscale("log")
        ax.set_xticks([1.25, 1.5, 2, 3, 4, 6, 8])
        ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}x"))
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.set_title(f"MiniLM-L6, {task}: accuracy vs speed-up (labels: encoder sparsity)", fontsize=10)
        ax.set_xlabel("speed-up over the unpruned bundle, ExecuTorch seq 128, 1 thread")
        ax.set_ylabel("dev accuracy change (points)")
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=8)
    fig.tight_layout()
    lines = ["# Structured pruning of MiniLM-L6: every method (tools/bench/prune.py --combine)", "",
             "Speed-up is over the unpruned bundle timed in the same interleaved rounds of the same run, so rows "
             "from different hosts compare; milliseconds do not. Sources:", ""] + [f"- {s}" for s in sources] + [
             "", "| task | method | sparsity | Δ points | speed-up @128 | speed-up @32 | source |", "|---|---|---:|---:|---:|---:|---|"]
    for r in sorted(rows, key=lambda r: (tasks.index(r["task"]), r["target"], r["method"])):
        lines.append(f"| {r['task']} | {r['method']} | {100 * r['target']:.0f}% | {-r['drop_points']:+.2f} | "
                     f"{r['speedup_128']}x | {r.get('speedup_32', '')}x | {r['source']} |")
    writer.write(out, {"sources": sources, "files": [str(f) for f in files], "rows": rows}, "\n".join(lines),
                 plot=lambda path: fig.savefig(path, dpi=110))
    plt.close(fig)


# the config keys that must agree between merged files (what a run spent and how it was exported)
MERGE_SAME = ("cofi_train_limit", "cofi_epochs", "cofi_finetune_epochs", "cofi_mask_lr", "cofi_lagrangian_lr", "cofi_lr",
              "cofi_no_hidden", "samples", "importance_samples", "max_seq_len", "threads")


def merge(files: list[Path], args) -> int:
    """``--merge``: one results document from several, every bundle timed again here (see the module docstring)."""
    docs = [json.loads(f.read_text()) for f in files]
    first = docs[0]
    for f, d in zip(files[1:], docs[1:]):
        differ = [k for k in MERGE_SAME if d["config"].get(k) != first["config"].get(k)]
        if differ:
            raise SystemExit(f"error: {f} ran another budget than {files[0]} ({', '.join(differ)})")
    writer = Results(script="prune", threads=1)
    config = {**first["config"], "rounds": args.rounds, "iters": args.iters, "out": str(args.out),
              "merged_from": [str(f) for f in files]}
    for key in ("tasks", "cofi_tasks", "methods", "sparsities", "cofi_sparsities"):
        config[key] = sorted({x for d in docs for x in d["config"][key]})
    results = {"config": config, "isa": first["isa"], "environment": writer.environment,
               "note": args.note or first.get("note", ""), "published": PUBLISHED, "tasks": {}, "latency": {},
               "not_run": [x for d in docs for x in d.get("not_run", [])]}
    bundles: dict[str, Path] = {}
    for d in docs:
        for task, t in d["tasks"].items():
            into = results["tasks"].setdefault(task, {**t, "baseline": {}, "runs": {}})  # not the files' own dicts
            if into["teacher"] != t["teacher"]:
                raise SystemExit(f"error: {task} has two teachers: {into['teacher']} and {t['teacher']}")
            into["baseline"].update(t["baseline"])
            for name, run in t["runs"].items():
                if name in into["runs"]:
                    raise SystemExit(f"error: {task}/{name} is in two of the merged files")
                into["runs"][name] = run
                bundles[f"{task}/{name}"] = Path(run["export"]["bundle"])
            bundles.setdefault(f"{task}/unpruned", Path(d["config"]["workdir"]) / task / "bundle-unpruned")
    missing = [str(b) for b in bundles.values() if not (b / "model.pte").is_file()]
    if missing:
        raise SystemExit(f"error: bundles not found (merge on the machine that trained them): {', '.join(missing)}")
    log.info("timing %d bundles in one process (%d rounds of %d runs)", len(bundles), args.rounds, args.iters)
    results["latency"] = measure(bundles, iters=args.iters, rounds=args.rounds)
    write(results, args.out, writer)
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--teachers", type=Path, default=Path("/work/artifacts/teachers"), help="folder with one model dir per task")
    p.add_argument("--tasks", nargs="+", default=["sst2", "banking77"])
    p.add_argument("--teacher", action="append", default=[], metavar="TASK=DIR", help="a teacher outside --teachers")
    p.add_argument("--data-dir", default=None)
    p.add_argument("--methods", nargs="+", default=["fast", "importance", "cofi"])
    p.add_argument("--sparsities", nargs="+", type=float, default=[0.3, 0.5, 0.7, 0.9])
    p.add_argument("--cofi-tasks", nargs="+", default=["sst2", "banking77"])
    p.add_argument("--cofi-sparsities", nargs="+", type=float, default=[0.5, 0.7])
    p.add_argument("--cofi-train-limit", type=int, default=4000)
    p.add_argument("--cofi-epochs", type=float, default=1.0)
    p.add_argument("--cofi-finetune-epochs", type=float, default=1.0)
    p.add_argument("--cofi-mask-lr", type=float, default=0.1)
    p.add_argument("--cofi-lagrangian-lr", type=float, default=0.05)
    p.add_argument("--cofi-lr", type=float, default=5e-5)
    p.add_argument("--cofi-no-hidden", action="store_true")
    p.add_argument("--samples", type=int, default=1024, help="fast: rows for Fisher information and rescaling")
    p.add_argument("--importance-samples", type=int, default=512, help="importance: rows per iteration (4 iterations)")
    p.add_argument("--max-seq-len", type=int, default=64)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--iters", type=int, default=15)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--budget-min", type=float, default=50.0, help="stop starting prune runs after this many minutes")
    p.add_argument("--workdir", type=Path, default=Path("/tmp/prune-bench"))
    p.add_argument("--note", default="")
    p.add_argument("--out", type=Path, default=RESULTS / "prune")
    p.add_argument("--combine", type=Path, nargs="+", default=None, metavar="RESULTS_JSON",
                   help="only draw every method of these result files on one figure (accuracy change vs speed-up) to --out")
    p.add_argument("--merge", type=Path, nargs="+", default=None, metavar="RESULTS_JSON",
                   help="join the runs of these result files (same budget) and time all their bundles again in one process")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    if args.combine:
        combine(args.combine, args.out)
        return 0
    if args.merge:
        return merge(args.merge, args)

    from edgenlp.data.tasks import load_task
    from edgenlp.utils import isa_flags

    t_start = time.perf_counter()
    writer = Results(script="prune", threads=args.threads)
    results = {"config": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
               "isa": isa_flags(), "environment": writer.environment, "note": args.note, "published": PUBLISHED,
               "tasks": {}, "latency": {}, "not_run": []}
    tasks = {t: load_task(t, data_dir=args.data_dir) for t in set(args.tasks) | set(args.cofi_tasks)}
    teachers = {t: args.teachers / t for t in tasks}
    for spec in args.teacher:
        t, _, d = spec.partition("=")
        teachers[t] = Path(d)
    bundles: dict[str, Path] = {}

    def ready(name: str) -> bool:
        """Export the task's unpruned bundle once its teacher exists (teachers may still be training)."""
        if name in results["tasks"]:
            return True
        if not (teachers[name] / "config.json").is_file():
            return False
        b = export(teachers[name], args.workdir / name / "bundle-unpruned", tasks[name])
        bundles[f"{name}/unpruned"] = Path(b["bundle"])
        results["tasks"][name] = {"teacher": str(teachers[name]), "baseline": {"pte_mb": b["pte_mb"]}, "runs": {}}
        return True

    for task, method, sparsity in plan(args):
        name = run_name(method, sparsity)
        over = (time.perf_counter() - t_start) / 60 > args.budget_min
        if over and not (args.workdir / task / name / "prune.json").is_file():
            results["not_run"].append(f"{task}/{name} (time budget)")
            continue
        if not ready(task):
            results["not_run"].append(f"{task}/{name} (no teacher at {teachers[task]})")
            continue
        log.info("run %s/%s", task, name)
        try:
            rep = prune_run(teachers[task], tasks[task], method, sparsity, args.workdir / task / name, args,
                            dev_before=results["tasks"][task]["baseline"].get("dev"))
            results["tasks"][task]["baseline"].update(accuracy=rep["dev_before"]["accuracy"], dev=rep["dev_before"])
            ex = export(args.workdir / task / name, args.workdir / task / f"bundle-{name}", tasks[task])
        except Exception as exc:  # one failed run must not cost the others
            log.exception("run %s/%s failed", task, name)
            results["not_run"].append(f"{task}/{name} (failed: {type(exc).__name__}: {exc})")
            continue
        bundles[f"{task}/{name}"] = Path(ex["bundle"])
        results["tasks"][task]["runs"][name] = {"report": {k: v for k, v in rep.items() if k != "environment"}, "export": ex}
        write(results, args.out, writer)
    results["latency"] = measure(bundles, iters=args.iters, rounds=args.rounds)
    results["wall_min"] = round((time.perf_counter() - t_start) / 60, 1)
    write(results, args.out, writer)
    log.info("done in %.1f min", results["wall_min"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
