"""Structured pruning that physically shrinks the model.

Two stages separated by data: a method (``cofi``, ``fast``, ``importance``,
each with its own config: :class:`CofiConfig`, :class:`FastConfig`,
:class:`ImportanceConfig`) learns a :class:`MaskDict`; :func:`apply_masks` (surgery) turns it into a plain
smaller :class:`~edgenlp.models.encoder.EncoderClassifier`. :func:`prune` runs
both and reports; ``edgenlp prune`` is its CLI.

The names below load on first use: importing the package (e.g. to read a
recipe's prune step) does not import torch.
"""

from __future__ import annotations

from edgenlp.utils import lazy_exports

_EXPORTS = {
    "PruneResult": "api", "prune": "api", "register_prune_method": "api",
    "PruneConfig": "config", "CofiConfig": "config", "FastConfig": "config", "ImportanceConfig": "config",
    "prune_config": "config", "DistillConfig": "config",
    "DistillResult": "recovery", "distill": "recovery", "recover": "recovery",
    "Gates": "masks", "LayerMask": "masks", "MaskDict": "masks", "MaskError": "masks", "masked_forward": "masks",
    "apply_masks": "surgery",
}  # fmt: skip

__all__ = sorted(_EXPORTS)


__getattr__ = lazy_exports(__name__, _EXPORTS)
