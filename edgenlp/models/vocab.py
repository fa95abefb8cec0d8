"""A trimmed vocabulary as arithmetic: which original token ids a model's table keeps.

A model whose word-embedding table holds only some rows takes *new* ids: the
new id of a kept token is its index in ``kept`` (ascending original ids), and
every other token becomes the unk token's new id. Tokenizers still split with
the full ``vocab.txt`` and then remap. :class:`IdRemap` is that lookup; the
file that carries it in a bundle (``vocab_map.json``) is
:class:`edgenlp.bundle.VocabMap`.

>>> r = IdRemap((0, 100, 101, 102, 2000), source_vocab_size=30522, unk_old_id=100)
>>> r.apply([101, 2000, 7, 102]), r.unk_id
([2, 4, 1, 3], 1)
"""

from __future__ import annotations

from typing import Iterable, Sequence

import numpy as np


def kept_token_ids(tokenizer, texts: Iterable[str]) -> tuple[int, ...]:
    """Ascending ids of every token in ``texts`` (untruncated) plus the tokenizer's special tokens."""
    seen = set(int(i) for i in tokenizer.all_special_ids)
    texts = list(texts)
    for start in range(0, len(texts), 4096):
        for ids in tokenizer(texts[start : start + 4096], add_special_tokens=True)["input_ids"]:
            seen.update(ids)
    return tuple(sorted(seen))


class IdRemap:
    """Original (full-vocabulary) id -> new id of a trimmed table.

    ``kept`` are the original ids the table keeps, ascending; ``unk_old_id``
    (the unk token's original id) must be among them. Raises ``ValueError``
    for ids that are not ascending, out of range, or a missing unk token.
    """

    def __init__(self, kept: Sequence[int], *, source_vocab_size: int, unk_old_id: int) -> None:
        self.kept = tuple(int(i) for i in kept)
        self.source_vocab_size = int(source_vocab_size)
        if not self.kept:
            raise ValueError("a trimmed vocabulary keeps at least the special tokens")
        if self.kept[0] < 0 or self.kept[-1] >= self.source_vocab_size or any(a >= b for a, b in zip(self.kept, self.kept[1:])):
            raise ValueError(f"kept ids must be ascending and below the vocabulary size {self.source_vocab_size}")
        self.lookup = np.full(self.source_vocab_size, -1, dtype=np.int64)
        self.lookup[list(self.kept)] = np.arange(len(self.kept))
        if not 0 <= unk_old_id < self.source_vocab_size or self.lookup[unk_old_id] < 0:
            raise ValueError(f"the unk token (id {unk_old_id}) must be kept")
        self.unk_id = int(self.lookup[unk_old_id])  # NEW id every dropped token maps to
        self.lookup[self.lookup < 0] = self.unk_id

    def __len__(self) -> int:
        return len(self.kept)

    def apply(self, ids: Sequence[int]) -> list[int]:
        """Original ids -> new ids (ids not kept become the unk token's new id)."""
        ids = np.asarray(list(ids), dtype=np.int64)
        inside = (ids >= 0) & (ids < self.source_vocab_size)
        out = np.full(ids.shape, self.unk_id, dtype=np.int64)
        out[inside] = self.lookup[ids[inside]]
        return [int(x) for x in out]

    remap = apply  # the name the bundle readers used
