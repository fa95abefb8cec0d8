"""Dev-set accuracy and per-sentence latency on a board, with the predictions checked against the host's.

The texts go to the device as one file (one text per line; line breaks inside
a text become spaces, which the WordPiece tokenizer treats alike) and
``edgenlp-run --json --input FILE --load-all`` classifies them one at a time,
reporting each call's time on the device's clock (tokenization included, every
bucket method loaded at open so no sentence pays a first-use load). The host
runs the same texts through its own runtime (``native`` by default) and the
report says how many predicted labels agree and the largest probability
difference.
"""

from __future__ import annotations

import json
import logging
import tempfile
from pathlib import Path

import numpy as np

from edgenlp.boards.base import Board
from edgenlp.boards.errors import RunnerFailed
from edgenlp.boards.measure import runtime_name
from edgenlp.data.tasks import Split
from edgenlp.metrics import classification_report

log = logging.getLogger(__name__)


def one_line(text: str) -> str:
    return text.replace("\r\n", " ").replace("\r", " ").replace("\n", " ")


def load_split(*, task=None, split: str = "dev", data=None, data_dir=None, limit: int | None = None) -> Split:
    from edgenlp.run.evaluate import load_split as _load

    return _load(task=task, split=split, data=data, data_dir=data_dir).head(limit)


def classify_on_board(board: Board, bundle: str | Path, texts: list[str], *, threads: int | None = None,
                      cores: str = "all") -> list[dict]:  # fmt: skip
    """``edgenlp-run --json`` rows (label, index, ms, probabilities) for ``texts``, in order."""
    remote_bundle = board.push_bundle(bundle)
    with tempfile.TemporaryDirectory(prefix="edgenlp-eval-") as tmp:
        f = Path(tmp) / "texts.txt"
        f.write_text("".join(one_line(t) + "\n" for t in texts), encoding="utf-8")
        remote = board.push_file(f, "texts.txt")
    args = [remote_bundle, "--json", "--load-all", "--input", remote]
    if threads:
        args += ["--threads", str(threads)]
    res = board.run_runner(args, cores=cores, step="run (eval)")
    rows = [json.loads(l) for l in res.stdout.splitlines() if l.startswith("{")]
    if len(rows) != len(texts):
        raise RunnerFailed(board.uri, "run (eval)", f"expected {len(texts)} results, got {len(rows)}")
    return rows


def evaluate_on_board(board: Board, bundle: str | Path, *, task=None, split: str = "dev", data=None, data_dir=None,
                      threads: int | None = None, cores: str = "all", limit: int | None = None,
                      host_runtime: str | None = "native") -> dict:  # fmt: skip
    """Accuracy, per-sentence latency and agreement with the host for ``bundle`` on ``board``.

    ``host_runtime`` (``native``, ``executorch``, ``onnx``; None to skip) runs
    the same texts on this machine for the comparison.
    """
    from edgenlp.bundle import Bundle

    b = Bundle.open(bundle)
    sp = load_split(task=task, split=split, data=data, data_dir=data_dir, limit=limit)
    texts = [one_line(t) for t in sp.texts]
    gold = sp.label_ids(b.labels)
    rows = classify_on_board(board, bundle, texts, threads=threads, cores=cores)
    pred = [int(r["index"]) for r in rows]
    probs = np.array([[r["probabilities"][l] for l in b.labels] for r in rows], dtype=np.float64)
    ms = np.array([float(r["ms"]) for r in rows])
    report = classification_report(pred, gold, num_labels=len(b.labels))
    report.update(
        runtime=runtime_name(board),
        target=str(bundle),
        data=sp.path,
        threads=threads,
        cores=cores,
        ms_per_text=round(float(ms.mean()), 3),
        latency_ms={"median": round(float(np.median(ms)), 3), "p90": round(float(np.percentile(ms, 90)), 3),
                    "mean": round(float(ms.mean()), 3), "min": round(float(ms.min()), 3), "max": round(float(ms.max()), 3)},
    )  # fmt: skip
    if host_runtime:
        from edgenlp.run.base import get_runner, softmax

        with get_runner(bundle, runtime=host_runtime, threads=threads) as runner:
            host = softmax(runner.predict_logits(texts).astype(np.float64))
        host_pred = host.argmax(-1)
        differ = [i for i, (a, h) in enumerate(zip(pred, host_pred)) if a != int(h)]
        report["host"] = {
            "runtime": host_runtime,
            "accuracy": classification_report(host_pred.tolist(), gold, num_labels=len(b.labels))["accuracy"],
            "same_prediction": len(texts) - len(differ),
            "n": len(texts),
            "max_abs_prob_diff": float(np.abs(host - probs).max()),
            "differing_rows": differ[:20],
        }
    report["device"] = board.describe()
    return report
