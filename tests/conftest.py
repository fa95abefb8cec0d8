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


@pytest.fixture(scope="session")
def tiny_bundle(tmp_path_factory, tiny_model_dir, tiny_task_dir) -> Path:
    from edgenlp.data.tasks import load_task
    from edgenlp.export.api import ExportConfig, export_bundle
    from edgenlp.models.registry import load_model

    data = load_task(tiny_task_dir)
    model, info = load_model(tiny_model_dir, labels=data.labels)
    out = tmp_path_factory.mktemp("bundles") / "tiny"
    export_bundle(model, info, out, task=data, config=ExportConfig(max_seq_len=32, buckets=(8, 16, 32)))
    return out
