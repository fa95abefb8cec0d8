"""Accuracy of a bundle measured through its runtime (not through PyTorch)."""

from __future__ import annotations

import time
from pathlib import Path

from edgenlp.data.tasks import Split, load_task, read_tsv
from edgenlp.errors import EdgeNLPError
from edgenlp.metrics import classification_report
from edgenlp.run.base import Runner, get_runner


def evaluate_split(runner: Runner, split: Split, *, limit: int | None = None) -> dict:
    """Predict every text of ``split`` and score against its labels."""
    split = split.head(limit)
    gold = split.label_ids(runner.labels)
    t0 = time.perf_counter()
    logits = runner.predict_logits(split.texts)
    seconds = time.perf_counter() - t0
    report = classification_report(logits.argmax(-1).tolist(), gold, num_labels=len(runner.labels))
    report.update(
        runtime=runner.name,
        data=split.path,
        seconds=round(seconds, 3),
        ms_per_text=round(1000 * seconds / len(split), 3),
    )
    return report


def load_split(*, task=None, split: str = "dev", data=None, data_dir=None) -> Split:
    """The texts to evaluate: ``data`` (a TSV file) or split ``split`` of ``task``."""
    if data is None and task is None:
        raise EdgeNLPError("give --task (with --split) or --data FILE.tsv")
    if data is not None:
        return read_tsv(data)
    if split not in ("train", "dev"):
        raise EdgeNLPError(f"--split must be train or dev, got {split!r}")
    return getattr(load_task(task, data_dir=data_dir), split)


def evaluate(
    target: str | Path,
    *,
    runtime: str = "executorch",
    task: str | None = None,
    split: str = "dev",
    data: str | Path | None = None,
    data_dir: str | Path | None = None,
    threads: int | None = None,
    limit: int | None = None,
) -> dict:
    """Evaluate a bundle (or a model, with ``runtime="eager"``) on a task split or any TSV file."""
    if data is None and task is None:
        raise EdgeNLPError("give --task (with --split) or --data FILE.tsv")
    if limit is not None and limit < 1:
        raise EdgeNLPError(f"--limit must be >= 1, got {limit}")
    sp = load_split(task=task, split=split, data=data, data_dir=data_dir)
    with get_runner(target, runtime=runtime, threads=threads) as runner:
        report = evaluate_split(runner, sp, limit=limit)
    report["threads"] = threads
    report["target"] = str(target)
    return report
