"""Benchmark: edgenlp's full fine-tuning against a Hugging Face reference on the same data and schedule (not CI).

The reference is ``transformers``' own ``BertForSequenceClassification``,
loaded from the same MiniLM checkpoint, with its own tokenizer, trained by a
plain loop written here: the rows ``edgenlp finetune --train-limit`` draws
(the same seeded subset), AdamW with the same two groups (body at ``--lr``,
classifier and pooler at ``--head-lr``; matrices decay by 0.01, vectors
never), the same linear warm-up (6%) and decay, gradient clipping at 1.0,
batch 32, length 64, the same epochs. Dev accuracy after every epoch.

It answers whether full fine-tuning in edgenlp is as good as the reference
before any Learner gap is measured against it. The edgenlp side is read
from a ``tools/bench/finetune.py`` results file (``--against``) that ran the
same task, rows, epochs and rates; both sides report the last epoch and the
best epoch on dev (edgenlp's early stopping returns the best epoch).

    python tools/bench/hf_reference.py --task-dir /tmp/b154 --task-name banking154 --train-limit 4000 --epochs 2 \\
        --seeds 0 1 2 --against tools/bench/results/finetune-154-classes-2epochs.json --out tools/bench/results/hf-reference-154
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from edgenlp.finetune.config import DEFAULT_HEAD_LR, DEFAULT_LR, FinetuneConfig  # noqa: E402
from tools.bench.harness import Results  # noqa: E402

log = logging.getLogger("bench.hf_reference")


def train_reference(task, model_dir: Path, *, seed: int, epochs: int, train_limit: int | None, lr: float, head_lr: float,
                    batch_size: int, max_len: int, warmup_fraction: float, weight_decay: float,
                    max_grad_norm: float) -> dict:
    """One Hugging Face run: dev accuracy per epoch and training seconds."""
    import torch
    from transformers import AutoTokenizer, BertForSequenceClassification

    from edgenlp.finetune.trainer import lr_factor

    labels = task.labels
    train = task.train.sample(train_limit, seed=0)  # edgenlp's --train-limit subset (subset seed 0)
    torch.manual_seed(seed)
    tok = AutoTokenizer.from_pretrained(str(model_dir))
    model = BertForSequenceClassification.from_pretrained(str(model_dir), num_labels=len(labels))
    head = [n for n, _ in model.named_parameters() if n.startswith(("classifier.", "bert.pooler."))]
    groups = []
    for name, rate in (("body", lr), ("head", head_lr)):
        params = [(n, p) for n, p in model.named_parameters() if (n in head) == (name == "head")]
        groups.append({"params": [p for _, p in params if p.ndim >= 2], "lr": rate, "weight_decay": weight_decay})
        groups.append({"params": [p for _, p in params if p.ndim < 2], "lr": rate, "weight_decay": 0.0})
    for g in groups:
        g["base_lr"] = g["lr"]
    opt = torch.optim.AdamW(groups)
    y = torch.tensor(train.label_ids(labels))
    dev_y = torch.tensor(task.dev.label_ids(labels))
    steps_per_epoch = -(-len(train) // batch_size)
    total = steps_per_epoch * epochs
    warmup = int(warmup_fraction * total)
    order = torch.Generator().manual_seed(seed)

    def batch(texts):
        return tok(list(texts), truncation=True, max_length=max_len, padding=True, return_tensors="pt")

    def evaluate() -> float:
        model.eval()
        right = 0
        with torch.inference_mode():
            for i in range(0, len(task.dev), 128):
                enc = batch(task.dev.texts[i:i + 128])
                right += int((model(**enc).logits.argmax(-1) == dev_y[i:i + 128]).sum())
        return right / len(task.dev)

    step, dev, train_s = 0, [], 0.0
    for epoch in range(epochs):
        model.train()
        perm = torch.randperm(len(train), generator=order).tolist()
        t0 = time.perf_counter()
        for i in range(0, len(perm), batch_size):
            idx = perm[i:i + batch_size]
            enc = batch([train.texts[j] for j in idx])
            for g in opt.param_groups:
                g["lr"] = g["base_lr"] * lr_factor(step, total=total, warmup=warmup)
            loss = torch.nn.functional.cross_entropy(model(**enc).logits, y[idx])
            loss.backward()
            torch.nn.utils.clip_grad_norm_([p for g in opt.param_groups for p in g["params"]], max_grad_norm)
            opt.step()
            opt.zero_grad(set_to_none=True)
            step += 1
        train_s += time.perf_counter() - t0
        dev.append(evaluate())
        log.info("seed %d epoch %d: dev %.4f, last loss %.3f", seed, epoch + 1, dev[-1], loss.item())
    return {"seed": seed, "dev_per_epoch": dev, "last": dev[-1], "best": max(dev), "steps": step,
            "train_s": round(train_s, 1), "rows": len(train), "head_params": head}


def check_against(doc: dict, args) -> None:
    """The edgenlp runs must have trained on the same rows for the same epochs."""
    m = doc["meta"]
    same = (str(m.get("epochs")) == str(args.epochs) and m.get("train_limit") == args.train_limit
            and m.get("batch_size") == args.batch_size and m.get("max_seq_len") == args.max_len)
    if not same:
        log.error(f"{args.against} ran epochs {m.get('epochs')}, train_limit {m.get('train_limit')}, batch "
                  f"{m.get('batch_size')}, length {m.get('max_seq_len')}; this run asks for {args.epochs}, "
                  f"{args.train_limit}, {args.batch_size}, {args.max_len}")
        raise SystemExit(2)


def edgenlp_side(doc: dict, path: Path, task_name: str) -> dict:
    """edgenlp's full fine-tuning runs at the library's default rates from a finetune.py results file (``doc``, read
    from ``path``)."""
    runs = [r for r in doc["runs"] if r["method"] == "full" and r["bench"]["task"] == task_name
            and r["bench"]["setting"] == "lr=default,head=default"]
    return {"source": str(path.relative_to(ROOT) if path.is_relative_to(ROOT) else path),
            "runs": [{"seed": r["seed"], "dev_per_epoch": [e["accuracy"] for e in r["dev_per_epoch"]],
                      "last": r["dev_per_epoch"][-1]["accuracy"], "best": r["dev"]["accuracy"], "steps": r["steps"],
                      "lr": r["lr"]} for r in sorted(runs, key=lambda r: r["seed"])]}


def stats(runs: list[dict], key: str) -> str:
    xs = [100 * r[key] for r in runs]
    return f"{statistics.mean(xs):.2f} ± {statistics.stdev(xs):.2f}" if len(xs) > 1 else (f"{xs[0]:.2f} (1 seed)" if xs else "–")


def markdown(doc: dict) -> str:
    m = doc["meta"]
    lines = [
        "# Full fine-tuning: edgenlp against a Hugging Face reference (tools/bench/hf_reference.py)", "",
        f"Task {m['task']} ({m['classes']} classes), {m['rows']} training rows (edgenlp's --train-limit subset), {m['epochs']} "
        f"epochs, batch {m['batch_size']}, length {m['max_len']}, body {m['lr']:g}, classifier and pooler {m['head_lr']:g}, "
        f"warm-up {m['warmup_fraction']:g}, weight decay {m['weight_decay']:g} on matrices, clipping {m['max_grad_norm']:g}; "
        f"1 thread per run. Dev accuracy (%), mean ± std over seeds; the edgenlp side from `{doc['edgenlp']['source']}`.", "",
        "| implementation | seeds | dev by epoch (seed 0) | last epoch | best epoch |", "|---|---|---|---:|---:|"]
    for name, runs in (("Hugging Face BertForSequenceClassification", doc["reference"]),
                       ("edgenlp finetune --method full", doc["edgenlp"]["runs"])):
        if not runs:
            continue
        s0 = next((r for r in runs if r["seed"] == 0), runs[0])
        lines.append(f"| {name} | {','.join(str(r['seed']) for r in runs)} | "
                     f"{' / '.join(f'{100 * a:.1f}' for a in s0['dev_per_epoch'])} | {stats(runs, 'last')} | {stats(runs, 'best')} |")
    if doc.get("gap_last") is not None:
        lines += ["", f"- edgenlp − reference over seeds {', '.join(map(str, doc['gap_seeds']))}: {doc['gap_last']:+.2f} points at "
                      f"the last epoch, {doc['gap_best']:+.2f} at the best."]
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--task-dir", required=True, help="Task folder (train.tsv, dev.tsv) or a built-in task name.")
    p.add_argument("--task-name", required=True, help="The task's name in the --against results file.")
    p.add_argument("--train-limit", type=int, default=None)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--seeds", type=int, nargs="+", default=[0])
    p.add_argument("--lr", type=float, default=DEFAULT_LR["full"])
    p.add_argument("--head-lr", type=float, default=DEFAULT_HEAD_LR)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--max-len", type=int, default=64)
    p.add_argument("--against", required=True, help="A tools/bench/finetune.py results JSON with edgenlp's full runs.")
    p.add_argument("--out", required=True, help="Results path without extension.")
    p.add_argument("--resume", action="store_true",
                   help="Keep the reference runs <out>.json already holds for these settings (their seeds are not trained "
                        "again); the edgenlp side and the gaps are read again from --against.")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    import torch

    from edgenlp.data.tasks import load_task
    from edgenlp.models.registry import _minilm_dir

    torch.set_num_threads(1)
    task = load_task(args.task_dir)
    results = Results(script="hf_reference", threads=1)
    ft = FinetuneConfig()  # edgenlp's schedule, which the reference copies
    schedule = {"warmup_fraction": ft.warmup_fraction, "weight_decay": ft.weight_decay, "max_grad_norm": ft.max_grad_norm}
    meta = {"task": args.task_name, "classes": len(task.labels), "rows": len(task.train.sample(args.train_limit, seed=0)),
            "epochs": args.epochs, "batch_size": args.batch_size, "max_len": args.max_len, "lr": args.lr,
            "head_lr": args.head_lr, **schedule, "seeds": args.seeds}
    against = json.loads(Path(args.against).read_text())
    check_against(against, args)
    ours = edgenlp_side(against, Path(args.against), args.task_name)
    doc = {"meta": meta, "reference": [], "edgenlp": ours, "gap_last": None, "gap_best": None}
    old = Path(args.out + ".json")
    if args.resume and old.is_file():
        kept = json.loads(old.read_text())
        if {k: v for k, v in kept["meta"].items() if k != "seeds"} != {k: v for k, v in meta.items() if k != "seeds"}:
            log.error("--resume: %s ran other settings (%s)", old, kept["meta"])
            return 2
        doc["reference"] = [r for r in kept["reference"] if r["seed"] in args.seeds]
    done = {r["seed"] for r in doc["reference"]}
    for seed in [s for s in args.seeds if s not in done] or [None]:
        if seed is not None:
            doc["reference"].append(train_reference(task, _minilm_dir(), seed=seed, epochs=args.epochs,
                                                    train_limit=args.train_limit,
                                                    lr=args.lr, head_lr=args.head_lr, batch_size=args.batch_size,
                                                    max_len=args.max_len, **schedule))
        doc["reference"].sort(key=lambda r: r["seed"])
        both = {r["seed"] for r in ours["runs"]} & {r["seed"] for r in doc["reference"]}
        if both:  # over the seeds both sides ran
            doc["gap_seeds"] = sorted(both)
            for key in ("last", "best"):
                doc[f"gap_{key}"] = round(100 * (statistics.mean(r[key] for r in ours["runs"] if r["seed"] in both)
                                                 - statistics.mean(r[key] for r in doc["reference"] if r["seed"] in both)), 2)
        results.write(args.out, doc, markdown(doc))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
