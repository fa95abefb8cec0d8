"""Vocabulary trimming: keep the token ids a task's training data uses, remap the rest to [UNK].

The bundle keeps the full ``vocab.txt`` (so WordPiece splits words exactly as
the untrimmed model saw them) and adds ``vocab_map.json``::

    {"format": "edgenlp-vocab-map", "version": 1,
     "source_vocab_size": 30522,     # lines of vocab.txt
     "unk_id": 100,                  # NEW id every dropped token maps to
     "kept": [0, 100, 101, 102, 103, 1005, ...]}   # ascending OLD ids

The new id of a kept token is its index in ``kept``; any other id becomes
``unk_id``. Tokenizers (Python and native) tokenize with ``vocab.txt``, then
map. The manifest names the file under ``tokenizer.id_map``.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np
import torch
from torch import nn

from edgenlp.errors import BundleError

MAP_FORMAT = "edgenlp-vocab-map"
MAP_FILE = "vocab_map.json"


def kept_token_ids(tokenizer, texts: Iterable[str]) -> tuple[int, ...]:
    """Ascending ids of every token in ``texts`` (untruncated) plus the tokenizer's special tokens."""
    seen = set(int(i) for i in tokenizer.all_special_ids)
    texts = list(texts)
    for start in range(0, len(texts), 4096):
        for ids in tokenizer(texts[start : start + 4096], add_special_tokens=True)["input_ids"]:
            seen.update(ids)
    return tuple(sorted(seen))


def trim_model(model, kept: Sequence[int]):
    """A copy of ``model`` whose word-embedding table holds only the rows ``kept`` (new id = index)."""
    kept_t = torch.as_tensor(list(kept), dtype=torch.long)
    m = copy.deepcopy(model)
    old = m.embeddings.word
    new = nn.Embedding(len(kept_t), old.embedding_dim)
    with torch.no_grad():
        new.weight.copy_(old.weight[kept_t])
    m.embeddings.word = new
    m.shape = dataclasses.replace(m.shape, vocab_size=len(kept_t))
    return m


class IdMap:
    """Old (full-vocabulary) id -> new id lookup of a trimmed bundle."""

    def __init__(self, kept: Sequence[int], *, source_vocab_size: int, unk_old_id: int) -> None:
        self.kept = tuple(int(i) for i in kept)
        self.source_vocab_size = int(source_vocab_size)
        self.lookup = np.full(self.source_vocab_size, -1, dtype=np.int64)
        self.lookup[list(self.kept)] = np.arange(len(self.kept))
        self.unk_id = int(self.lookup[unk_old_id])
        self.lookup[self.lookup < 0] = self.unk_id

    def __len__(self) -> int:
        return len(self.kept)

    def apply(self, ids: Sequence[int]) -> list[int]:
        return [int(x) for x in self.lookup[np.asarray(ids, dtype=np.int64)]]

    def to_dict(self) -> dict:
        return {"format": MAP_FORMAT, "version": 1, "source_vocab_size": self.source_vocab_size,
                "unk_id": self.unk_id, "kept": list(self.kept)}

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), separators=(",", ":")) + "\n")

    @classmethod
    def load(cls, path: str | Path, *, vocab_size: int | None = None) -> "IdMap":
        """Read and check ``vocab_map.json``; ``vocab_size`` = the model's (trimmed) table rows."""
        path = Path(path)
        try:
            d = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise BundleError(f"{path}: unreadable vocabulary map ({exc})") from None
        if not isinstance(d, dict) or d.get("format") != MAP_FORMAT or d.get("version") != 1:
            raise BundleError(f"{path}: not an {MAP_FORMAT} version 1 file")
        kept, n, unk = d.get("kept"), d.get("source_vocab_size"), d.get("unk_id")
        if not (isinstance(kept, list) and kept and all(isinstance(i, int) and not isinstance(i, bool) for i in kept)):
            raise BundleError(f"{path}: 'kept' must be a non-empty list of token ids")
        if not isinstance(n, int) or kept[0] < 0 or kept[-1] >= n or any(a >= b for a, b in zip(kept, kept[1:])):
            raise BundleError(f"{path}: 'kept' must be ascending ids below source_vocab_size={n!r}")
        if not isinstance(unk, int) or not 0 <= unk < len(kept):
            raise BundleError(f"{path}: unk_id {unk!r} is not a new id (0..{len(kept) - 1})")
        if vocab_size is not None and len(kept) != vocab_size:
            raise BundleError(f"{path}: keeps {len(kept)} tokens but the model's embedding table has {vocab_size} rows")
        return cls(kept, source_vocab_size=n, unk_old_id=kept[unk])
