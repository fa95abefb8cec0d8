"""Benchmark: pruning with and without recovery distillation on a fine-tuned MiniLM-L6, not CI.

1. Fine-tunes ``minilm-l6`` on a seeded subset of the task's training rows
   (full fine-tuning, ``--finetune-epochs``), the teacher; reused from
   ``--workdir`` on a rerun.
2. Prunes it with each ``--methods`` at each ``--sparsities`` (encoder
   parameters), without any fine-tuning (the pruned row).
3. Distils every pruned model from the teacher (:func:`edgenlp.prune.recover`)
   for each ``--epochs`` on the same training rows (the recovered rows).

Accuracy is on the full dev set, which no step trains or selects on. Writes
``<out>.json`` and ``<out>.md`` after every run, with the host and load average;
``python tools/readme.py`` renders the README's ``recovery`` section from it.

    nice -n 10 python tools/bench/recovery.py --task sst2 --train-limit 8000 --methods fast --sparsities 0.5 \\
        --epochs 1 2 --threads 1 --workdir /tmp/recovery-bench
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
import time  # noqa: E402

ROOT = _HERE.parents[1]
sys.path.insert(0, str(ROOT))

from tools.bench.harness import RESULTS, Results  # noqa: E402

log = logging.getLogger("bench.recovery")


def teacher(args, task, workdir: Path):
    """The fine-tuned teacher (model, info, finetune report), trained once per workdir."""
    from edgenlp.finetune.config import FinetuneConfig
    from edgenlp.finetune.trainer import finetune
    from edgenlp.models.registry import load_model

    out = workdir / "teacher"
    if not (out / "finetune.json").is_file():
        model, info = load_model("minilm-l6", labels=task.labels)
        cfg = FinetuneConfig(method="full", epochs=args.finetune_epochs,
                             max_seq_len=args.max_seq_len, threads=args.threads, seed=args.seed)
        res = finetune(model, info, task, cfg, device="cpu")
        res.save(out, info)
    model, info = load_model(out, labels=task.labels)
    return model, info, json.loads((out / "finetune.json").read_text())


def markdown(doc: dict) -> str:
    lines = [f"# Pruning with and without recovery distillation ({doc['task']}, MiniLM-L6)", "",
             f"Teacher: full fine-tuning, {doc['teacher']['epochs']} epoch(s) on {doc['train_rows']:,} training rows, "
             f"dev accuracy {100 * doc['teacher']['dev_accuracy']:.2f}%. Dev set: {doc['dev_rows']} rows.", "",
             "| method | sparsity (achieved) | recovery | dev accuracy | Δ vs teacher (points) | KL to teacher | wall time |",
             "|---|---:|---|---:|---:|---:|---:|"]
    t = doc["teacher"]["dev_accuracy"]
    for r in doc["rows"]:
        rec = "none" if not r["recovery_epochs"] else f"{r['recovery_epochs']:g} epoch(s), {r['steps']} steps"
        kl = "" if r.get("kl_to_teacher") is None else f"{r['kl_to_teacher']:.4f}"
        lines.append(f"| {r['method']} | {100 * r['sparsity']:.0f}% ({100 * r['achieved']:.1f}%) | {rec} | "
                     f"{100 * r['dev_accuracy']:.2f}% | {100 * (r['dev_accuracy'] - t):+.2f} | {kl} | {r['wall_s']:.0f} s |")
    lines += ["", doc.get("note", "")]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--task", default="sst2")
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--train-limit", type=int, default=8000)
    ap.add_argument("--finetune-epochs", type=int, default=1)
    ap.add_argument("--methods", nargs="+", default=["fast"])
    ap.add_argument("--sparsities", nargs="+", type=float, default=[0.5])
    ap.add_argument("--epochs", nargs="+", type=float, default=[1.0, 2.0], help="Recovery epochs (one row each).")
    ap.add_argument("--lr", type=float, default=None, help="Recovery learning rate (default: DistillConfig's).")
    ap.add_argument("--samples", type=int, default=1024, help="fast/importance: training rows that score the units.")
    ap.add_argument("--max-seq-len", type=int, default=64)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/recovery-bench"))
    ap.add_argument("--out", type=Path, default=RESULTS / "recovery")
    ap.add_argument("--note", default="")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")

    import torch

    from edgenlp.data.tasks import load_task
    from edgenlp.prune import DistillConfig, prune, prune_config, recover

    torch.set_num_threads(args.threads)
    results = Results(script="recovery", threads=args.threads)
    task = load_task(args.task, data_dir=args.data_dir)
    task_sub = task  # the teacher and every step train on the same seeded subset
    if args.train_limit:
        from dataclasses import replace

        task_sub = replace(task, train=task.train.sample(args.train_limit, seed=args.seed))
    args.workdir.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    model, info, ft = teacher(args, task_sub, args.workdir)
    doc = {"task": args.task, "train_rows": len(task_sub.train), "dev_rows": len(task.dev), "max_seq_len": args.max_seq_len,
           "teacher": {"dev_accuracy": ft["dev"]["accuracy"], "epochs": args.finetune_epochs,
                       "wall_s": ft.get("total_wall_s")},
           "rows": [], "note": args.note}
    for method in args.methods:
        for sp in args.sparsities:
            own = {"samples": args.samples} if method in ("fast", "importance") else {}
            pcfg = prune_config(method, target_sparsity=sp, max_seq_len=args.max_seq_len, seed=args.seed,
                                threads=args.threads, **own)
            pres = prune(model, info, task_sub, pcfg, device="cpu", progress=False, dev_before=ft["dev"])
            base = {"method": method, "sparsity": sp, "achieved": pres.report["achieved"]["encoder_params"],
                    "shape": pres.report["shape"]}
            doc["rows"].append({**base, "recovery_epochs": 0, "steps": 0, "dev_accuracy": pres.report["dev_after"]["accuracy"],
                                "kl_to_teacher": None, "wall_s": pres.report["wall_s"]})
            results.write(args.out, doc, markdown(doc))
            for ep in args.epochs:
                extra = {"lr": args.lr} if args.lr else {}
                dcfg = DistillConfig(epochs=ep, max_seq_len=args.max_seq_len, seed=args.seed, threads=args.threads, **extra)
                rres = recover(pres, model, info, task_sub, dcfg, device="cpu")
                rec = rres.report["recovery"]
                doc["rows"].append({**base, "recovery_epochs": ep, "steps": rec["steps"],
                                    "dev_accuracy": rec["dev_after"]["accuracy"], "kl_before": rec["kl_before"],
                                    "kl_to_teacher": rec["kl_after"], "wall_s": rec["wall_s"], "config": dcfg.to_dict()})
                results.write(args.out, doc, markdown(doc))
                log.info("%s %.0f%% + %g epoch(s): %.4f -> %.4f (teacher %.4f)", method, 100 * sp, ep,
                         pres.report["dev_after"]["accuracy"], rec["dev_after"]["accuracy"], ft["dev"]["accuracy"])
    doc["wall_s"] = round(time.perf_counter() - t0, 1)
    results.write(args.out, doc, markdown(doc))


if __name__ == "__main__":
    main()
