"""Block-sparse linears in the cost model: the measured sparse : dense ratios (``targets/sparse-ratios.json``).

``tools/targets/sparse_ratios.py`` writes the file from
``tools/bench/results/sparse-bundles.json``: per precision and block
sparsity, the latency of a MiniLM-L6 bundle whose every encoder linear runs
edgenlp's block-sparse op over the dense bundle of the same precision, with
the machine (CPU model, ISA flags), runtime, sequence length and threads it
was measured at. The kernels are edgenlp's own and their speed depends on
the ISA, so a ratio prices only the machine it was measured on: there is no
transfer to a device (``qemu`` gives no timings).

:func:`sparse_ratio` interpolates linearly between measured sparsities and
never beyond them; :func:`linear_factor` puts the whole end-to-end change on
the linears (attention core, norms and the embedding do not change).
"""

from __future__ import annotations

import json
from pathlib import Path

from edgenlp.errors import EdgeNLPError
from edgenlp.targets.target import targets_dir

SPARSE_RATIOS_SCHEMA = "edgenlp.sparse-ratios/1"


def sparse_ratios_path() -> Path:
    return targets_dir() / "sparse-ratios.json"


def load_sparse_ratios(path: str | Path | None = None) -> dict | None:
    """The ratios document, or None when there is none. A malformed one is an error naming the file."""
    path = Path(path) if path is not None else sparse_ratios_path()
    if not path.is_file():
        return None
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise EdgeNLPError(f"{path}: cannot read the sparse ratios ({exc})") from None
    if not isinstance(doc, dict) or doc.get("schema") != SPARSE_RATIOS_SCHEMA or not isinstance(doc.get("ratios"), dict):
        raise EdgeNLPError(f"{path}: not an edgenlp sparse-ratios file (schema {SPARSE_RATIOS_SCHEMA!r} expected)")
    return doc


def same_machine(doc: dict, key: dict) -> bool:
    """Whether ``key`` (:func:`~edgenlp.targets.costmodel.cpu_key`) is the machine kind the ratios were measured on."""
    m = doc.get("machine", {})
    return m.get("cpu") == key.get("cpu") and sorted(m.get("isa", [])) == sorted(key.get("isa", []))


def sparse_ratio(doc: dict, precision: str, sparsity: float) -> float | None:
    """Sparse : dense end-to-end latency at ``sparsity`` (linear between measured points), None outside them."""
    pts = sorted((float(s), float(r)) for s, r in (doc["ratios"].get(precision) or {}).items())
    for s, r in pts:
        if abs(s - sparsity) < 1e-9:
            return r
    for (s0, r0), (s1, r1) in zip(pts, pts[1:]):
        if s0 < sparsity < s1:
            return r0 + (r1 - r0) * (sparsity - s0) / (s1 - s0)
    return None


def linear_factor(ratio: float, total_ms: float, linear_ms: float) -> float:
    """The factor on the linears' cost that changes a model of ``total_ms`` (``linear_ms`` of it in linears) by ``ratio``."""
    if linear_ms <= 0:
        return 1.0
    return max(0.02, 1.0 + (ratio - 1.0) * total_ms / linear_ms)
