"""Cheap fine-tuning: Learners (with priming and rank from priming), FAR, and baselines.

>>> from edgenlp.finetune import FinetuneConfig, LearnerConfig, finetune   # doctest: +SKIP
>>> res = finetune(model, info, task, FinetuneConfig(method="learner", learner=LearnerConfig(rank=16)))  # doctest: +SKIP
>>> res.model, res.report                                                   # doctest: +SKIP

The names below load on first use: importing the package (e.g. to read a
recipe's ``FinetuneConfig``) does not import torch.
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "METHODS": "config", "FarConfig": "config", "FinetuneConfig": "config", "LearnerConfig": "config",
    "FinetuneResult": "trainer", "finetune": "trainer",
}  # fmt: skip

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
