"""The Java binding's predictions against `edgenlp eval --runtime executorch`, text by text.

Runs the Java example (runtime/java/src/examples/java/Classify.java: EdgeNlp.open +
classifyBatch, from the host SDK archive of `bash runtime/build.sh --package`) over a TSV
split on the host JVM, runs the same bundle through the ExecuTorch Python runtime (the
runner of `edgenlp eval --runtime executorch`), and compares labels and probabilities:

    .venv/bin/python tools/bench/java_predictions.py --bundle out/minilm-sst2 [--task sst2] [--split dev]

Writes java_predictions.json and java_predictions.md to --out; exits 1 when a label differs.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
log = logging.getLogger("bench.java_predictions")


def java_probs(bundle: Path, texts: list[str]) -> tuple[np.ndarray, float]:
    env = dict(os.environ, PYTHON=os.environ.get("PYTHON", sys.executable))
    out = subprocess.run(["bash", str(REPO / "runtime/build.sh"), "--package"], env=env, capture_output=True,
                         text=True, check=True).stdout.strip().splitlines()
    build_dir, archive = Path(out[-2]), Path(out[-1])
    with tempfile.TemporaryDirectory() as tmp:
        with tarfile.open(archive) as tar:
            tar.extractall(tmp, filter="tar")
        sdk = next(Path(tmp).iterdir())
        jar = next((sdk / "share/java").glob("edgenlp-*.jar"))
        (Path(tmp) / "texts.txt").write_text("\n".join(texts) + "\n", encoding="utf-8")
        start = time.perf_counter()
        proc = subprocess.run(["java", f"-Djava.library.path={sdk / 'lib'}", "-cp",
                               f"{jar}{os.pathsep}{build_dir / 'java/edgenlp-example.jar'}", "Classify", str(bundle),
                               "--input", str(Path(tmp) / "texts.txt"), "--json"],
                              capture_output=True, text=True, check=True)
        seconds = time.perf_counter() - start
    rows = [json.loads(line) for line in proc.stdout.splitlines()]
    return np.array([r["probabilities"] for r in rows], dtype=np.float64), seconds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bundle", type=Path, required=True)
    ap.add_argument("--task", default="sst2")
    ap.add_argument("--split", default="dev")
    ap.add_argument("--data-dir", type=Path)
    ap.add_argument("--out", type=Path, default=REPO / "tools/bench/results")
    ap.add_argument("--note", default="", help="a sentence about the bundle, printed under the table")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    from edgenlp.run.base import get_runner, softmax
    from edgenlp.run.evaluate import load_split

    split = load_split(task=args.task, split=args.split, data_dir=args.data_dir)
    texts = [t.replace("\n", " ") for t in split.texts]
    with get_runner(args.bundle, runtime="executorch", threads=1) as runner:
        start = time.perf_counter()
        ref = softmax(runner.predict_logits(texts)).astype(np.float64)
        ref_seconds = time.perf_counter() - start
        labels = list(runner.labels)
    got, java_seconds = java_probs(args.bundle, texts)
    gold = np.array([labels.index(str(y)) for y in split.labels])
    agree = int((got.argmax(1) == ref.argmax(1)).sum())
    result = {"bundle": str(args.bundle), "task": args.task, "split": args.split, "texts": len(texts),
              "agree": agree, "disagree": len(texts) - agree,
              "accuracy_java": round(float((got.argmax(1) == gold).mean()), 4),
              "accuracy_executorch": round(float((ref.argmax(1) == gold).mean()), 4),
              "max_abs_prob_diff": float(np.abs(got - ref).max()),
              "seconds": {"java": round(java_seconds, 1), "executorch_python": round(ref_seconds, 1)},
              "load_avg": [round(x, 2) for x in os.getloadavg()]}
    md = "\n".join([
        "# Java binding predictions vs ExecuTorch Python", "",
        f"Bundle `{args.bundle}`, {args.task} {args.split} ({len(texts)} texts). Java: the example "
        "`runtime/java/src/examples/java/Classify.java` (EdgeNlp.classifyBatch, host SDK archive, host JVM). "
        "Reference: the ExecuTorch Python runtime (Python tokenizer + pybindings, as `edgenlp eval --runtime executorch`).",
        "", "| texts | agree | disagree | accuracy (Java) | accuracy (ExecuTorch Python) | max abs prob diff |",
        "|---|---|---|---|---|---|",
        f"| {len(texts)} | {agree} | {len(texts) - agree} | {result['accuracy_java']:.4f} | "
        f"{result['accuracy_executorch']:.4f} | {result['max_abs_prob_diff']:.1e} |", "",
        f"Load average at the end: {result['load_avg'][0]}. {args.note}".strip(), ""])
    result["note"] = args.note
    args.out.mkdir(parents=True, exist_ok=True)
    for name, text in (("java_predictions.json", json.dumps(result, indent=2) + "\n"), ("java_predictions.md", md)):
        (args.out / (name + ".tmp")).write_text(text)
        (args.out / (name + ".tmp")).replace(args.out / name)
    log.info("%s", md)
    sys.exit(0 if agree == len(texts) else 1)


if __name__ == "__main__":
    main()
