"""Vocabulary trimming: keep the token ids a task's training data uses, remap the rest to [UNK].

:func:`trim_model` is the model transform (a smaller word-embedding table);
the id arithmetic is :class:`edgenlp.models.vocab.IdRemap` and the file a
bundle carries (``vocab_map.json``) is :class:`edgenlp.bundle.VocabMap`.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Sequence

import torch
from torch import nn

from edgenlp.models.vocab import IdRemap, kept_token_ids

__all__ = ["IdRemap", "kept_token_ids", "trim_model"]


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
