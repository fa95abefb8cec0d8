"""The Hugging Face WordPiece tokenizer built from a vocabulary and settings dict.

Bundles and model directories carry ``vocab.txt`` plus the settings recorded in
the manifest (``do_lower_case``, ``strip_accents``, ...); this builds the
matching fast tokenizer. The native runtime implements the same rules in C++.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np


def build_tokenizer(vocab_file: str | Path, settings: dict | None = None):
    """A ``BertTokenizerFast`` for ``vocab_file`` with the given settings.

    The vocabulary is passed as ``vocab`` (transformers 5 silently ignores a
    ``vocab_file=`` keyword and builds an empty vocabulary); the result is
    checked so that ``[CLS]`` maps to its line number in ``vocab_file``.
    """
    from transformers import BertTokenizerFast

    s = settings or {}
    cls_token = s.get("cls_token", "[CLS]")
    tok = BertTokenizerFast(
        vocab=str(vocab_file),
        do_lower_case=s.get("do_lower_case", True),
        strip_accents=s.get("strip_accents"),
        tokenize_chinese_chars=s.get("tokenize_chinese_chars", True),
        unk_token=s.get("unk_token", "[UNK]"),
        sep_token=s.get("sep_token", "[SEP]"),
        pad_token=s.get("pad_token", "[PAD]"),
        cls_token=cls_token,
        mask_token=s.get("mask_token", "[MASK]"),
    )
    with open(vocab_file, encoding="utf-8") as f:
        expected = next((i for i, line in enumerate(f) if line.rstrip("\n") == cls_token), None)
    if expected is None or tok.convert_tokens_to_ids(cls_token) != expected:
        raise ValueError(f"{vocab_file}: tokenizer does not use this vocabulary ({cls_token} missing or misplaced)")
    return tok


def token_ids(tokenizer, texts, *, max_len: int) -> list[list[int]]:
    """Ids with ``[CLS]``/``[SEP]`` for each text, truncated to ``max_len`` tokens."""
    return tokenizer(list(texts), truncation=True, max_length=max_len, return_token_type_ids=False)["input_ids"]


def pad_batch(ids: list[list[int]], *, pad_id: int = 0, length: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Pad id lists to ``length`` (default: the longest); returns int64 ids and mask ``[N, L]``."""
    n = max((len(x) for x in ids), default=0)
    length = n if length is None else length
    if length < n:
        raise ValueError(f"cannot pad {n} tokens into length {length}")
    out = np.full((len(ids), length), pad_id, dtype=np.int64)
    mask = np.zeros((len(ids), length), dtype=np.int64)
    for row, x in enumerate(ids):
        out[row, : len(x)] = x
        mask[row, : len(x)] = 1
    return out, mask


def encode(tokenizer, texts, *, max_len: int, pad_to: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Token ids and attention mask (int64 ``[N, L]``) truncated to ``max_len``; padded to ``pad_to`` or the longest."""
    return pad_batch(token_ids(tokenizer, texts, max_len=max_len), pad_id=tokenizer.pad_token_id or 0, length=pad_to)
