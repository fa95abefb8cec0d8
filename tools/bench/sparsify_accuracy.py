"""Benchmark: accuracy of block-sparse models after `sparsify` (GMP under distillation), as int8 bundles (not CI).

Issue 23, stage 2: the latency side is ``sparse_bundles.py`` (a pattern's
latency does not depend on what it learned); this is the accuracy side. From
one fine-tuned teacher, each sparsity runs :func:`edgenlp.prune.sparsity.sparsify`
at the given step budget on the task's training rows, then the model is
quantized to int8 (its sparse linears become ``edgenlp::sparse_linear_qd8``),
exported, and evaluated through the ExecuTorch runtime on the dev split,
next to the teacher's own int8 bundle. Nothing is chosen on dev: the
sparsities and the budget are fixed up front.

    python tools/bench/sparsify_accuracy.py --teacher out/compress/finetune/model --task sst2 \\
        --sparsities 0.8 0.7 --max-steps 250 --workdir /tmp/spa

Writes ``results/sparsify-accuracy.{json,md}`` after every run.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tools.bench.harness import RESULTS, Results  # noqa: E402

log = logging.getLogger("bench.sparsify_accuracy")


def int8_bundle(model, info, task, out: Path, seq: int) -> dict:
    """Quantize to int8, export model.pte, evaluate dev through ExecuTorch; the bundle's accuracy and sparse ops."""
    from edgenlp.bundle import Bundle
    from edgenlp.export.api import ExportConfig, export_bundle
    from edgenlp.quantize.api import quantize_model
    from edgenlp.quantize.config import QuantizeConfig
    from edgenlp.run.base import get_runner
    from edgenlp.run.evaluate import evaluate_split

    if not (out / "manifest.json").is_file():
        q, qinfo = quantize_model(model, info, QuantizeConfig(scheme="int8"))
        export_bundle(q, qinfo, out, task=task, config=ExportConfig(formats=("pte",), max_seq_len=seq))
    b = Bundle.open(out)
    with get_runner(out, runtime="executorch", threads=1) as runner:
        metrics = evaluate_split(runner, task.dev)
    sparse = b.manifest.get("sparse") or {}
    return {"dev": metrics, "sparse_linears": sum(1 for r in sparse.get("linears", {}).values() if r.get("op")),
            "pte_mb": round((out / "model.pte").stat().st_size / 1e6, 2)}


def markdown(doc: dict) -> str:
    lines = ["# Block-sparse models after `sparsify`, as int8 bundles", "",
             f"Teacher: {doc['teacher']} on {doc['task']}; every run distils from it for {doc['max_steps']} steps "
             f"(batch {doc['batch_size']}, length {doc['max_seq_len']}, {doc['threads']} thread), the sparsity rising "
             "along the GMP schedule over the first 70% of the steps. Accuracy: the int8 bundle's through the "
             f"ExecuTorch runtime on the {doc['dev_rows']} dev rows (nothing is chosen on them).", "",
             "| model | block sparsity | sparse int8 linears | dev accuracy (int8 bundle) | Δ vs teacher's int8 bundle "
             "| dev before → after distillation (fp32, eager) | train s |",
             "|---|---:|---:|---:|---:|---|---:|"]
    base = doc["teacher_bundle"]["dev"]["accuracy"]
    lines.append(f"| teacher | 0% | 0 | {100 * base:.2f}% | | | |")
    for r in doc["runs"]:
        acc = r["bundle"]["dev"]["accuracy"]
        d = r["distill"]
        lines.append(f"| {r['block']} {100 * r['sparsity']:.0f}% | {100 * r['mean_sparsity']:.1f}% | "
                     f"{r['bundle']['sparse_linears']} | {100 * acc:.2f}% | {100 * (acc - base):+.2f} | "
                     f"{100 * d['dev_before']['accuracy']:.2f}% → {100 * d['dev_after']['accuracy']:.2f}% | "
                     f"{d['train_s']:.0f} |")
    within = [f"{100 * r['sparsity']:.0f}%" for r in doc["runs"]
              if 100 * (base - r["bundle"]["dev"]["accuracy"]) <= 1.0]
    if doc["runs"]:
        lines += ["", f"- Within 1 point of the teacher's int8 bundle at this budget: {', '.join(within) or 'none'}."]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--teacher", required=True, help="A fine-tuned model directory.")
    p.add_argument("--teacher-label", default=None, help="How the report names the teacher (default: its path).")
    p.add_argument("--task", default="sst2")
    p.add_argument("--sparsities", nargs="+", type=float, default=[0.8, 0.7])
    p.add_argument("--block", default="1x4", choices=["1x4", "1x8", "4x1"])
    p.add_argument("--max-steps", type=int, default=250)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--max-seq-len", type=int, default=64)
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--workdir", required=True)
    p.add_argument("--out", default=str(RESULTS / "sparsify-accuracy"))
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    import torch

    from edgenlp.data.tasks import load_task
    from edgenlp.models.registry import load_model
    from edgenlp.prune.config import SparsifyConfig
    from edgenlp.prune.sparsity import sparsify

    torch.set_num_threads(args.threads)
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    res = Results(script="sparsify_accuracy", threads=args.threads)
    task = load_task(args.task)
    teacher, tinfo = load_model(args.teacher)
    doc = {"teacher": args.teacher_label or args.teacher, "task": args.task, "max_steps": args.max_steps, "batch_size": args.batch_size,
           "max_seq_len": args.max_seq_len, "threads": args.threads, "lr": args.lr, "dev_rows": len(task.dev), "runs": []}
    doc["teacher_bundle"] = int8_bundle(teacher, tinfo, task, work / "teacher-int8", 128)
    res.write(Path(args.out), doc, markdown(doc))
    for sp in args.sparsities:
        cfg = SparsifyConfig(sparsity=sp, block=args.block, epochs=100.0, max_steps=args.max_steps, lr=args.lr,
                             batch_size=args.batch_size, max_seq_len=args.max_seq_len, threads=args.threads)
        t0 = time.perf_counter()
        s = sparsify(teacher, tinfo, task, cfg, device="cpu")
        s.save(work / f"sparse-{round(100 * sp)}")
        bundle = int8_bundle(s.model, s.info, task, work / f"sparse-{round(100 * sp)}-int8", 128)
        doc["runs"].append({"sparsity": sp, "block": args.block, "mean_sparsity": s.report["mean_sparsity"],
                            "distill": s.report["distill"], "bundle": bundle, "wall_s": round(time.perf_counter() - t0, 1)})
        res.write(Path(args.out), doc, markdown(doc))
        log.info("%s", markdown(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
