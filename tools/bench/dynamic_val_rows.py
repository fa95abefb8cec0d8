"""Diagnostic: how many validation rows does an exit threshold need? Not CI.

Takes the dynamic model directory ``tools/bench/dynamic.py`` built (``<workdir>/<case>/model``), traces it eagerly
once over its validation rows (carved from the training split by ``edgenlp.dynamic.api.split_rows``, as
``edgenlp dynamic`` drew them), then calibrates the exit threshold to the model's ``max_drop`` on random subsets of
those rows, ``--draws`` times per subset size, and scores each chosen threshold on all of them. The spread shows
what the calibration follows at each size: the threshold's own drop (on every validation row), its FLOPs, and the
standard error the subset reports. Dev is never read. Accuracy and FLOPs only (no latency). Writes ``<out>.json``
and ``<out>.md``.

    python tools/bench/dynamic_val_rows.py --model /tmp/dyn21/bench/sst2-8k-val/model --task sst2
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


def run(model_dir: Path, task_name: str, sizes: list[int], draws: int, seed: int) -> dict:
    from edgenlp.data.tasks import load_task
    from edgenlp.dynamic.api import load_dynamic, split_rows, trace_split
    from edgenlp.dynamic.calibrate import choose, exit_curve, static_cost
    from edgenlp.dynamic.model import MaskedTrace
    from edgenlp.finetune.trainer import encode_split, load_tokenizer
    from edgenlp.models.registry import load_model

    task = load_task(task_name)
    _, info = load_model(model_dir)
    cfg = [s for s in info.recipe if s.type == "dynamic"][-1].config
    model = load_dynamic(model_dir).eval()
    tok = load_tokenizer(info)
    _, val_idx, split = split_rows(task, info, cfg)
    data = encode_split(tok, task.train.take(val_idx), task.labels, max_len=cfg.max_seq_len)
    labels = np.asarray(data.labels)
    trace = trace_split(model, data, pad_id=tok.pad_token_id or 0)
    spec, L = model.spec, model.spec.num_layers

    def curve(tr, y, thresholds=None):
        acc = float((tr.exit_logits[L].argmax(-1) == y).mean())
        return exit_curve(spec.rule, tr, y, spec.exits, shape=model.shape, static_accuracy=acc,
                          static_cost=static_cost(model.shape, tr.tokens[:, 0], model.num_labels), thresholds=thresholds)

    whole = dict(static_accuracy=float((trace.exit_logits[L].argmax(-1) == labels).mean()),
                 static_cost=static_cost(model.shape, trace.tokens[:, 0], model.num_labels))  # once, for every draw

    rng = np.random.default_rng(seed)
    rows = []
    for n in sorted(s for s in sizes if s <= len(labels)):
        picks = []
        for _ in range(draws if n < len(labels) else 1):
            idx = np.sort(rng.choice(len(labels), n, replace=False))
            sub = MaskedTrace({l: z[idx] for l, z in trace.exit_logits.items()}, trace.tokens[idx])
            point, _ = choose(curve(sub, labels[idx]), cfg.max_drop)
            on_all = exit_curve(spec.rule, trace, labels, spec.exits, shape=model.shape, thresholds=[point.threshold],
                                **whole)[0]
            picks.append({"threshold": point.threshold, "drop": point.drop, "drop_se": point.drop_se, "cost": point.cost,
                          "drop_on_all": on_all.drop, "cost_on_all": on_all.cost})

        def span(key):
            v = np.array([p[key] for p in picks])
            return {"min": float(v.min()), "median": float(np.median(v)), "max": float(v.max())}

        rows.append({"rows": n, "draws": len(picks), **{k: span(k) for k in ("drop_se", "cost_on_all", "drop_on_all")},
                     "picks": picks})
    return {"model": str(model_dir), "task": task_name, "rule": spec.rule, "max_drop": cfg.max_drop, "split": split,
            "validation_rows": int(len(labels)), "seed": seed, "rows": rows}


def markdown(doc: dict) -> str:
    lines = ["# Exit threshold: how many validation rows it needs (eager, accuracy and FLOPs only)", "",
             f"{doc['task']}, rule {doc['rule']}, maximum drop {doc['max_drop']} points. The threshold is calibrated on "
             f"random subsets of the {doc['validation_rows']} validation rows carved from the training split, then "
             "scored on all of them (dev is never read): how far the chosen threshold's drop and FLOPs move with the "
             "rows it was chosen on.", "",
             "| rows | draws | standard error of the drop (pts, median) | chosen FLOPs vs static (min – median – max) "
             "| drop on all rows (pts, min – median – max) |",
             "|---:|---:|---:|---|---|"]
    for r in doc["rows"]:
        c, d = r["cost_on_all"], r["drop_on_all"]
        lines.append(f"| {r['rows']} | {r['draws']} | {r['drop_se']['median']:.2f} | {c['min']:.2f} – {c['median']:.2f} – "
                     f"{c['max']:.2f} | {d['min']:.2f} – {d['median']:.2f} – {d['max']:.2f} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", type=Path, required=True, help="A dynamic model directory (tools/bench/dynamic.py's).")
    ap.add_argument("--task", default="sst2")
    ap.add_argument("--sizes", type=int, nargs="+", default=[500, 1000, 2000, 4000, 8000])
    ap.add_argument("--draws", type=int, default=30, help="Random subsets per size.")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=RESULTS / "dynamic-val-rows")
    args = ap.parse_args()
    import torch

    torch.set_num_threads(2)
    doc = run(args.model, args.task, args.sizes, args.draws, args.seed)
    Results(script="dynamic_val_rows", threads=2).write(args.out, doc, markdown(doc))


if __name__ == "__main__":
    main()
