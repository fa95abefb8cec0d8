"""Fixtures for the native runtime tests: host build, test bundles, reference tokenizer."""

from __future__ import annotations

from pathlib import Path

import pytest

from native_testing import (DATA, MINILM_VOCAB, SENTENCES, build, cached_bundle, trim_ids, unpack,  # noqa: F401
                            write_bundle)


@pytest.fixture(scope="session")
def host_build() -> Path:
    """The host build dir; (re)builds when sources are newer (make is incremental, ~1 s when up to date)."""
    return build()


@pytest.fixture(scope="session")
def host_sdk(tmp_path_factory, host_build) -> Path:
    """The host SDK archive (build.sh --package) unpacked outside the source tree: what an app vendors."""
    return unpack(build("--package"), tmp_path_factory.mktemp("sdk-host"))


@pytest.fixture(scope="session")
def tiny_bundle(tmp_path_factory, host_build) -> Path:
    """A random tiny BERT bundle with forward_32 and forward_128 methods and the MiniLM vocab."""
    return write_bundle(tmp_path_factory.mktemp("bundles") / "tiny")


@pytest.fixture(scope="session")
def dynamic_bundle(tmp_path_factory):
    """The tiny dynamic bundle of tests/conftest.py (the same session build: edgenlp_testing builds it once)."""
    from edgenlp_testing import session_tiny_dynamic_bundle

    return session_tiny_dynamic_bundle(tmp_path_factory)


@pytest.fixture(scope="session")
def tok_bundle(tmp_path_factory, host_build) -> Path:
    """A tokenizer-only bundle (no model.pte) with the MiniLM vocab, max_seq_len 512."""
    return write_bundle(tmp_path_factory.mktemp("bundles") / "tok", with_pte=False, max_seq_len=512)


@pytest.fixture(scope="session")
def hf_tokenizer():
    """BertTokenizerFast over the MiniLM vocab, built like the Python runners build it (checked to use the vocab)."""
    from edgenlp.models.tokenizer import build_tokenizer

    tok = build_tokenizer(MINILM_VOCAB, {"do_lower_case": True})
    assert tok("hello world")["input_ids"] == [101, 7592, 2088, 102]
    return tok


# Variants: name -> write_bundle arguments (besides vocab_map).
VARIANTS = {
    "int8": {"linears": "int8", "embeddings": "int8"},
    "int4": {"linears": "int4", "embeddings": "int4"},
}


def _tsv(split: str, n: int) -> list[str]:
    """The first ``n`` texts of the shared SST-2 split; skips the test, naming the file, when it is missing."""
    path = DATA / "sst2" / f"{split}.tsv"
    if not path.is_file():
        pytest.skip(f"needs {path} (the shared data; set EDGENLP_DATA_DIR)")
    from edgenlp.data.tasks import read_tsv

    return list(read_tsv(path).texts)[:n]


@pytest.fixture(scope="session")
def train_texts() -> list[str]:
    return _tsv("train", 200)


@pytest.fixture(scope="session")
def eval_texts() -> list[str]:
    return SENTENCES + _tsv("dev", 24)


@pytest.fixture(scope="session")
def kept(hf_tokenizer, train_texts) -> list[int]:
    return trim_ids(train_texts, hf_tokenizer)


@pytest.fixture(scope="session")
def quant_bundles(host_build, kept):
    out = {name: cached_bundle(f"tiny-{name}", **kw) for name, kw in VARIANTS.items()}
    out["trimmed"] = cached_bundle("tiny-trimmed", linears="int8", embeddings="int4", vocab_map=kept)
    return out


