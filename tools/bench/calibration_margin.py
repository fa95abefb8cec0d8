"""Diagnostic: the exit threshold's calibration margin (``DynamicConfig.margin_se``), checked on rows it never saw. Not CI.

The calibration picks the cheapest of ~60 thresholds whose validation drop fits ``max_drop``. Among many
thresholds measured on the same noisy rows, the one that looks cheapest within the budget is more often than not
one whose drop was measured low (the winner's curse), so the drop it brings to new sentences is larger than the
drop it was chosen with. ``margin_se`` asks for ``drop + k x SE <= max_drop`` instead.

This script takes the dynamic model directory ``tools/bench/dynamic.py`` built (``<workdir>/<case>/model``; its
token thresholds stay as built) and only training rows:

- ``pool``: the model's validation rows plus training rows neither its fine-tuning nor ``make_dynamic``'s training
  used (``edgenlp.dynamic.api.split_rows``'s bookkeeping), up to ``--pool-rows``;
- ``check``: ``--check-rows`` of the pool, set aside; never used to choose the exit threshold. They may include the
  model's own validation rows (a sixth of them with the defaults), on which its token scale was chosen: with token
  pruning on, the drop on the check rows is, if anything, optimistic;
- ``--draws`` calibration sets of ``--calib-rows`` rows from the rest of the pool. On each, the threshold is chosen for
  every margin in ``--margins`` (``edgenlp.dynamic.calibrate.choose``, drop and SE paired against the static model,
  as ``make_dynamic`` does), then scored on the check rows: its drop there, and its FLOPs.

It traces every row used once with the model's token thresholds and once static (eager, masked), then everything
is NumPy. With ``--dev``, each margin's threshold chosen on the first calibration set is also scored on dev (reported,
never used to choose). Writes ``<out>.json`` and ``<out>.md``.

    python tools/bench/calibration_margin.py --model /tmp/imdb/bench/imdb128-ltp-exits/model --task imdb --dev
    python tools/bench/calibration_margin.py ... --no-tokens   # the exits alone (token pruning switched off)
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


def pool_rows(task, info, cfg, limit: int, seed: int) -> tuple[list[int], dict]:
    """The model's validation rows, then training rows unseen by its fine-tuning and by make_dynamic's training."""
    import random

    from edgenlp.dynamic.api import finetuning_rows, split_rows

    train, val, note = split_rows(task, info, cfg)
    tuned = finetuning_rows(task, info)
    if tuned is None:
        raise SystemExit("error: the fine-tuning used every training row: no unseen rows to check on")
    seen = set(train) | set(val) | tuned
    extra = [i for i in range(len(task.train)) if i not in seen and len(task.train.texts[i].split()) >= cfg.val_min_words]
    random.Random(seed).shuffle(extra)
    rows = list(val) + extra[: max(0, limit - len(val))]
    return rows, {**note, "pool_rows": len(rows), "extra_unseen_rows": len(rows) - len(val)}


def run(model_dir: Path, task_name: str, *, margins: list[float], calib_rows: int, check_rows: int, pool_limit: int,
        draws: int, seed: int, dev: bool, tokens: bool = True) -> dict:
    from edgenlp.data.tasks import load_task
    from edgenlp.dynamic.api import load_dynamic, trace_split
    from edgenlp.dynamic.calibrate import choose, exit_curve, static_cost
    from edgenlp.dynamic.model import MaskedTrace
    from edgenlp.finetune.trainer import encode_split, load_tokenizer
    from edgenlp.models.registry import load_model

    task = load_task(task_name)
    _, info = load_model(model_dir)
    cfg = [s for s in info.recipe if s.type == "dynamic"][-1].config
    model = load_dynamic(model_dir).eval()
    spec, L = model.spec, model.spec.num_layers
    tok = load_tokenizer(info)
    pad = tok.pad_token_id or 0
    rows, note = pool_rows(task, info, cfg, pool_limit, seed)
    if check_rows + calib_rows > len(rows):
        raise SystemExit(f"error: {len(rows)} pool rows hold fewer than --check-rows {check_rows} + --calib-rows {calib_rows}")

    def traced(split):
        data = encode_split(tok, split, task.labels, max_len=cfg.max_seq_len)
        y = np.asarray(data.labels)
        st = trace_split(model, data, pad_id=pad, tokens="none")
        tr = trace_split(model, data, pad_id=pad) if tokens and spec.tokens != "none" else st
        return tr, st.exit_logits[L].argmax(-1) == y, static_cost(model.shape, st.tokens[:, 0], model.num_labels), y

    trace, static_right, _, labels = traced(task.train.take(rows))

    def sub(idx):
        return MaskedTrace({l: z[idx] for l, z in trace.exit_logits.items()}, trace.tokens[idx])

    def scored(tr, right, y, s_cost, thresholds=None):
        return exit_curve(spec.rule, tr, y, spec.exits, shape=model.shape, static_accuracy=float(right.mean()),
                          static_cost=s_cost, thresholds=thresholds, reference_right=right)

    rng = np.random.default_rng(seed)
    order = rng.permutation(len(rows))
    check, rest = order[:check_rows], order[check_rows:]
    c_cost = static_cost(model.shape, trace.tokens[check, 0], model.num_labels)  # static FLOPs: every token, every layer
    picks = {k: [] for k in margins}
    for d in range(draws):
        idx = np.sort(rng.choice(rest, calib_rows, replace=False))
        curve = scored(sub(idx), static_right[idx], labels[idx],
                       static_cost(model.shape, trace.tokens[idx, 0], model.num_labels))
        for k in margins:
            point, feasible = choose(curve, cfg.max_drop, k)
            on_check = scored(sub(check), static_right[check], labels[check], c_cost, [point.threshold])[0]
            picks[k].append({"draw": d, "threshold": point.threshold, "feasible": feasible, "drop": point.drop,
                             "drop_se": point.drop_se, "cost": point.cost, "check_drop": on_check.drop,
                             "check_drop_se": on_check.drop_se, "check_cost": on_check.cost,
                             "check_mean_exit_layer": on_check.mean_exit_layer})
    out_rows = []
    for k in margins:
        p = picks[k]

        def stat(key):
            v = np.array([x[key] for x in p])
            return {"mean": float(v.mean()), "median": float(np.median(v)), "min": float(v.min()), "max": float(v.max())}

        out_rows.append({"margin_se": k, "draws": len(p), **{key: stat(key) for key in
                                                             ("drop", "drop_se", "check_drop", "check_cost")},
                         "over_budget_on_check": int(sum(x["check_drop"] > cfg.max_drop + 1e-9 for x in p)),
                         "feasible": int(sum(x["feasible"] for x in p)),
                         "picks": p})
    doc = {"model": str(model_dir), "task": task_name, "rule": spec.rule, "max_drop": cfg.max_drop,
           "tokens": spec.tokens if tokens else "none", "calib_rows": calib_rows, "check_rows": check_rows, "draws": draws, "seed": seed,
           "split": note, "margins": out_rows}
    if dev:
        tr, right, s_cost, y = traced(task.dev)
        doc["dev"] = {"rows": int(len(y)), "static_accuracy": float(right.mean()), "note": "the threshold each margin "
                      "chose on the first calibration set, scored on dev (reported only)",
                      "margins": [{"margin_se": r["margin_se"], **scored(tr, right, y, s_cost,
                                                                          [r["picks"][0]["threshold"]])[0].to_dict()}
                                  for r in out_rows]}
    return doc


def margin_table(doc: dict) -> list[str]:
    lines = ["| k (margin, SE) | a threshold fit | drop where chosen (pts, mean) | its SE (mean) | drop on check rows "
             f"(pts, mean; min – max) | over {doc['max_drop']} on check | FLOPs vs static on check (mean; min – max) |",
             "|---:|---:|---:|---:|---|---:|---|"]
    for r in doc["margins"]:
        d, c = r["check_drop"], r["check_cost"]
        lines.append(f"| {r['margin_se']:g} | {r['feasible']}/{r['draws']} | {r['drop']['mean']:.2f} | "
                     f"{r['drop_se']['mean']:.2f} | {d['mean']:.2f} ({d['min']:.2f} – {d['max']:.2f}) | "
                     f"{r['over_budget_on_check']}/{r['draws']} | {c['mean']:.2f} ({c['min']:.2f} – {c['max']:.2f}) |")
    return lines


def dev_table(doc: dict) -> list[str]:
    lines = ["| k | threshold | dev drop ± SE (pts) | FLOPs vs static | mean exit layer |", "|---:|---:|---|---:|---:|"]
    for m in doc["dev"]["margins"]:
        lines.append(f"| {m['margin_se']:g} | {m['threshold']:.4g} | {m['drop']:.2f} ± {m['drop_se']:.2f} | "
                     f"{m['cost']:.2f} | {m['mean_exit_layer']:.2f} |")
    return lines


def describe(doc: dict) -> str:
    return (f"{doc['task']} (tokens: {doc['tokens']}), rule {doc['rule']}, maximum drop {doc['max_drop']} points, drops "
            f"against the static model. {doc['draws']} calibration sets of {doc['calib_rows']} training rows each "
            f"choose the threshold with `drop + k x SE <= max_drop`; {doc['check_rows']} other training rows (unseen "
            "by the fine-tuning, the dynamic training and every calibration set) score it. Where no threshold fits, "
            "the most accurate one is taken."
            + (" The check rows may include the model's own validation rows, on which its token scale was chosen, so "
               "their drop is, if anything, optimistic." if doc["tokens"] != "none" else ""))


def markdown(doc: dict) -> str:
    lines = ["# Exit threshold: the calibration margin, checked on training rows it never saw (eager, accuracy and "
             "FLOPs)", "", describe(doc), "", *margin_table(doc)]
    if "dev" in doc:
        dv = doc["dev"]
        lines += ["", f"Dev ({dv['rows']} rows, static accuracy {100 * dv['static_accuracy']:.2f}%; reported only): "
                  "the threshold each margin chose on the first calibration set.", "", *dev_table(doc)]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", type=Path, required=True, help="A dynamic model directory (tools/bench/dynamic.py's).")
    ap.add_argument("--task", default="imdb")
    ap.add_argument("--margins", type=float, nargs="+", default=[0.0, 0.5, 1.0, 2.0])
    ap.add_argument("--calib-rows", type=int, default=1000)
    ap.add_argument("--check-rows", type=int, default=3000)
    ap.add_argument("--pool-rows", type=int, default=6000, help="Validation rows plus unseen training rows, at most.")
    ap.add_argument("--draws", type=int, default=30)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dev", action="store_true", help="Also score the first draw's thresholds on dev (reported only).")
    ap.add_argument("--no-tokens", action="store_true", help="The exits alone: the model's token pruning switched off.")
    ap.add_argument("--out", type=Path, default=RESULTS / "calibration-margin")
    args = ap.parse_args()
    import torch

    torch.set_num_threads(2)
    doc = run(args.model, args.task, margins=args.margins, calib_rows=args.calib_rows, check_rows=args.check_rows,
              pool_limit=args.pool_rows, draws=args.draws, seed=args.seed, dev=args.dev, tokens=not args.no_tokens)
    Results(script="calibration_margin", threads=2).write(args.out, doc, markdown(doc))


if __name__ == "__main__":
    main()
