"""Benchmark: pruning with and without recovery distillation on a fine-tuned MiniLM-L6, not CI.

1. Holds ``--val-rows`` training rows out as a validation split (never a
   dev sentence), then fine-tunes ``minilm-l6`` on the rest, the teacher:
   ``--teacher compress`` the way ``compress --preset quick`` does (its
   method for the task's classes and its step budget: the model ``compress``
   prunes, what the accuracy prior's rows should be measured from), or
   ``--teacher full`` full fine-tuning for ``--finetune-epochs`` on a seeded
   ``--train-limit`` subset; reused from ``--workdir`` on a rerun.
2. Prunes it with each ``--methods`` at each ``--sparsities`` (encoder
   parameters), without any fine-tuning (the pruned row).
3. Distils every pruned model from the teacher (:func:`edgenlp.prune.recover`)
   for each ``--steps`` at each ``--lrs`` on the same training rows (the
   recovered rows); 300 steps of 32 on 8,000 rows is what ``compress
   --preset quick`` spends.

Every row has its validation accuracy (what a setting is chosen on: the best
learning rate per method, sparsity and steps is marked ``chosen``) and its
dev accuracy (reported only; no step trains or selects on dev). Writes
``<out>.json`` and ``<out>.md`` after every run, with the host and load average;
``python tools/readme.py`` renders the README's ``recovery`` section from it.

    nice -n 10 python tools/bench/recovery.py --task sst2 --teacher compress --methods fast \\
        --sparsities 0.3 0.5 0.6 0.7 0.8 0.9 --steps 300 --lrs 2e-4 --threads 1 --workdir /tmp/recovery-bench/sst2
    # banking77: --val-rows 900, the validation split compress holds out of its 9,003 training rows
"""

from __future__ import annotations

import sys
from pathlib import Path

# tools/bench/profile.py shadows the standard library's ``profile``: drop the script's folder from the import path.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]

import argparse  # noqa: E402
import json  # noqa: E402
import logging  # noqa: E402
import math  # noqa: E402
import time  # noqa: E402
from dataclasses import replace  # noqa: E402

ROOT = _HERE.parents[1]
sys.path.insert(0, str(ROOT))

from tools.bench.harness import RESULTS, Results  # noqa: E402

log = logging.getLogger("bench.recovery")


def teacher(args, task, workdir: Path):
    """The fine-tuned teacher (model, info, finetune report), trained once per workdir on ``task`` (dev = validation)."""
    from edgenlp.finetune.config import FinetuneConfig
    from edgenlp.finetune.trainer import finetune
    from edgenlp.models.registry import load_model

    out = workdir / "teacher"
    mark = workdir / "task.txt"  # one task per workdir: two tasks' runs in one would train over each other's teacher
    which = f"{task.name} {args.teacher}"
    accepted = {which, task.name} if args.teacher == "full" else {which}  # a bare task name: a full teacher of earlier runs
    if mark.is_file() and mark.read_text().strip() not in accepted:
        raise SystemExit(f"error: {workdir} holds the {mark.read_text().strip()} teacher; give {which} its own --workdir")
    mark.write_text(which + "\n")
    if not (out / "finetune.json").is_file():
        model, info = load_model("minilm-l6", labels=task.labels)
        cfg = teacher_config(args, len(task.labels))
        res = finetune(model, info, task, cfg, device="cpu")
        res.save(out, info)
    model, info = load_model(out, labels=task.labels)
    return model, info, json.loads((out / "finetune.json").read_text())


def teacher_config(args, num_classes: int):
    """``--teacher full``: full fine-tuning for ``--finetune-epochs``; ``compress``: the fine-tuning ``compress --preset
    quick`` runs first (its method for this many classes and its step budget), so the drops are measured from the
    model ``compress`` prunes."""
    from edgenlp.finetune.config import FinetuneConfig

    if args.teacher == "full":
        return FinetuneConfig(method="full", epochs=args.finetune_epochs, max_seq_len=args.max_seq_len,
                              threads=args.threads, seed=args.seed)
    from edgenlp.compress.config import PRESETS, CompressConfig
    from edgenlp.compress.pipeline import finetune_config

    cfg = finetune_config(CompressConfig(task=args.task, seed=args.seed), PRESETS["quick"], num_classes)
    return replace(cfg, threads=args.threads)


def teacher_text(doc: dict) -> str:
    """How the teacher was trained, for the report."""
    t = doc["teacher"]
    if t.get("kind") == "compress":
        c = t["config"]
        return (f"the fine-tuning of `compress --preset quick` ({c['method']}, {c['max_steps']} steps of {c['batch_size']} "
                f"on a seeded subset of up to {c['train_limit']:,} of the {doc['train_rows']:,} training rows)")
    return f"full fine-tuning, {t['epochs']} epoch{'s' if t['epochs'] != 1 else ''} on {doc['train_rows']:,} training rows"


def dev_accuracy(model, info, split, labels, max_len: int) -> float:
    """Eager accuracy of ``model`` on ``split`` (the real dev set: reported, never chosen on), as ``compress`` measures it."""
    from edgenlp.compress.measured import eager_accuracy

    return float(eager_accuracy(model, info, split, labels, max_len=max_len)["accuracy"])


def task_markdown(doc: dict, latency: dict | None = None) -> list[str]:
    """One task's section; ``latency`` (that task's timings from ``--time``) adds the int8 speed-up of each shape."""
    t = doc["teacher"]
    lat = latency or {}
    lines = [f"## {doc['task']}", "",
             f"Teacher: {teacher_text(doc)}; validation "
             f"accuracy {100 * t['val_accuracy']:.2f}% on {doc['val_rows']:,} rows held out of train, dev accuracy "
             f"{100 * t['dev_accuracy']:.2f}% on {doc['dev_rows']:,} rows."
             + (f" The recovery distils on {doc['recovery_rows']:,} training rows (a seeded subset of train without the "
                "validation rows)." if doc.get("recovery_rows", doc["train_rows"]) != doc["train_rows"] else ""), "",
             "| method | sparsity (achieved) | recovery | lr | val accuracy | Δ val (points) | dev accuracy | Δ dev (points) "
             "| KL to teacher | int8 ms @128 (× unpruned int8) | wall time |",
             "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in sorted(doc["rows"], key=lambda r: (r["method"], r["sparsity"], r["steps"])):
        rec = "none" if not r["steps"] else f"{r['steps']} steps"
        lr = "" if not r["steps"] else f"{r['config']['lr']:g}"
        kl = "" if r.get("kl_to_teacher") is None else f"{r['kl_to_teacher']:.4f}"
        best = " **(chosen)**" if r.get("chosen") else ""
        ms = lat.get(shape_label(r) + " int8")
        speed = f"{ms['median_ms']:.2f} ({ms['speedup_vs_int8']:.2f}×)" if ms else ""
        lines.append(f"| {r['method']} | {100 * r['sparsity']:.0f}% ({100 * r['achieved']:.1f}%) | {rec}{best} | {lr} | "
                     f"{100 * r['val_accuracy']:.2f}% | {100 * (r['val_accuracy'] - t['val_accuracy']):+.2f} | "
                     f"{100 * r['dev_accuracy']:.2f}% | {100 * (r['dev_accuracy'] - t['dev_accuracy']):+.2f} | {kl} | "
                     f"{speed} | {r['wall_s']:.0f} s |")
    if lat:
        u8, u32 = lat.get("unpruned int8"), lat.get("unpruned fp32")
        lines += ["", f"Unpruned, same process: int8 {u8['median_ms']:.2f} ms, fp32 {u32['median_ms']:.2f} ms "
                      "(stock XNNPACK flow, seq 128, 1 thread, median of interleaved rounds; random weights of each shape)."]
    host = doc.get("host") or {}
    isa = host.get("isa_flags") or "?"
    lines += ["", f"Host: {host.get('cpu_model', '?')}, ISA flags {isa_text(isa)}; "
                  f"{doc.get('threads', '?')} thread(s); load average {host.get('load_avg_after', '?')} when written. "
                  f"{doc.get('note', '')}".rstrip(), ""]
    for e in doc.get("earlier", []):  # rows a resumed run kept from an earlier run (possibly another host)
        h = e.get("host") or {}
        points = ", ".join(shape_label({"method": m, "sparsity": sp}) for m, sp in e["points"])
        lines += [f"Rows at {points} come from an earlier run: {h.get('cpu_model', '?')}, ISA flags "
                  f"{isa_text(h.get('isa_flags') or '?')}; load average {h.get('load_avg_after', '?')} when "
                  f"written ({h.get('written', '?')}). {e.get('note', '')}".rstrip(), ""]
    return lines


def shape_label(row: dict) -> str:
    """A row's pruned shape as ``--time`` names its programs (``fast 50%``; the program adds its linears)."""
    return f"{row['method']} {100 * row['sparsity']:.0f}%"


def isa_text(isa) -> str:
    """ISA flags as one string (the host block holds a string; older files a list)."""
    return isa if isinstance(isa, str) else " ".join(isa)


def earlier_entry(doc: dict) -> dict:
    """What a resumed run keeps of the run that wrote ``doc`` (a task's document): its host, note and points."""
    return {"host": doc.get("host"), "note": doc.get("note", ""),
            "points": sorted({(r["method"], r["sparsity"]) for r in doc["rows"]}
                             - {tuple(pt) for e in doc.get("earlier", []) for pt in e["points"]})}


def markdown(tasks: dict[str, dict], latency: dict | None = None) -> str:
    lrs = {}
    for doc in tasks.values():
        for r in doc["rows"]:
            if r["steps"]:
                lrs.setdefault((doc["task"], r["method"], r["sparsity"], r["steps"]), set()).add(r["config"]["lr"])
    compared = sorted({lr for v in lrs.values() if len(v) > 1 for lr in v})
    how = (f"the recovery learning rate is chosen per method, sparsity and steps on the validation split among "
           f"{', '.join(f'{x:g}' for x in compared)} where several ran (**chosen**)" if compared else
           f"one recovery learning rate ran per point ({', '.join(sorted({f'{x:g}' for v in lrs.values() for x in v}))}), "
           "so **chosen** marks that row; no learning rate was compared")
    lines = ["# Pruning with and without recovery distillation (MiniLM-L6)", "",
             "Each task's teacher is pruned without any retraining (recovery none), then distilled from the teacher "
             f"(logit KL at temperature 2 plus hidden-state MSE through the layer map) for the steps shown; {how}. "
             "Dev is reported only. The planner's prior takes the chosen rows.", ""]
    for name in sorted(tasks):
        lines += task_markdown(tasks[name], ((latency or {}).get("tasks") or {}).get(name))
    if latency:
        h = latency["host"]
        lines += [f"Latency: {h['cpu_model']}, ISA flags {isa_text(h['isa_flags'])}; "
                  f"{latency['runs']} interleaved rounds per task in one fresh process; load average "
                  f"{latency['load_avg_before'][0]} before, {latency['load_avg_after'][0]} after. "
                  f"{latency.get('note', '')}".rstrip(), ""]
    return "\n".join(lines)


def plot(tasks: dict[str, dict], path: Path, latency: dict | None = None) -> None:
    """Δ dev accuracy against encoder sparsity per task, and against the int8 speed-up where ``--time`` measured the
    shapes: each method pruned only, and pruned then recovered (chosen)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = sorted(tasks)
    timed = ((latency or {}).get("tasks") or {})
    rows_of = 2 if any(timed.get(n) for n in names) else 1
    fig, axes = plt.subplots(rows_of, len(names), figsize=(5.2 * len(names), 4.0 * rows_of), squeeze=False)
    for col, name in enumerate(names):
        doc = tasks[name]
        t = doc["teacher"]["dev_accuracy"]
        speed = {k: v["speedup_vs_int8"] for k, v in (timed.get(name) or {}).items() if isinstance(v, dict) and "speedup_vs_int8" in v}
        axes_x = [(axes[0][col], lambda r: 100 * r["achieved"], "encoder parameters removed (%)")]
        if rows_of == 2:
            axes_x.append((axes[1][col], lambda r: speed.get(shape_label(r) + " int8"),
                           "int8 speed-up over the unpruned int8 program (seq 128, 1 thread)"))
        for ax, x_of, xlabel in axes_x:
            for method in sorted({r["method"] for r in doc["rows"]}):
                for label, keep, style in (("pruned only", lambda r: not r["steps"], "--"),
                                           ("+ recovery", lambda r: r.get("chosen"), "-")):
                    pts = sorted((x_of(r), 100 * (r["dev_accuracy"] - t)) for r in doc["rows"]
                                 if r["method"] == method and keep(r) and x_of(r) is not None)
                    if pts:
                        ax.plot([x for x, _ in pts], [y for _, y in pts], style, marker="o", label=f"{method} {label}")
            ax.axhline(0, color="grey", lw=0.8)
            ax.axhline(-1, color="tab:red", lw=0.8, ls=":", label="1-point bound")
            ax.set(title=f"{name} (teacher {100 * t:.1f}% dev)", xlabel=xlabel, ylabel="Δ dev accuracy (points)")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write(results: Results, out: Path, doc: dict) -> None:
    """Put this task's document into ``<out>.json`` beside the other tasks' (re-read just before writing)."""
    path = out.with_name(out.name + ".json")
    try:
        whole = json.loads(path.read_text())
        tasks = dict(whole.get("tasks", {}))
    except (OSError, ValueError):
        whole, tasks = {}, {}
    tasks[doc["task"]] = {**doc, "host": results.host()}
    kept = {"latency": whole["latency"]} if tasks and whole.get("latency") else {}  # a resumed run keeps the timings
    results.write(out, {"script": "recovery", "tasks": tasks, **kept}, markdown(tasks, kept.get("latency")),
                  plot=lambda p: plot(tasks, p, kept.get("latency")))


def mark_chosen(rows: list[dict]) -> None:
    """Per (method, sparsity, steps): the recovered row with the best validation accuracy is ``chosen``."""
    best: dict[tuple, dict] = {}
    for r in rows:
        r.pop("chosen", None)
        if not r["steps"]:
            continue
        key = (r["method"], r["sparsity"], r["steps"])
        if key not in best or r["val_accuracy"] > best[key]["val_accuracy"]:
            best[key] = r
    for r in best.values():
        r["chosen"] = True


def shape_model(shape: dict, num_labels: int, *, seed: int = 0):
    """A seeded random-weight MiniLM-L6 of ``shape`` (a results row's ``shape``): latency depends on shapes, not weights."""
    import torch

    from edgenlp.models.encoder import EncoderClassifier
    from edgenlp.models.registry import load_model

    base, _ = load_model("minilm-l6", labels=tuple(f"l{i}" for i in range(num_labels)))
    from dataclasses import replace

    torch.manual_seed(seed)
    return EncoderClassifier(replace(base.shape, hidden=shape["hidden"], heads=tuple(shape["heads"]),
                                     ffn=tuple(shape["ffn"])), num_labels).eval()


def time_shapes(whole: dict, workdir: Path, *, seq_len: int, runs: int) -> dict:
    """Per task: the unpruned shape and every chosen pruned shape, lowered by the stock XNNPACK int8 flow (PT2E,
    dynamic per-channel linears: the fastest peer of ``compress_headline.py``) and the unpruned one in fp32, timed in
    interleaved rounds in one fresh process at ``seq_len``, 1 thread. Returns ``{task: {name: ms summary}}``."""
    sys.path.insert(0, str(ROOT / "runtime" / "tests"))
    from quant_programs import lower

    from edgenlp.export.graph import example_inputs, prepare
    from tools.bench.harness import Timings, fresh_process

    out = {}
    for name, doc in sorted(whole["tasks"].items()):
        n = len(json.loads((workdir / name / "teacher" / "config.json").read_text()).get("id2label", {})) or 2
        first = doc["rows"][0]["shape"]["original"]
        shapes = {"unpruned": first}
        for r in doc["rows"]:
            if r.get("chosen"):
                shapes[shape_label(r)] = r["shape"]
        programs = {}
        for label, shape in shapes.items():
            for linears in (("int8", "fp32") if label == "unpruned" else ("int8",)):
                path = workdir / "latency" / f"{name}-{label.replace(' ', '-').replace('%', '')}-{linears}.pte"
                if not path.is_file():
                    model = shape_model(shape, n)
                    inputs = {f"forward_{seq_len}": example_inputs(seq_len, vocab_size=model.shape.vocab_size)}
                    path.parent.mkdir(parents=True, exist_ok=True)
                    path.write_bytes(lower(prepare(model).eval(), inputs, linears=None if linears == "fp32" else "int8"))
                programs[f"{label} {linears}"] = {"runtime": "executorch", "path": str(path), "method": f"forward_{seq_len}",
                                                  "vocab_size": 30522}
        names = list(programs)
        spec = {"seq_len": seq_len, "threads": 1, "runs": runs, "warmup": 5, "programs": [programs[k] for k in names]}
        t = Timings.from_rounds(dict(zip(names, fresh_process("programs", spec, threads=1)["ms"])))
        base = t.summary("unpruned int8")["median"]
        out[name] = {k: {"median_ms": round(t.summary(k)["median"], 3), "p10_ms": round(t.summary(k)["p10"], 3),
                         "p90_ms": round(t.summary(k)["p90"], 3), "speedup_vs_int8": round(base / t.summary(k)["median"], 3)}
                     for k in names}
        log.info("%s: %s", name, out[name])
    return out


def earlier_rows(out: Path, task: str, ft: dict) -> tuple[list[dict], list[dict]]:
    """This task's rows in ``<out>.json`` when its teacher is the one in the workdir (same validation accuracy), and
    the runs they came from (:func:`earlier_entry`: host and note of each, so a resumed run keeps their provenance)."""
    try:
        doc = json.loads(out.with_name(out.name + ".json").read_text())["tasks"][task]
    except (OSError, ValueError, KeyError):
        return [], []
    if doc["teacher"]["val_accuracy"] != ft["dev"]["accuracy"]:
        return [], []
    return doc["rows"], [*doc.get("earlier", []), earlier_entry(doc)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--task", default="sst2")
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--train-limit", type=int, default=8000)
    ap.add_argument("--val-rows", type=int, default=1000, help="Training rows held out as the validation split.")
    ap.add_argument("--recovery-rows", type=int, default=None,
                    help="Training rows the recovery distils on (a seeded subset of train minus validation; default: "
                         "the teacher's --train-limit rows). Longer recoveries read more rows, as compress's do.")
    ap.add_argument("--teacher", choices=("full", "compress"), default="full",
                    help="How the teacher is fine-tuned: full fine-tuning for --finetune-epochs on --train-limit rows, or "
                         "as compress --preset quick does it (on every training row but the validation split; "
                         "--train-limit then bounds only the recovery's rows, as compress's does).")
    ap.add_argument("--finetune-epochs", type=int, default=1)
    ap.add_argument("--methods", nargs="+", default=["fast"])
    ap.add_argument("--sparsities", nargs="+", type=float, default=[0.5])
    ap.add_argument("--steps", nargs="+", type=int, default=[300],
                    help="Recovery optimizer steps (one row each; 300 is compress's quick budget).")
    ap.add_argument("--lrs", nargs="+", type=float, default=[5e-5], help="Recovery learning rates (one row each).")
    ap.add_argument("--samples", type=int, default=1024, help="fast/importance: training rows that score the units.")
    ap.add_argument("--max-seq-len", type=int, default=64)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/recovery-bench"))
    ap.add_argument("--out", type=Path, default=RESULTS / "recovery")
    ap.add_argument("--note", default="")
    ap.add_argument("--resume", action="store_true",
                    help="Keep this task's rows already in <out>.json (same teacher) and skip the points they cover.")
    ap.add_argument("--report-only", action="store_true", help="Render <out>.md and .png again from <out>.json.")
    ap.add_argument("--time", action="store_true",
                    help="Time each task's chosen pruned shapes against the unpruned one (stock XNNPACK int8, seq 128, "
                         "1 thread, interleaved rounds) into <out>.json's 'latency', then render the report.")
    ap.add_argument("--runs", type=int, default=30, help="--time: interleaved rounds.")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    if args.time or args.report_only:
        from edgenlp.utils import atomic_write_json, atomic_write_text

        whole = json.loads(args.out.with_name(args.out.name + ".json").read_text())
        if args.time:
            from tools.bench.harness import host_info, load_average

            before = load_average()
            whole["latency"] = {"seq_len": 128, "threads": 1, "runs": args.runs, "load_avg_before": before,
                                "host": host_info(), "tasks": time_shapes(whole, args.workdir, seq_len=128, runs=args.runs)}
            whole["latency"]["load_avg_after"] = load_average()
            atomic_write_json(args.out.with_name(args.out.name + ".json"), whole)
        md = markdown(whole["tasks"], whole.get("latency")).rstrip("\n") + "\n\n" + Results.host_line(whole["host"]) + "\n"
        atomic_write_text(args.out.with_name(args.out.name + ".md"), md)
        Results.figure(args.out.with_name(args.out.name + ".png"), lambda p: plot(whole["tasks"], p, whole.get("latency")))
        return

    import torch

    from edgenlp.data.tasks import load_task
    from edgenlp.prune import DistillConfig, prune, prune_config, recover
    from edgenlp.prune.config import METHOD_CONFIGS

    torch.set_num_threads(args.threads)
    results = Results(script="recovery", threads=args.threads)
    task = load_task(args.task, data_dir=args.data_dir)
    tuning, val = task.hold_out(args.val_rows, seed=args.seed)  # tuning.dev is the validation split

    # the recovery's rows: its own seeded subset when --recovery-rows says so, else the teacher's
    distil_on = (replace(tuning, train=tuning.train.sample(min(args.recovery_rows, len(tuning.train)), seed=args.seed))
                 if args.recovery_rows else None)
    if args.train_limit and args.teacher == "full":
        tuning = replace(tuning, train=tuning.train.sample(args.train_limit, seed=args.seed))
    distil_on = distil_on or tuning
    distil_limit = args.recovery_rows or args.train_limit  # DistillConfig.train_limit: recover() takes a seeded subset
    distil_rows = min(distil_limit or len(distil_on.train), len(distil_on.train))
    args.workdir.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    model, info, ft = teacher(args, tuning, args.workdir)
    dev = lambda m, i: dev_accuracy(m, i, task.dev, task.labels, args.max_seq_len)  # noqa: E731
    previous, earlier = earlier_rows(args.out, args.task, ft) if args.resume else ([], [])
    doc = {"task": args.task, "train_rows": len(tuning.train), "recovery_rows": distil_rows, "val_rows": len(val),
           "dev_rows": len(task.dev),
           "max_seq_len": args.max_seq_len, "threads": args.threads,
           "teacher": {"val_accuracy": ft["dev"]["accuracy"], "dev_accuracy": dev(model, info),
                       "epochs": args.finetune_epochs, "wall_s": ft.get("total_wall_s"), "kind": args.teacher,
                       "config": teacher_config(args, len(task.labels)).to_dict()},
           "rows": list(previous), "note": args.note, **({"earlier": earlier} if earlier else {})}
    for method in args.methods:
        for sp in args.sparsities:
            done = [r for r in previous if r["method"] == method and r["sparsity"] == sp]
            if done and all(any(r["steps"] == st and r["config"]["lr"] == lr for r in done if r["steps"])
                            for st in args.steps for lr in args.lrs):
                continue  # every row of this point is in the results already (--resume)
            doc["rows"] = [r for r in doc["rows"] if not (r["method"] == method and r["sparsity"] == sp)]
            # this run measures the point again: its rows are no longer an earlier run's
            kept = [{**e, "points": [pt for pt in e["points"] if tuple(pt) != (method, sp)]} for e in doc.pop("earlier", [])]
            if any(e["points"] for e in kept):
                doc["earlier"] = [e for e in kept if e["points"]]
            own = {"samples": args.samples} if "samples" in METHOD_CONFIGS[method].field_names() else {}
            pcfg = prune_config(method, target_sparsity=sp, max_seq_len=args.max_seq_len, seed=args.seed,
                                threads=args.threads, **own)
            pres = prune(model, info, tuning, pcfg, device="cpu", progress=False, dev_before=ft["dev"])
            base = {"method": method, "sparsity": sp, "achieved": pres.report["achieved"]["encoder_params"],
                    "shape": pres.report["shape"], "prune_config": pcfg.to_dict()}
            doc["rows"].append({**base, "steps": 0, "val_accuracy": pres.report["dev_after"]["accuracy"],
                                "dev_accuracy": dev(pres.model, pres.info), "kl_to_teacher": None,
                                "wall_s": pres.report["wall_s"]})
            write(results, args.out, doc)
            for steps in args.steps:
                for lr in args.lrs:
                    dcfg = DistillConfig(max_steps=steps, epochs=float(math.ceil(steps * 32 / distil_rows)),  # max_steps ends it
                                         train_limit=distil_limit, lr=lr,
                                         max_seq_len=args.max_seq_len, seed=args.seed, threads=args.threads)
                    rres = recover(pres, model, info, distil_on, dcfg, device="cpu")
                    rec = rres.report["recovery"]
                    doc["rows"].append({**base, "steps": rec["steps"], "val_accuracy": rec["dev_after"]["accuracy"],
                                        "dev_accuracy": dev(rres.model, rres.info), "kl_before": rec["kl_before"],
                                        "kl_to_teacher": rec["kl_after"], "wall_s": rec["wall_s"], "config": dcfg.to_dict()})
                    mark_chosen(doc["rows"])
                    write(results, args.out, doc)
                    log.info("%s %.0f%% + %d steps at lr %g: val %.4f -> %.4f (teacher %.4f)", method, 100 * sp, steps, lr,
                             pres.report["dev_after"]["accuracy"], rec["dev_after"]["accuracy"], ft["dev"]["accuracy"])
    doc["wall_s"] = round(time.perf_counter() - t0, 1)
    write(results, args.out, doc)


if __name__ == "__main__":
    main()
