"""The native WordPiece tokenizer reproduces BertTokenizerFast ids exactly."""

from __future__ import annotations

import pytest

from adversarial import ADVERSARIAL
from native_testing import DATA, hf_ids

pytestmark = pytest.mark.native


def _dev_texts(task: str) -> list[str]:
    from edgenlp.data.tasks import read_tsv

    path = DATA / task / "dev.tsv"
    if not path.is_file():
        pytest.skip(f"{path} missing")
    return list(read_tsv(path).texts)


@pytest.mark.parametrize("task", ["sst2", "banking77"])
def test_full_dev_set_matches_hf(task, tok_bundle, hf_tokenizer):
    from edgenlp.run.native import native_tokenize

    texts = _dev_texts(task)
    got = native_tokenize(tok_bundle, texts)
    want = hf_ids(hf_tokenizer, texts, max_len=512)
    bad = [(t, g, w) for t, g, w in zip(texts, got, want) if g != w]
    assert not bad, f"{len(bad)}/{len(texts)} differ, first: {bad[0]}"


@pytest.mark.parametrize("text", ADVERSARIAL, ids=range(len(ADVERSARIAL)))
def test_adversarial_matches_hf(text, tok_bundle, hf_tokenizer):
    from edgenlp.run.native import native_tokenize

    assert native_tokenize(tok_bundle, [text]) == hf_ids(hf_tokenizer, [text], max_len=512)


def test_truncation_matches_hf(tiny_bundle, hf_tokenizer):
    from edgenlp.run.native import native_tokenize

    texts = ["a gripping film " * 100, "x" * 100_000, ("ab " * 50_000)]
    assert native_tokenize(tiny_bundle, texts) == hf_ids(hf_tokenizer, texts, max_len=128)


def test_every_bmp_character_matches_hf(tok_bundle, hf_tokenizer):
    from edgenlp.run.native import native_tokenize

    # all of the BMP (minus surrogates) in chunks, each character between letters
    chars = [chr(c) for c in range(0x80, 0x10000) if not 0xD800 <= c <= 0xDFFF]
    texts = ["".join(f"a{c}b " for c in chars[i : i + 100]) for i in range(0, len(chars), 100)]
    got = native_tokenize(tok_bundle, texts)
    want = hf_ids(hf_tokenizer, texts, max_len=512)
    bad = [t for t, g, w in zip(texts, got, want) if g != w]
    assert not bad, f"{len(bad)} chunks differ, first: {bad[0][:80]!r}"


def test_invalid_utf8_is_an_error_not_a_crash(tok_bundle):
    from edgenlp.errors import EdgeNLPError
    from edgenlp.run.native import Status, native_tokenize

    with pytest.raises(EdgeNLPError) as info:
        native_tokenize(tok_bundle, ["lone surrogate \ud800 here"])
    assert info.value.status == Status.ERR_INVALID_UTF8
    assert "invalid UTF-8" in str(info.value)
