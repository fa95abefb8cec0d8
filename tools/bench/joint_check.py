"""Diagnostic: dynamic models scored on training rows none of them saw, against one static reference. Not CI.

``tools/bench/dynamic.py`` reports a dynamic bundle's drop on dev. When two ways of building the dynamic model are
compared there (the frozen backbone against ``--joint`` training, say), choosing between them on dev would make
dev a tuning set. This script asks the same question on training rows instead:

- ``--models``: dynamic model directories (``<workdir>/<case>/model``), used as built: their exit threshold and
  token thresholds are the ones ``make_dynamic`` chose;
- ``--reference``: the static model every drop is measured against (the fine-tuned model the dynamic ones were
  made from);
- rows: training rows of at least the models' ``val_min_words`` words that the reference's fine-tuning did not
  train on and that no model's ``make_dynamic`` trained or calibrated on (``edgenlp.dynamic.api.split_rows``'s
  bookkeeping), shuffled with ``--seed``, the first ``--rows``.

Per model: accuracy with exits and token pruning as built, the drop against the reference's static predictions
with its paired SE, its own static accuracy (exits and token pruning off), FLOPs against the static model and the
mean exit layer, all eager. Writes ``<out>.json`` and ``<out>.md``::

    python tools/bench/joint_check.py --reference /tmp/imdb/ft --task imdb \\
        --models /tmp/imdb/bench/imdb128-ltp-exits-m1-3k/model /tmp/imdb/bench/imdb128-ltp-exits-joint/model
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tools.bench.harness import RESULTS, Results  # noqa: E402

log = logging.getLogger("joint_check")


def unseen_rows(task, ref_info, model_infos, *, limit: int, seed: int) -> tuple[list[int], dict]:
    """Training rows the reference's fine-tuning and every model's make_dynamic left alone (long enough to be
    validation rows), shuffled, at most ``limit``."""
    import random

    from edgenlp.dynamic.api import finetuning_rows, split_rows

    seen = set(finetuning_rows(task, ref_info) or ())
    min_words = 0
    for info in model_infos:
        cfg = [s for s in info.recipe if s.type == "dynamic"][-1].config
        train, val, _ = split_rows(task, info, cfg)
        seen |= set(train) | set(val) | set(finetuning_rows(task, info) or ())
        min_words = max(min_words, cfg.val_min_words)
    rows = [i for i in range(len(task.train)) if i not in seen and len(task.train.texts[i].split()) >= min_words]
    random.Random(seed).shuffle(rows)
    return sorted(rows[:limit]), {"unseen_rows": len(rows), "min_words": min_words}


def run(models: list[Path], reference: Path, task_name: str, *, rows: int, seed: int) -> dict:
    import torch

    from edgenlp.data.tasks import load_task
    from edgenlp.dynamic.api import load_dynamic, trace_split
    from edgenlp.dynamic.calibrate import exit_curve, exit_scores, first_exit, paired_se, static_cost
    from edgenlp.finetune.trainer import encode_split, load_tokenizer, predict
    from edgenlp.models.registry import load_model

    task = load_task(task_name)
    ref, ref_info = load_model(reference)
    infos = [load_model(m)[1] for m in models]
    idx, note = unseen_rows(task, ref_info, infos, limit=rows, seed=seed)
    cfgs = [[s for s in info.recipe if s.type == "dynamic"][-1].config for info in infos]
    max_len = cfgs[0].max_seq_len
    if any(c.max_seq_len != max_len for c in cfgs):
        raise SystemExit("error: the models were made at different lengths; compare models of one length")
    tok = load_tokenizer(ref_info)
    pad = tok.pad_token_id or 0
    data = encode_split(tok, task.train.take(idx), task.labels, max_len=max_len)
    y = np.asarray(data.labels)
    t0 = time.perf_counter()
    ref_right = np.asarray(predict(ref, data, batch_size=64, pad_id=pad)) == y
    log.info("reference: %.2f%% on %d rows (%.0f s)", 100 * ref_right.mean(), len(y), time.perf_counter() - t0)
    out, rights = [], []
    for path, cfg in zip(models, cfgs):
        t0 = time.perf_counter()
        dyn = load_dynamic(path).eval()
        spec = dyn.spec
        with torch.no_grad():
            trace = trace_split(dyn, data, pad_id=pad)
            own = trace_split(dyn, data, pad_id=pad, tokens="none") if spec.tokens != "none" else trace
        own_right = own.exit_logits[spec.num_layers].argmax(-1) == y
        s_cost = static_cost(dyn.shape, trace.tokens[:, 0], dyn.num_labels)
        point = exit_curve(spec.rule, trace, y, spec.exits, shape=dyn.shape, static_accuracy=float(ref_right.mean()),
                           static_cost=s_cost, thresholds=[spec.threshold], reference_right=ref_right)[0]
        own_pt = exit_curve(spec.rule, trace, y, spec.exits, shape=dyn.shape, static_accuracy=float(own_right.mean()),
                            static_cost=s_cost, thresholds=[spec.threshold], reference_right=own_right)[0]
        chosen = first_exit(spec.rule, exit_scores(spec.rule, trace, spec.exits), spec.threshold)
        preds = np.stack([trace.exit_logits[l].argmax(-1) for l in spec.exits], 1)
        right = preds[np.arange(len(y)), chosen] == y
        rights.append(right)
        assert abs(float(right.mean()) - point.accuracy) < 1e-9, "per-row predictions disagree with exit_curve"
        rec = {"model": str(path), "joint": bool(getattr(cfg, "joint", False)), "rule": spec.rule,
               "threshold": spec.threshold, "tokens": spec.tokens, "accuracy": 100 * point.accuracy,
               "drop": point.drop, "drop_se": point.drop_se, "static_accuracy": 100 * float(own_right.mean()),
               "static_vs_reference": 100 * float(own_right.mean() - ref_right.mean()),
               "static_vs_reference_se": paired_se(ref_right, own_right), "drop_vs_own_static": own_pt.drop,
               "drop_vs_own_static_se": own_pt.drop_se, "flops_vs_static": point.cost,
               "mean_exit_layer": point.mean_exit_layer, "seconds": round(time.perf_counter() - t0, 1),
               # against the first model, paired per row: what separates two ways of building the dynamic model
               "vs_first": 100 * float(right.mean() - rights[0].mean()), "vs_first_se": paired_se(rights[0], right)}
        log.info("%s", rec)
        out.append(rec)
    return {"task": task_name, "reference": str(reference), "reference_accuracy": 100 * float(ref_right.mean()),
            "rows": len(idx), "seed": seed, "max_seq_len": max_len, "split": note, "models": out}


def markdown(doc: dict) -> str:
    lines = ["# Dynamic models on training rows none of them saw", "",
             f"{doc['task']}, {doc['rows']} training rows"
             + (f" of at least {doc['split']['min_words']} words" if doc["split"]["min_words"] else "") + " (of "
             f"{doc['split']['unseen_rows']} unseen by the reference's fine-tuning and by every model's dynamic "
             f"training and calibration), length {doc['max_seq_len']}, eager. Drops are paired per row against the "
             f"reference `{Path(doc['reference']).name}` ({doc['reference_accuracy']:.2f}% on these rows); each model "
             "runs with the thresholds it was built with.", "",
             "| model | joint | accuracy (%) | drop ± SE vs the reference (pts) | its static vs the reference (pts) | "
             "drop vs its own static | FLOPs vs static | mean exit layer | accuracy vs the first model (pts, paired) |",
             "|---|---|---:|---|---|---|---:|---:|---|"]
    for i, m in enumerate(doc["models"]):
        lines.append(f"| {Path(m['model']).parent.name} | {'yes' if m['joint'] else 'no'} | {m['accuracy']:.2f} | "
                     f"{m['drop']:.2f} ± {m['drop_se']:.2f} | {m['static_vs_reference']:+.2f} ± "
                     f"{m['static_vs_reference_se']:.2f} | {m['drop_vs_own_static']:.2f} ± "
                     f"{m['drop_vs_own_static_se']:.2f} | {m['flops_vs_static']:.2f} | {m['mean_exit_layer']:.2f} | "
                     + ("–" if i == 0 else f"{m['vs_first']:+.2f} ± {m['vs_first_se']:.2f}") + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", type=Path, nargs="+", required=True, help="Dynamic model directories.")
    ap.add_argument("--reference", type=Path, required=True, help="The static model drops are measured against.")
    ap.add_argument("--task", default="imdb")
    ap.add_argument("--rows", type=int, default=3000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", type=Path, default=RESULTS / "joint-check")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    import torch

    torch.set_num_threads(args.threads)
    doc = run(args.models, args.reference, args.task, rows=args.rows, seed=args.seed)
    Results(script="joint_check", threads=args.threads).write(args.out, doc, markdown(doc))


if __name__ == "__main__":
    main()
