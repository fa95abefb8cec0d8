"""Fixtures for the native runtime tests: host build, test bundles, reference tokenizer."""

from __future__ import annotations

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
DATA = REPO.parent / "shared" / "data"


def build(*args: str) -> Path:
    """Run runtime/build.sh with args; return the build dir it printed."""
    if shutil.which("cmake") is None or shutil.which("g++") is None:
        pytest.skip("cmake/g++ missing: run `bash runtime/setup_deps.sh --host`")
    proc = subprocess.run(["bash", str(RUNTIME / "build.sh"), *args], capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        raise AssertionError(f"runtime/build.sh {' '.join(args)} failed:\n{proc.stderr[-4000:]}")
    return Path(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="session")
def host_build() -> Path:
    """The host build dir; (re)builds when sources are newer (make is incremental, ~1 s when up to date)."""
    return build()


@pytest.fixture(scope="session")
def tiny_bundle(tmp_path_factory, host_build) -> Path:
    """A random tiny BERT bundle with forward_32 and forward_128 methods and the MiniLM vocab."""
    return write_bundle(tmp_path_factory.mktemp("bundles") / "tiny")


@pytest.fixture(scope="session")
def tok_bundle(tmp_path_factory, host_build) -> Path:
    """A tokenizer-only bundle (no model.pte) with the MiniLM vocab, max_seq_len 512."""
    return write_bundle(tmp_path_factory.mktemp("bundles") / "tok", with_pte=False, max_seq_len=512)


@pytest.fixture(scope="session")
def hf_tokenizer():
    from transformers import BertTokenizerFast

    return BertTokenizerFast(str(MINILM_VOCAB), do_lower_case=True)


def hf_ids(tok, texts, *, max_len: int) -> list[list[int]]:
    return tok(list(texts), truncation=True, max_length=max_len)["input_ids"]
