"""Structured pruning that physically shrinks the model.

Two stages separated by data: a method (``cofi``, ``fast``, ``importance``)
learns a :class:`MaskDict`; :func:`apply_masks` (surgery) turns it into a plain
smaller :class:`~edgenlp.models.encoder.EncoderClassifier`. :func:`prune` runs
both and reports; ``edgenlp prune`` is its CLI.
"""

from edgenlp.prune.api import PruneResult, prune
from edgenlp.prune.config import PruneConfig
from edgenlp.prune.masks import Gates, LayerMask, MaskDict, MaskError, masked_forward
from edgenlp.prune.surgery import apply_masks

__all__ = ["Gates", "LayerMask", "MaskDict", "MaskError", "PruneConfig", "PruneResult", "apply_masks", "masked_forward",
           "prune"]
