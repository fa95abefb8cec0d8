"""Helpers shared by the tests (importable: tests/ is on pytest's pythonpath)."""

from __future__ import annotations

import csv
from pathlib import Path

TINY = dict(num_layers=2, hidden=64, num_heads=4, ffn=128, max_positions=64)


def tiny_model(labels=("neg", "pos"), *, family="bert", seed=0, **overrides):
    from edgenlp.models.encoder import EncoderClassifier, EncoderShape, ModelInfo
    from edgenlp.models.registry import DEFAULT_TOKENIZER, default_vocab_file

    kw = {**TINY, **overrides}
    if family == "distilbert":
        kw.setdefault("type_vocab_size", 0)
    shape = EncoderShape.uniform(family=family, **kw)
    model = EncoderClassifier(shape, len(labels), labels=tuple(labels)).init_weights(std=0.2, seed=seed).eval()
    info = ModelInfo("tiny", "test", shape, False, str(default_vocab_file()), dict(DEFAULT_TOKENIZER))
    return model, info


def write_task_dir(folder: Path, *, train: list[tuple[str, str]], dev: list[tuple[str, str]]) -> Path:
    """A task folder with ``train.tsv`` and ``dev.tsv`` (header text/label, standard CSV quoting)."""
    for name, rows in (("train.tsv", train), ("dev.tsv", dev)):
        with open(folder / name, "w", newline="") as f:
            w = csv.writer(f, delimiter="\t")
            w.writerow(["text", "label"])
            w.writerows(rows)
    return folder
