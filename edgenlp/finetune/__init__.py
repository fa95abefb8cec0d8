"""Cheap fine-tuning: Learners (with priming and rank from priming), FAR, and baselines.

>>> from edgenlp.finetune import FinetuneConfig, LearnerConfig, finetune   # doctest: +SKIP
>>> res = finetune(model, info, task, FinetuneConfig(method="learner", learner=LearnerConfig(rank=16)))  # doctest: +SKIP
>>> res.model, res.report                                                   # doctest: +SKIP

The names below load on first use: importing the package (e.g. to read a
recipe's ``FinetuneConfig``) does not import torch.
"""

from __future__ import annotations

from edgenlp.utils import lazy_exports

_EXPORTS = {
    "METHODS": "config", "FarConfig": "config", "FinetuneConfig": "config", "LearnerConfig": "config",
    "FinetuneResult": "trainer", "finetune": "trainer",
}  # fmt: skip

__all__ = sorted(_EXPORTS)


__getattr__ = lazy_exports(__name__, _EXPORTS)
