"""Cheap fine-tuning: Learners (with priming and rank from priming), FAR, and baselines.

>>> from edgenlp.finetune import FinetuneConfig, LearnerConfig, finetune   # doctest: +SKIP
>>> res = finetune(model, info, task, FinetuneConfig(method="learner", learner=LearnerConfig(rank=16)))  # doctest: +SKIP
>>> res.model, res.report                                                   # doctest: +SKIP
"""

from edgenlp.finetune.config import METHODS, FarConfig, FinetuneConfig, LearnerConfig
from edgenlp.finetune.trainer import FinetuneResult, finetune

__all__ = ["METHODS", "FarConfig", "FinetuneConfig", "FinetuneResult", "LearnerConfig", "finetune"]
