"""The C example's predictions against the ExecuTorch Python runtime's, x86-64 and aarch64.

Runs ``runtime/examples/classify.c`` (the host build natively, the aarch64
cross build under ``qemu-aarch64 -cpu cortex-a76``) over a TSV split, runs the
same bundle through the ExecuTorch Python runtime (what ``edgenlp eval
--runtime executorch`` uses), and compares label by label::

    .venv/bin/python tools/check_native_predictions.py --bundle out/minilm-sst2
    .venv/bin/python tools/check_native_predictions.py --bundle B --qemu-limit 200 --jobs 2
    .venv/bin/python tools/check_native_predictions.py --bundle B --skip-qemu

Under qemu every text costs about a second or more of emulated NEON, so the
aarch64 check takes a fixed seeded subset (``--qemu-limit``, ``--seed``);
``--qemu-limit 0`` runs the whole split. Writes ``<name>.json`` and
``<name>.md`` to ``--out``; exits 1 when any prediction differs.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
log = logging.getLogger("check_native_predictions")

QEMU_SYSROOT = "/usr/aarch64-linux-gnu"


def reference(bundle: Path, texts: list[str], *, threads: int | None = None) -> tuple[tuple[str, ...], np.ndarray]:
    """Labels and softmax probabilities from the ExecuTorch Python runtime (Python tokenizer + pybindings)."""
    from edgenlp.run.base import get_runner, softmax

    with get_runner(bundle, runtime="executorch", threads=threads) as runner:
        return tuple(runner.labels), softmax(runner.predict_logits(texts))


def run_classify(cmd: list[str], bundle: Path, texts: list[str], *, chunk: int = 256) -> list[tuple[str, float]]:
    """(label, probability of that label) per text from the C example, `chunk` texts per process."""
    out: list[tuple[str, float]] = []
    for i in range(0, len(texts), chunk):
        part = texts[i : i + chunk]
        proc = subprocess.run([*cmd, str(bundle), *part], capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr.strip()[-2000:]}")
        lines = proc.stdout.splitlines()
        if len(lines) != len(part):
            raise RuntimeError(f"{cmd[-1]} printed {len(lines)} lines for {len(part)} texts")
        for line in lines:
            label, prob = line.rsplit(" ", 1)
            out.append((label, float(prob)))
    return out


def run_parallel(cmd: list[str], bundle: Path, texts: list[str], jobs: int) -> list[tuple[str, float]]:
    """run_classify over `jobs` contiguous shares of texts at once (each share one process)."""
    jobs = max(1, min(jobs, len(texts)))
    bounds = np.linspace(0, len(texts), jobs + 1).astype(int)
    shares = [texts[a:b] for a, b in zip(bounds[:-1], bounds[1:])]
    with ThreadPoolExecutor(jobs) as pool:
        parts = list(pool.map(lambda s: run_classify(cmd, bundle, s, chunk=max(1, len(s))), shares))
    return [row for part in parts for row in part]


def compare(name: str, idx: list[int], got: list[tuple[str, float]], labels, probs: np.ndarray, gold: list[int],
            texts: list[str], seconds: float) -> dict:
    """Agreement of one native run with the reference on the texts at `idx`."""
    ref_pred = probs.argmax(-1)
    agree, diffs, disagreements = 0, [], []
    correct = 0
    for (label, p), i in zip(got, idx):
        k = labels.index(label)
        if k == ref_pred[i]:
            agree += 1
        else:
            disagreements.append({"index": i, "text": texts[i], "native": label, "native_prob": p,
                                  "executorch": labels[ref_pred[i]], "executorch_probs": probs[i].round(5).tolist()})
        diffs.append(abs(p - float(probs[i, k])))
        correct += int(k == gold[i])
    n = len(idx)
    return {
        "target": name,
        "n": n,
        "agree": agree,
        "disagree": n - agree,
        "agreement": agree / n if n else None,
        "accuracy_native": correct / n if n else None,
        "accuracy_executorch_same_texts": float(np.mean([ref_pred[i] == gold[i] for i in idx])) if n else None,
        "max_abs_prob_diff": float(max(diffs)) if diffs else None,  # native prints 4 decimals
        "seconds": round(seconds, 2),
        "ms_per_text": round(1000 * seconds / n, 2) if n else None,
        "disagreements": disagreements,
    }


def check(bundle: Path, texts: list[str], gold_labels: list[str], *, build: Path, qemu_cpu: str | None,
          qemu_limit: int, seed: int, jobs: int, threads: int | None = None, skip_native: bool = False) -> dict:
    """Everything the script reports, as a dict (also used by the slow test)."""
    bundle = Path(bundle)
    t0 = time.perf_counter()
    labels, probs = reference(bundle, texts, threads=threads)
    ref_seconds = time.perf_counter() - t0
    missing = sorted({g for g in gold_labels if g not in labels})
    if missing:
        raise SystemExit(f"gold labels {missing} are not bundle labels {labels}")
    gold = [labels.index(g) for g in gold_labels]
    ref_pred = probs.argmax(-1)
    result = {
        "bundle": str(bundle),
        "n_texts": len(texts),
        "labels": list(labels),
        "executorch_python": {"accuracy": float(np.mean(ref_pred == np.array(gold))), "n": len(texts),
                              "seconds": round(ref_seconds, 2)},
        "runs": [],
    }
    if not skip_native:
        exe = build / "x86_64" / "classify"
        if not exe.is_file():
            raise SystemExit(f"{exe} missing: run `bash runtime/build.sh`")
        t0 = time.perf_counter()
        got = run_classify([str(exe)], bundle, texts)
        result["runs"].append(compare("x86_64 (native)", list(range(len(texts))), got, labels, probs, gold, texts,
                                      time.perf_counter() - t0))
    if qemu_cpu:
        exe = build / "aarch64" / "classify"
        if not exe.is_file():
            raise SystemExit(f"{exe} missing: run `bash runtime/build.sh --arch aarch64`")
        if shutil.which("qemu-aarch64") is None:
            raise SystemExit("qemu-aarch64 missing: run `bash runtime/setup_deps.sh`")
        idx = list(range(len(texts)))
        if 0 < qemu_limit < len(texts):
            idx = sorted(random.Random(seed).sample(idx, qemu_limit))
        cmd = ["qemu-aarch64", "-L", QEMU_SYSROOT, "-cpu", qemu_cpu, str(exe)]
        t0 = time.perf_counter()
        got = run_parallel(cmd, bundle, [texts[i] for i in idx], jobs)
        run = compare(f"aarch64 (qemu -cpu {qemu_cpu})", idx, got, labels, probs, gold, texts,
                      time.perf_counter() - t0)
        run["subset"] = ({"size": len(idx), "seed": seed, "of": len(texts)} if len(idx) < len(texts) else None)
        run["jobs"] = jobs
        result["runs"].append(run)
    return result


def markdown(r: dict, data: str) -> str:
    lines = [
        "# Native predictions vs ExecuTorch Python",
        "",
        f"Bundle `{r['bundle']}`, data `{data}` ({r['n_texts']} texts). Reference: the ExecuTorch Python "
        f"runtime (Python tokenizer + pybindings, as `edgenlp eval --runtime executorch`), accuracy "
        f"{r['executorch_python']['accuracy']:.4f}. Native: the C example `runtime/examples/classify.c` "
        "(native tokenizer + ExecuTorch C++ runtime).",
        "",
        "| target | texts | agree | disagree | accuracy (native) | accuracy (ExecuTorch Python, same texts) "
        "| max abs prob diff | ms/text |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for run in r["runs"]:
        lines.append(f"| {run['target']} | {run['n']} | {run['agree']} | {run['disagree']} | "
                     f"{run['accuracy_native']:.4f} | {run['accuracy_executorch_same_texts']:.4f} | "
                     f"{run['max_abs_prob_diff']:.1e} | {run['ms_per_text']} |")
    lines.append("")
    for run in r["runs"]:
        if run.get("subset"):
            s = run["subset"]
            lines.append(f"{run['target']}: fixed subset of {s['size']} of {s['of']} texts "
                         f"(`random.Random({s['seed']}).sample`), {run['jobs']} qemu processes at once, "
                         f"{run['seconds']:.0f} s in all.")
        for d in run["disagreements"]:
            lines.append(f"- {run['target']} text {d['index']}: native {d['native']} ({d['native_prob']}), "
                         f"ExecuTorch {d['executorch']} {d['executorch_probs']}: {d['text'][:80]!r}")
    lines.append("")
    lines.append("Probabilities are compared as printed by the example (4 decimals).")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bundle", type=Path, required=True)
    ap.add_argument("--data", type=Path, help="TSV with text/label columns (default: the task's dev split)")
    ap.add_argument("--task", default="sst2")
    ap.add_argument("--limit", type=int, default=0, help="first N texts only (0: all)")
    ap.add_argument("--build", type=Path, default=REPO / "runtime" / "build")
    ap.add_argument("--qemu-cpu", default="cortex-a76")
    ap.add_argument("--skip-qemu", action="store_true")
    ap.add_argument("--qemu-limit", type=int, default=200, help="seeded subset size under qemu (0: all texts)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="qemu processes at once")
    ap.add_argument("--threads", type=int, default=None, help="ExecuTorch Python threads")
    ap.add_argument("--out", type=Path, default=REPO / "tools" / "bench" / "results")
    ap.add_argument("--name", default="native_predictions")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")

    from edgenlp.data.tasks import load_task, read_tsv

    split = read_tsv(args.data) if args.data else load_task(args.task).dev
    if args.limit:
        split = split.head(args.limit)
    texts, gold = list(split.texts), list(split.labels)
    r = check(args.bundle, texts, gold, build=args.build, qemu_cpu=None if args.skip_qemu else args.qemu_cpu,
              qemu_limit=args.qemu_limit, seed=args.seed, jobs=args.jobs, threads=args.threads)
    r["data"] = str(split.path)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{args.name}.json").write_text(json.dumps(r, indent=2) + "\n")
    md = markdown(r, str(split.path))
    (args.out / f"{args.name}.md").write_text(md)
    print(md)
    return 0 if all(run["disagree"] == 0 for run in r["runs"]) else 1


if __name__ == "__main__":
    sys.exit(main())
