"""Diagnostic: is an exit threshold calibrated on the fp32 model right for its int8 bundle? Not CI.

Takes the dynamic model directory ``tools/bench/dynamic.py`` built (``<workdir>/<case>/model``), quantizes its base
to int8 as that benchmark's int8 variant does, and, on the same validation rows carved from the training split
(``edgenlp.dynamic.api.split_rows``) and on dev, traces both models eagerly (exit logits at every exit): the fp32
model's calibrated threshold applied to each, and a threshold calibrated on the int8 model itself to the same
maximum drop. Accuracy and FLOPs only (no latency). Writes ``<out>.json`` and ``<out>.md``.

    python tools/bench/dynamic_calibration.py --model /tmp/dyn21/bench/sst2/model --task sst2
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

from tools.bench.harness import RESULTS, Results  # noqa: E402


def run(model_dir: Path, task_name: str) -> dict:
    import torch

    from edgenlp.data.tasks import load_task
    from edgenlp.dynamic.api import load_dynamic, split_rows, trace_split
    from edgenlp.dynamic.calibrate import choose, exit_curve, static_cost
    from edgenlp.finetune.trainer import encode_split, load_tokenizer
    from edgenlp.models.registry import load_model
    from edgenlp.quantize.api import quantize_model
    from edgenlp.quantize.config import QuantizeConfig

    task = load_task(task_name)
    base, info = load_model(model_dir)
    cfg = [s for s in info.recipe if s.type == "dynamic"][-1].config
    qbase, _ = quantize_model(base, info, QuantizeConfig(scheme="int8"))
    models = {"fp32": load_dynamic(model_dir), "int8": load_dynamic(model_dir, base=qbase)}
    tok = load_tokenizer(info)
    pad = tok.pad_token_id or 0
    _, val_idx, split = split_rows(task, info, cfg)
    data = {"validation": encode_split(tok, task.train.take(val_idx), task.labels, max_len=cfg.max_seq_len),
            "dev": encode_split(tok, task.dev, task.labels, max_len=cfg.max_seq_len)}
    traces = {}
    for name, m in models.items():
        for part, d in data.items():
            with torch.no_grad():
                tr = trace_split(m, d, pad_id=pad)
            labels = np.asarray(d.labels)
            acc = float((tr.exit_logits[m.spec.num_layers].argmax(-1) == labels).mean())
            traces[name, part] = (tr, labels, acc, static_cost(m.shape, tr.tokens[:, 0], m.num_labels))
    rows = []
    for name, m in models.items():
        tr, labels, acc, cost = traces[name, "validation"]
        own, _ = choose(exit_curve(m.spec.rule, tr, labels, m.spec.exits, shape=m.shape, static_accuracy=acc,
                                   static_cost=cost), cfg.max_drop)
        recorded = ("fp32", models["fp32"].spec.threshold)  # what the int8 bundle of dynamic.py runs with
        for calibrated_on, thr in ((recorded,) if name == "fp32" else (recorded, (name, own.threshold))):
            for part in data:
                t2, l2, a2, c2 = traces[name, part]
                p = exit_curve(m.spec.rule, t2, l2, m.spec.exits, shape=m.shape, static_accuracy=a2, static_cost=c2,
                               thresholds=[thr])[0]
                rows.append({"model": name, "calibrated_on": calibrated_on, "threshold": float(thr), "split": part,
                             "static_accuracy": a2, "accuracy": p.accuracy, "drop_points": p.drop, "flops": p.cost,
                             "mean_exit_layer": p.mean_exit_layer})
    return {"model_dir": str(model_dir), "task": task_name, "rule": models["fp32"].spec.rule, "max_drop": cfg.max_drop,
            "split": split, "rows": rows}


def markdown(doc: dict) -> str:
    lines = ["# Exit threshold: calibrated on fp32 or on the int8 model (eager, accuracy and FLOPs only)", "",
             f"{doc['task']}, rule {doc['rule']}, maximum drop {doc['max_drop']} points on {doc['split']['val_rows']} "
             "validation rows carved from the training split; dev only reported.", "",
             "| model | threshold calibrated on | threshold | split | static acc | dynamic acc | drop (pts) | FLOPs vs static | mean exit layer |",
             "|---|---|---:|---|---:|---:|---:|---:|---:|"]
    for r in doc["rows"]:
        lines.append(f"| {r['model']} | {r['calibrated_on']} | {r['threshold']:.4f} | {r['split']} | {100 * r['static_accuracy']:.2f} | "
                     f"{100 * r['accuracy']:.2f} | {r['drop_points']:.2f} | {r['flops']:.3f} | {r['mean_exit_layer']:.2f} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", type=Path, required=True, help="A dynamic model directory (tools/bench/dynamic.py's).")
    ap.add_argument("--task", default="sst2")
    ap.add_argument("--out", type=Path, default=RESULTS / "dynamic-calibration")
    args = ap.parse_args()
    import torch

    torch.set_num_threads(2)
    doc = run(args.model, args.task)
    Results(script="dynamic_calibration", threads=2).write(args.out, doc, markdown(doc))


if __name__ == "__main__":
    main()
