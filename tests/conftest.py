"""Shared fixtures: tiny models and bundles built once per session."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from edgenlp_testing import tiny_model, write_task_dir


@pytest.fixture(scope="session")
def tiny_task_dir(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("task")
    rows_train = [
        ("a gripping , funny film", "pos"),
        ("dull and lifeless", "neg"),
        ('she said "wow" and\nmeant it', "pos"),
        ("the worst film of the year", "neg"),
    ]
    rows_dev = [("a joy to watch", "pos"), ("tedious", "neg"), ("not good , not bad", "neg")]
    return write_task_dir(d, train=rows_train, dev=rows_dev)


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    from edgenlp.models.registry import save_pretrained

    model, info = tiny_model()
    return save_pretrained(model, info, tmp_path_factory.mktemp("models") / "tiny")


def _export_tiny(tmp_path_factory, model_dir: Path, task_dir: Path, name: str) -> Path:
    """``model_dir`` exported for ``task_dir`` into a session bundle folder ``name`` (both formats, buckets 8/16/32)."""
    from edgenlp.data.tasks import load_task
    from edgenlp.export.api import ExportConfig, export_bundle
    from edgenlp.models.registry import load_model

    data = load_task(task_dir)
    model, info = load_model(model_dir, labels=data.labels)
    out = tmp_path_factory.mktemp("bundles") / name
    export_bundle(model, info, out, task=data, config=ExportConfig(max_seq_len=32, buckets=(8, 16, 32)))
    return out


@pytest.fixture(scope="session")
def tiny_bundle(tmp_path_factory, tiny_model_dir, tiny_task_dir) -> Path:
    return _export_tiny(tmp_path_factory, tiny_model_dir, tiny_task_dir, "tiny")


# --------------------------------------------------------------------------- dynamic models and bundles


@pytest.fixture(scope="session")
def dyn_task_dir(tmp_path_factory) -> Path:
    from edgenlp_testing import synthetic_sentiment

    return synthetic_sentiment(tmp_path_factory.mktemp("dyn-task"))


@pytest.fixture(scope="session")
def tiny_ft_dir(tmp_path_factory) -> Path:
    """A tiny uneven model directory whose recipe has a finetune step."""
    from edgenlp_testing import tiny_finetuned
    from edgenlp.models.registry import save_pretrained

    model, info = tiny_finetuned()
    return save_pretrained(model, info, tmp_path_factory.mktemp("models") / "tiny-ft")


@pytest.fixture(scope="session")
def tiny_dynamic_dir(tmp_path_factory, tiny_ft_dir, dyn_task_dir) -> Path:
    """``make_dynamic`` on the tiny model: exits after every layer, learned token thresholds (seconds)."""
    from edgenlp.data.tasks import load_task
    from edgenlp.dynamic.api import make_dynamic
    from edgenlp.dynamic.config import DynamicConfig
    from edgenlp.models.registry import load_model

    model, info = load_model(tiny_ft_dir)
    config = DynamicConfig(tokens="ltp", val_rows=20, train_limit=60, epochs=3, token_epochs=1, max_seq_len=32,
                           batch_size=16, max_drop=5.0)
    res = make_dynamic(model, info, load_task(dyn_task_dir), config, device="cpu")
    return res.save(tmp_path_factory.mktemp("models") / "tiny-dyn")


@pytest.fixture(scope="session")
def tiny_dynamic_bundle(tmp_path_factory, tiny_dynamic_dir, dyn_task_dir) -> Path:
    """The dynamic model exported as a model directory is (through its recipe): segments in both formats."""
    return _export_tiny(tmp_path_factory, tiny_dynamic_dir, dyn_task_dir, "tiny-dyn")


@pytest.fixture(scope="session")
def tiny_static_bundle(tmp_path_factory, tiny_ft_dir, dyn_task_dir) -> Path:
    """The same base model exported as a plain static bundle."""
    return _export_tiny(tmp_path_factory, tiny_ft_dir, dyn_task_dir, "tiny-static")


@pytest.fixture
def fake_calibrate(monkeypatch):
    """``calibrate()`` replaced by a synthetic table of the grid it was asked for; records each call.

    ``compress --target host`` calibrates an uncalibrated machine first (a real grid of
    ExecuTorch programs: minutes); tests of the pipeline's other stages use this table instead.
    """
    from costmodel_testing import synthetic_observations

    from edgenlp.targets import calibrate as cal
    from edgenlp.targets.costmodel import CostTable

    calls: list[dict] = []

    def fake(**kw):
        calls.append(kw)
        for i, (_, prec) in enumerate(kw["runtime_precisions"]):
            kw["on_step"](i, len(kw["runtime_precisions"]), f"fake {prec}")
        precs = tuple(p for _, p in kw["runtime_precisions"])
        return CostTable(synthetic_observations(precisions=precs, threads=kw["threads"]), {"cpu": "this one"}, "host",
                         {"measured": [f"executorch/{p}" for p in precs], "grid": kw["grid"], "fp32_gemm_gflops": 33.0})

    monkeypatch.setattr(cal, "calibrate", fake)
    return calls
