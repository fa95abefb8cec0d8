"""Accuracy of a bundle measured through its runtime (not through PyTorch)."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from edgenlp.data.tasks import Split, load_task, read_tsv
from edgenlp.errors import EdgeNLPError
from edgenlp.metrics import classification_report
from edgenlp.run.base import Runner, get_runner


def evaluate_split(runner: Runner, split: Split, *, limit: int | None = None) -> dict:
    """Predict every text of ``split`` and score against its labels.

    A dynamic runner (segments) also reports ``exit_layers``, ``tokens_kept``
    and per-sentence ``latency_ms`` (:func:`dynamic_report`).
    """
    split = split.head(limit)
    gold = split.label_ids(runner.labels)
    t0 = time.perf_counter()
    details = runner.predict_details(split.texts) if hasattr(runner, "predict_details") else None
    logits = runner.predict_logits(split.texts) if details is None else np.stack([d.logits for d in details])
    seconds = time.perf_counter() - t0
    report = classification_report(logits.argmax(-1).tolist(), gold, num_labels=len(runner.labels))
    report.update(
        runtime=runner.name,
        data=split.path,
        seconds=round(seconds, 3),
        ms_per_text=round(1000 * seconds / len(split), 3),
    )
    if details is not None:
        report.update(dynamic_report(details, num_layers=runner.spec.num_layers, exits=runner.spec.exits))
    return report


def dynamic_report(details, *, num_layers: int, exits) -> dict:
    """``exit_layers`` (layer -> sentences that answered there), ``tokens_kept`` (per layer, the mean tokens
    it processed over the sentences that reached it; null when none did) and ``latency_ms`` per sentence
    (``mean``, ``p50``, ``p90``, ``max``, model only, tokenization excluded)."""
    layers = np.array([d.exit_layer for d in details])
    reached = np.zeros(num_layers)
    tokens = np.zeros(num_layers)
    for d in details:
        reached[: len(d.tokens)] += 1
        tokens[: len(d.tokens)] += d.tokens
    lat = np.array([d.latency_ms for d in details])
    return {
        "exit_layers": {str(l): int((layers == l).sum()) for l in exits},
        "mean_exit_layer": round(float(layers.mean()), 4),
        "tokens_kept": [round(float(t / r), 3) if r else None for t, r in zip(tokens, reached)],
        "latency_ms": {"mean": round(float(lat.mean()), 4), "p50": round(float(np.percentile(lat, 50)), 4),
                       "p90": round(float(np.percentile(lat, 90)), 4), "max": round(float(lat.max()), 4)},
    }


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
    **dynamic,
) -> dict:
    """Evaluate a bundle (or a model, with ``runtime="eager"``) on a task split or any TSV file.

    ``dynamic`` holds a dynamic bundle's options (``static``, ``exit_threshold``, ``keep``; see
    :mod:`edgenlp.run.dynamic`).
    """
    if data is None and task is None:
        raise EdgeNLPError("give --task (with --split) or --data FILE.tsv")
    if limit is not None and limit < 1:
        raise EdgeNLPError(f"--limit must be >= 1, got {limit}")
    sp = load_split(task=task, split=split, data=data, data_dir=data_dir)
    with get_runner(target, runtime=runtime, threads=threads, **dynamic) as runner:
        report = evaluate_split(runner, sp, limit=limit)
    report["threads"] = threads
    report["target"] = str(target)
    return report
