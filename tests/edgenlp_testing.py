"""Helpers shared by the tests (importable: tests/ is on pytest's pythonpath)."""

from __future__ import annotations

import contextlib
import csv
import os
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


def dynamic_texts(n: int = 36, *, seed: int = 3) -> list[str]:
    """``n`` made-up sentences of 1 to 28 words (3 to 30 tokens with [CLS]/[SEP]: both buckets of 8/32, odd and
    even lengths), in the vocabulary of :func:`synthetic_sentiment`, for comparing dynamic runtimes."""
    import random

    rng = random.Random(seed)
    words = ["great", "moving", "funny", "gripping", "lovely", "sharp", "dull", "tedious", "flat", "boring", "messy",
             "weak", "the", "film", "plot", "acting", "was", "really", "and", "a", "story", "of", "our", "time", ","]
    return [" ".join(rng.choice(words) for _ in range(1 + (i * 11) % 28)) for i in range(n)]


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


# --------------------------------------------------------------------------- session artifacts shared across test dirs
# tests/conftest.py's fixtures and runtime/tests (the qemu cross tests) ask for the same tiny dynamic bundle; a
# fixture of one conftest is invisible to the other, so both call these, which build each artifact once per
# pytest session (keyed by the session's base temp dir) in whichever directory asks first.
# Under pytest-xdist each worker is its own session: the first worker to ask builds the artifact, the others wait on
# a file lock in the folder the workers' base temp dirs share, then read its path from there.
_SESSION: dict[tuple[str, str], Path] = {}


@contextlib.contextmanager
def exclusive(path: Path):
    """Hold an exclusive lock on ``path`` (created): test processes (pytest-xdist workers) take turns."""
    import fcntl

    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _once(tmp_path_factory, name: str, build) -> Path:
    key = (str(tmp_path_factory.getbasetemp()), name)
    if key in _SESSION:
        return _SESSION[key]
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        _SESSION[key] = build()
        return _SESSION[key]
    shared = tmp_path_factory.getbasetemp().parent  # pytest-N/, holding every worker's popen-gwK/
    record = shared / f"session-{name}.path"
    with exclusive(shared / f".session-{name}.lock"):
        path = Path(record.read_text()) if record.is_file() else None
        if path is None or not path.exists():
            path = Path(build())
            tmp = record.with_suffix(".tmp")
            tmp.write_text(str(path))
            os.replace(tmp, record)
    _SESSION[key] = path
    return path


DYN_BUCKETS = (8, 32)  # the dynamic and static session bundles: two buckets, so pruned tokens re-bucket (32 -> 8)


def export_tiny(tmp_path_factory, model_dir: Path, task_dir: Path, name: str, buckets: tuple[int, ...] = (8, 16, 32)) -> Path:
    """``model_dir`` exported for ``task_dir`` into a session bundle folder ``name`` (both formats, ``buckets``)."""
    from edgenlp.data.tasks import load_task
    from edgenlp.export.api import ExportConfig, export_bundle
    from edgenlp.models.registry import load_model

    data = load_task(task_dir)
    model, info = load_model(model_dir, labels=data.labels)
    out = tmp_path_factory.mktemp("bundles") / name
    export_bundle(model, info, out, task=data, config=ExportConfig(max_seq_len=32, buckets=buckets))
    return out


def session_dyn_task_dir(tmp_path_factory) -> Path:
    return _once(tmp_path_factory, "dyn-task", lambda: synthetic_sentiment(tmp_path_factory.mktemp("dyn-task")))


def session_tiny_ft_dir(tmp_path_factory) -> Path:
    """A tiny uneven model directory whose recipe has a finetune step."""
    def build():
        from edgenlp.models.registry import save_pretrained

        model, info = tiny_finetuned()
        return save_pretrained(model, info, tmp_path_factory.mktemp("models") / "tiny-ft")

    return _once(tmp_path_factory, "tiny-ft", build)


def session_tiny_dynamic_dir(tmp_path_factory) -> Path:
    """``make_dynamic`` on the tiny model: exits after every layer, learned token thresholds (seconds)."""
    def build():
        from edgenlp.data.tasks import load_task
        from edgenlp.dynamic.api import make_dynamic
        from edgenlp.dynamic.config import DynamicConfig
        from edgenlp.models.registry import load_model

        model, info = load_model(session_tiny_ft_dir(tmp_path_factory))
        config = DynamicConfig(tokens="ltp", val_rows=20, train_limit=60, epochs=3, token_epochs=1, max_seq_len=32,
                               batch_size=16, max_drop=5.0)
        res = make_dynamic(model, info, load_task(session_dyn_task_dir(tmp_path_factory)), config, device="cpu")
        return res.save(tmp_path_factory.mktemp("models") / "tiny-dyn")

    return _once(tmp_path_factory, "tiny-dyn", build)


def session_tiny_dynamic_bundle(tmp_path_factory) -> Path:
    """The dynamic model exported as a model directory is (through its recipe): segments in both formats."""
    return _once(tmp_path_factory, "tiny-dyn-bundle", lambda: export_tiny(
        tmp_path_factory, session_tiny_dynamic_dir(tmp_path_factory), session_dyn_task_dir(tmp_path_factory), "tiny-dyn",
        DYN_BUCKETS))


SPARSE_LINEARS = ("layers.0.query", "layers.0.ffn_in", "layers.0.ffn_out")


def session_sparse_bundles(tmp_path_factory) -> dict[str, Path]:
    """A 1-layer tiny model with 80% of the 1x4 blocks of three linears zeroed, exported fp32 and int8 (built once).

    The query and both FFN linears run edgenlp's sparse ops; the other linears stay in XNNPACK.
    """
    def build_one(precision: str) -> Path:
        from dataclasses import replace

        from edgenlp.data.tasks import load_task
        from edgenlp.export.api import ExportConfig, export_bundle
        from edgenlp.prune.config import SparsifyConfig
        from edgenlp.prune.sparsity import apply_block_masks, block_masks
        from edgenlp.quantize.api import quantize_model
        from edgenlp.quantize.config import QuantizeConfig
        from edgenlp.recipe import Step

        task = load_task(session_dyn_task_dir(tmp_path_factory))
        model, info = tiny_model(labels=tuple(task.labels), num_layers=1)
        names = SPARSE_LINEARS
        apply_block_masks(model, block_masks(model, 0.8, "1x4", names))
        step = Step("sparsify", SparsifyConfig(sparsity=0.8, block="1x4"), {"block": "1x4", "linears": list(names)})
        info = replace(info, recipe=(*info.recipe, step))
        if precision == "int8":
            model, info = quantize_model(model, info, QuantizeConfig(scheme="int8"))
        out = tmp_path_factory.mktemp("bundles") / f"sparse-{precision}"
        export_bundle(model, info, out, task=task, config=ExportConfig(max_seq_len=32, buckets=(32,), parity_samples=8))
        return out

    return {p: _once(tmp_path_factory, f"sparse-{p}", lambda p=p: build_one(p)) for p in ("fp32", "int8")}
