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


# dynamic models: an uneven (pruned-shaped) 3-layer model with a fine-tuning step in its recipe
TINY_UNEVEN = dict(heads=(4, 2, 3), ffn=(128, 96, 64))


def tiny_finetuned(labels=("neg", "pos"), *, seed=0):
    """A tiny uneven model whose recipe says it was fine-tuned (what ``edgenlp dynamic`` starts from)."""
    from dataclasses import replace

    from edgenlp.finetune.config import FinetuneConfig
    from edgenlp.models.encoder import EncoderClassifier, EncoderShape
    from edgenlp.recipe import Step

    base, info = tiny_model(labels, seed=seed)
    shape = EncoderShape(family="bert", vocab_size=base.shape.vocab_size, hidden=64, head_dim=16, max_positions=64,
                         **TINY_UNEVEN)
    model = EncoderClassifier(shape, len(labels), labels=tuple(labels)).init_weights(std=0.2, seed=seed).eval()
    return model, replace(info, shape=shape, recipe=(Step("finetune", FinetuneConfig(), {"dev": {}}),))


def synthetic_sentiment(folder: Path, *, rows: int = 80, seed: int = 0) -> Path:
    """A task folder of short made-up sentences of varied lengths (odd and even token counts)."""
    import random

    rng = random.Random(seed)
    good = ["great", "moving", "funny", "gripping", "lovely", "sharp"]
    bad = ["dull", "tedious", "flat", "boring", "messy", "weak"]
    filler = ["the", "film", "plot", "acting", "was", "really", "and", "a", "story", "of", "our", "time"]

    def sentence(label):
        words = [rng.choice(filler) for _ in range(rng.randint(1, 20))]
        words.insert(rng.randrange(len(words) + 1), rng.choice(good if label == "pos" else bad))
        return " ".join(words)

    def split(n):
        return [(sentence(l), l) for l in (rng.choice(["neg", "pos"]) for _ in range(n))]

    return write_task_dir(folder, train=split(rows), dev=split(rows // 4))
