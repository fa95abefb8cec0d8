"""Helpers for the native runtime tests (importable: runtime/tests is on pytest's pythonpath)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

RUNTIME = Path(__file__).resolve().parents[1]
REPO = RUNTIME.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))

from make_test_bundle import MINILM_VOCAB, write_bundle  # noqa: E402

HOST_BUILD = RUNTIME / "build" / "x86_64"
from edgenlp.data.tasks import default_data_dir  # noqa: E402

DATA = default_data_dir()  # $EDGENLP_DATA_DIR or ../shared/data, as the CLI finds it


def build(*args: str) -> Path:
    """Run runtime/build.sh with args; return the build dir it printed."""
    if shutil.which("cmake") is None or shutil.which("g++") is None:
        pytest.skip("cmake/g++ missing: run `bash runtime/setup_deps.sh --host`")
    env = dict(os.environ, PYTHON=os.environ.get("PYTHON", sys.executable))  # the interpreter running the tests
    proc = subprocess.run(["bash", str(RUNTIME / "build.sh"), *args], capture_output=True, text=True, timeout=900, env=env)
    if proc.returncode != 0:
        raise AssertionError(f"runtime/build.sh {' '.join(args)} failed:\n{proc.stderr[-4000:]}")
    return Path(proc.stdout.strip().splitlines()[-1])


def hf_ids(tok, texts, *, max_len: int) -> list[list[int]]:
    return tok(list(texts), truncation=True, max_length=max_len)["input_ids"]
