"""Fixtures for the board tests: runner builds, a host reference, a throw-away sshd, a fake adb."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # sshd.py


@pytest.fixture(scope="session")
def aarch64_runner() -> Path:
    """runtime/build/aarch64 (built or brought up to date; make is incremental)."""
    for tool in ("aarch64-linux-gnu-g++", "qemu-aarch64"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} missing: run `bash runtime/setup_deps.sh`")
    from native_testing import build

    return build("--arch", "aarch64")


@pytest.fixture(scope="session")
def host_runner() -> Path:
    from native_testing import build

    return build()


@pytest.fixture(scope="module")
def sshd(tmp_path_factory):
    from sshd import start_sshd

    server = start_sshd(tmp_path_factory.mktemp("sshd"))
    if isinstance(server, str):
        pytest.skip(f"no local sshd: {server}")
    yield server
    server.stop()


@pytest.fixture
def fake_adb(tmp_path, monkeypatch):
    """A fake `adb` first on PATH; returns (device root standing in for /data/local/tmp, argv log)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shutil.copy(HERE / "fake_adb.sh", bin_dir / "adb")
    root = tmp_path / "device-tmp"
    root.mkdir()
    log = tmp_path / "adb.log"
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_ADB_ROOT", str(root))
    monkeypatch.setenv("FAKE_ADB_LOG", str(log))
    monkeypatch.setenv("FAKE_ADB_MODE", "ok")
    return root, log


@pytest.fixture(scope="session")
def board_bundle(tmp_path_factory, tiny_task_dir) -> Path:
    """A small random BERT bundle (2 layers, hidden 256, FFN 1024; .pte only, methods for 16 and 64 tokens)."""
    from edgenlp_testing import tiny_model

    from edgenlp.data.tasks import load_task
    from edgenlp.export.api import ExportConfig, export_bundle

    data = load_task(tiny_task_dir)
    model, info = tiny_model(data.labels, hidden=256, num_heads=4, ffn=1024, max_positions=128)
    out = tmp_path_factory.mktemp("bundles") / "small"
    export_bundle(model, info, out, task=data, config=ExportConfig(max_seq_len=64, buckets=(16, 64), formats=("pte",)))
    return out
