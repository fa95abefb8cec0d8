"""Dynamic inference: early exits and learned token pruning.

A model transform beside pruning and quantization. :func:`make_dynamic`
trains exit heads (distilled from the final classifier, backbone frozen by
default) and per-layer token thresholds (a soft mask, then hardened), then
calibrates the exit threshold and the token thresholds' scale on a
validation split carved from the training data to a maximum accuracy drop.
:class:`DynamicModel` wraps the unchanged static model, cuts it into
segments for lowering (``edgenlp.export.segments``) and is the eager masked
reference every runtime must equal; :mod:`edgenlp.dynamic.rules` holds the
exact exit and token decisions. ``edgenlp dynamic`` is the CLI.

The names below load on first use: importing the package (e.g. to read a
recipe's dynamic step) does not import torch.
"""

from __future__ import annotations

from edgenlp.utils import lazy_exports

_EXPORTS = {
    "DynamicConfig": "config", "DynamicModel": "model", "DynamicSpec": "spec", "ExitHead": "model", "Segment": "model",
    "DynamicResult": "api", "make_dynamic": "api", "load_dynamic": "api", "is_dynamic_dir": "api",
    "exit_fires": "rules", "keep_tokens": "rules", "RULES": "rules", "TOKEN_MODES": "rules",
}  # fmt: skip

__all__ = sorted(_EXPORTS)


__getattr__ = lazy_exports(__name__, _EXPORTS)
