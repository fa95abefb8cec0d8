"""Build the planner's accuracy prior (``targets/accuracy-prior.json``) from measured benchmark results.

Every row of the prior is read from a results file under ``tools/bench/results/``
and names it, with the locator that finds the number there (task, method,
target sparsity; or the two quantization variants whose accuracies differ by
the row's drop). No number is typed here: rerun this after a benchmark rerun.

* pruning: ``prune.json`` (``fast``, ``importance``), ``prune-cofi.json``
  (CoFi at its short budget) and ``prune-cofi-compress.json`` (CoFi at 5x that
  budget, the full preset's, from the teachers ``compress`` fine-tunes;
  ``prune-cofi-longer.json``, SST-2 at 50% from a weaker teacher, is no longer
  read): the drop in points of each (method, target sparsity) per task,
  with the budget it was measured at (the prune config's knobs that set how
  much data and training it spent; ``compress`` presets spend exactly these);
* pruning then recovery distillation: ``recovery.json`` (the short recovery) and
  ``recovery-1200-compress.json`` (the long one, from the teachers ``compress``
  fine-tunes; ``recovery-1200.json``, the same from weaker teachers, is no
  longer read) (``tools/bench/recovery.py``, one teacher per task and file):
  the drop of each (method, target sparsity) after the recovery whose learning rate that run chose on its validation
  split (the row marked ``chosen``), measured on that validation split (rows
  held out of train: what ``compress``'s measured planning checks a
  candidate on; the other rows are dev drops, their benchmarks hold no
  validation split), at the pruning budget plus the recovery's
  (``recovery``: :meth:`edgenlp.prune.config.DistillConfig.budget`);
* quantization: ``quantize.json``: int8 and int4 linears against fp32, an
  int8 / int4 word table added to int8 / int4 linears, vocabulary trimming
  added to int4 linears with an int4 table; accuracy through the ExecuTorch
  bundle;
* block sparsity: ``sparsify-accuracy.json`` (``tools/bench/sparsify_accuracy.py``):
  ``sparsify`` at each fraction of zero blocks, the int8 bundle's dev accuracy
  against the teacher's int8 bundle, at the budget it ran (block, steps,
  batch, length, learning rate).

A row's ``drop`` is the mean over the tasks it was measured on.

    PYTHONPATH=$PWD python tools/bench/accuracy_prior.py            # rewrites targets/accuracy-prior.json
    PYTHONPATH=$PWD python tools/bench/accuracy_prior.py --check    # exit 1 if the file is out of date
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "tools" / "bench" / "results"
OUT = REPO / "targets" / "accuracy-prior.json"
SCHEMA = "edgenlp.accuracy-prior/1"

# results file -> the pruning methods read from it (each file measured one budget per method)
# CoFi at the full preset's budget is read from prune-cofi-compress.json (the teachers compress fine-tunes, both tasks
# at 50% and 70%) and no longer from prune-cofi-longer.json (SST-2 50% only, from a weaker teacher at 83.72%), as the
# long recovery's rows moved to compress's own teachers
PRUNE_FILES = {"prune.json": ("fast", "importance"), "prune-cofi.json": ("cofi",), "prune-cofi-compress.json": ("cofi",)}
# the prune config knobs that set a method's budget (how much data and training it spends)
BUDGET_KEYS = {
    "fast": ("samples", "max_seq_len", "epochs", "finetune_epochs"),
    "importance": ("samples", "iterations", "max_seq_len", "epochs", "finetune_epochs"),
    "cofi": ("train_limit", "epochs", "finetune_epochs", "max_seq_len", "batch_size"),
}
# quantization rows: (kind, value, variant, against) in quantize.json
QUANT_ROWS = (
    ("bits", "int8", "int8", "fp32"),
    ("bits", "int4", "int4", "fp32"),
    ("embeddings", "int8", "int8+emb8", "int8"),
    ("embeddings", "int4", "int4+emb4", "int4"),
    ("trim_vocab", True, "int4+emb4+trim", "int4+emb4"),
)
DEFAULT_BUDGET_LENGTHS = {"cofi": (2.0, 1.0), "fast": (0.0, 0.0), "importance": (0.0, 0.0)}  # PruneConfig's None = these


def budget_of(method: str, config: dict) -> dict:
    """The budget knobs of a prune config as it ran (``epochs``/``finetune_epochs`` None resolved to the method's defaults)."""
    out = {}
    for k in BUDGET_KEYS[method]:
        v = config.get(k)
        if v is None and k in ("epochs", "finetune_epochs"):
            v = DEFAULT_BUDGET_LENGTHS[method][0 if k == "epochs" else 1]
        out[k] = float(v) if k in ("epochs", "finetune_epochs") else v
    return out


def prune_rows() -> list[dict]:
    rows: dict[tuple, dict] = {}
    for fname, methods in PRUNE_FILES.items():
        doc = json.loads((RESULTS / fname).read_text())
        for r in doc["rows"]:
            if r["method"] not in methods:
                continue
            run = doc["tasks"][r["task"]]["runs"][f"{r['method']}-{round(100 * r['target'])}"]
            budget = budget_of(r["method"], run["report"]["config"])
            key = (r["method"], float(r["target"]), json.dumps(budget, sort_keys=True))
            row = rows.setdefault(key, {"method": r["method"], "sparsity": float(r["target"]), "budget": budget, "measured": {},
                                        "source": f"tools/bench/results/{fname}"})  # fmt: skip
            row["measured"][r["task"]] = float(r["drop_points"])
    out = []
    for row in [*rows.values(), *recovery_rows()]:
        row["drop"] = round(sum(row["measured"].values()) / len(row["measured"]), 4)
        out.append(row)
    return sorted(out, key=lambda r: (r["method"], json.dumps(r["budget"], sort_keys=True), r["sparsity"]))


# the short recovery (compress's default) and the long one (compress --recovery long), each run of recovery.py; the
# long one measured from the teachers compress fine-tunes (recovery.py --teacher compress): from the weaker full
# fine-tuning teachers of recovery-1200.json, SST-2's rows were optimistic by 1.6-2.6 points (a student beat its teacher)
RECOVERY_FILES = ("recovery.json", "recovery-1200-compress.json")


def recovery_rows(files: tuple[str, ...] = RECOVERY_FILES) -> list[dict]:
    """Rows measured with recovery: per results file of ``files`` and task, the chosen recovered row per
    (method, sparsity, recovery budget). A row whose recovery stopped before its ``max_steps`` is refused: the
    budget leaves ``epochs`` out because ``max_steps`` is the length of the run."""
    from edgenlp.prune.config import DistillConfig

    rows: dict[tuple, dict] = {}
    for name in files:
        path, source = RESULTS / name, f"tools/bench/results/{name}"
        if not path.is_file():
            continue
        for doc in json.loads(path.read_text())["tasks"].values():
            # the validation drop: the split compress's measured planning checks a candidate on (rows held out of
            # train, never dev); with the teacher compress fine-tunes, SST-2's validation drops after pruning run above
            # its dev drops (fast 50%: 1.7 against 0.7 points), and it is the validation check a plan must pass
            teacher = float(doc["teacher"]["val_accuracy"])
            for r in doc["rows"]:
                if not r.get("chosen"):
                    continue
                cfg = DistillConfig.from_dict(r["config"])
                if cfg.max_steps is not None and r["steps"] != cfg.max_steps:
                    raise SystemExit(f"{path}: the recovery of {r['method']} at {r['sparsity']} on {doc['task']} ran "
                                     f"{r['steps']} of its {cfg.max_steps} steps")
                budget = {**budget_of(r["method"], r["prune_config"]), "recovery": cfg.budget()}
                key = (r["method"], float(r["sparsity"]), json.dumps(budget, sort_keys=True))
                row = rows.setdefault(key, {"method": r["method"], "sparsity": float(r["sparsity"]), "budget": budget,
                                            "measured": {}, "source": source})
                if doc["task"] in row["measured"] or row["source"] != source:
                    raise SystemExit(f"{path}: two chosen rows for {r['method']} at {r['sparsity']} on {doc['task']} "
                                     "at one budget")
                row["measured"][doc["task"]] = round(100.0 * (teacher - float(r["val_accuracy"])), 4)
                row["basis"] = "validation"
    return list(rows.values())


def quant_rows() -> list[dict]:
    doc = json.loads((RESULTS / "quantize.json").read_text())
    out = []
    for kind, value, variant, against in QUANT_ROWS:
        measured = {}
        for task, variants in doc["tasks"].items():
            if variant in variants and against in variants:
                measured[task] = round(100.0 * (variants[against]["acc_executorch"] - variants[variant]["acc_executorch"]), 4)
        out.append({kind: value, "variant": variant, "against": against, "measured": measured,
                    "drop": round(sum(measured.values()) / len(measured), 4), "source": "tools/bench/results/quantize.json"})  # fmt: skip
    return out


SPARSIFY_FILE = "sparsify-accuracy.json"
SPARSIFY_BUDGET_KEYS = ("max_steps", "batch_size", "max_seq_len", "lr")  # what the file records of the config it ran


def block_rows() -> list[dict]:
    """``block_sparsity`` rows: per (block, sparsity, budget), the int8 bundle's drop against the teacher's int8 bundle."""
    path = RESULTS / SPARSIFY_FILE
    if not path.is_file():
        return []
    docs = json.loads(path.read_text())
    rows: dict[tuple, dict] = {}
    for doc in docs if isinstance(docs, list) else [docs]:
        teacher = float(doc["teacher_bundle"]["dev"]["accuracy"])
        for r in doc["runs"]:
            budget = {"block": r["block"], **{k: doc[k] for k in SPARSIFY_BUDGET_KEYS}}
            key = (float(r["sparsity"]), json.dumps(budget, sort_keys=True))
            row = rows.setdefault(key, {"block_sparsity": float(r["sparsity"]), "budget": budget, "measured": {},
                                        "source": f"tools/bench/results/{SPARSIFY_FILE}"})
            row["measured"][doc["task"]] = round(100.0 * (teacher - float(r["bundle"]["dev"]["accuracy"])), 4)
    out = []
    for row in rows.values():
        row["drop"] = round(sum(row["measured"].values()) / len(row["measured"]), 4)
        out.append(row)
    return sorted(out, key=lambda r: (json.dumps(r["budget"], sort_keys=True), r["block_sparsity"]))


def build() -> dict:
    q = quant_rows()
    return {
        "schema": SCHEMA,
        "about": ("Predicted dev-accuracy drop (points) of MiniLM-L6 classifiers against the uncompressed fine-tuned model, "
                  "measured rows only (built by tools/bench/accuracy_prior.py from the results files each row names). "
                  "A pruning row holds at the budget it was measured at; a quantization row is the accuracy through the "
                  "ExecuTorch bundle of one variant against another. The teachers were fine-tuned beyond the quick preset's "
                  "budget (prune.md, quantize.md name them)."),
        "rules": ("Drops add (pruning, linears, word table, trimming). Per layer, fewer bits never predict a smaller drop than "
                  "more bits (int4 takes int8's drop when its own is smaller; likewise the int4 word table), since their "
                  "measured difference is within one run's noise. A pruning sparsity between two measured rows is "
                  "interpolated and one beyond them extrapolated, each labelled so in the plan; a method with no row at "
                  "the budget asked for is not offered. A block sparsity is interpolated between 0 and its measured "
                  "rows, never extrapolated."),
        "prune": prune_rows(),
        "bits": [r for r in q if "bits" in r],
        "embeddings": [r for r in q if "embeddings" in r],
        "trim_vocab": [r for r in q if "trim_vocab" in r],
        "block_sparsity": block_rows(),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if targets/accuracy-prior.json differs from the results")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    text = json.dumps(build(), indent=2) + "\n"
    if args.check:
        same = args.out.is_file() and args.out.read_text() == text
        print("up to date" if same else f"{args.out} is out of date: rerun tools/bench/accuracy_prior.py")
        return 0 if same else 1
    tmp = args.out.with_name(f".{args.out.name}.tmp")
    tmp.write_text(text)
    tmp.replace(args.out)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
