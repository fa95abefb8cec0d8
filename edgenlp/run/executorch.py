"""ExecuTorch Python runtime: picks the smallest sequence bucket and pads."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Sequence

import numpy as np

from edgenlp.errors import BundleError
from edgenlp.bundle import Bundle, pad_to_bucket, pick_bucket
from edgenlp.run.base import BundleRunner, check_texts
from edgenlp.utils import quiet_stderr

log = logging.getLogger(__name__)


def set_threads(threads: int | None) -> None:
    """Size XNNPACK's thread pool. Must run before a program is loaded (resetting later can crash)."""
    if threads is None:
        return
    from executorch.extension.pybindings.portable_lib import _unsafe_reset_threadpool

    with quiet_stderr():
        _unsafe_reset_threadpool(int(threads))


def register_quantized_kernels() -> None:
    """Register ExecuTorch's quantized portable kernels (``quantized_decomposed::embedding_byte`` / ``embedding_4bit``)."""
    try:
        import executorch.kernels.quantized  # noqa: F401  (registers the kernels on import)
    except ImportError:  # pragma: no cover - a wheel without them: fp32 bundles still load
        log.debug("executorch.kernels.quantized not available")


def load_program(path: Path, **kwargs):
    # Registers ExecuTorch's quantized kernels (quantized_decomposed::embedding_byte /
    # embedding_4bit, ...) with the runtime, for programs with quantized embeddings.
    import executorch.kernels.quantized  # noqa: F401
    from executorch.runtime import Runtime

    register_quantized_kernels()
    try:
        with quiet_stderr():
            return Runtime.get().load_program(path, **kwargs)
    except Exception as exc:
        raise BundleError(f"{path}: cannot load ExecuTorch program ({type(exc).__name__}: {exc})") from exc


class ExecuTorchRunner(BundleRunner):
    name = "executorch"

    def __init__(self, bundle: Bundle | str | Path, *, threads: int | None = None) -> None:
        super().__init__(bundle, threads=threads)
        set_threads(threads)
        self.methods = self.bundle.pte_methods
        if not self.methods:
            raise BundleError(f"{self.bundle.path}: manifest lists no ExecuTorch methods")
        self.program = load_program(self.bundle.artifact("pte"))
        self._loaded: dict[str, object] = {}

    def _method(self, name: str):
        if name not in self._loaded:
            try:
                with quiet_stderr():
                    self._loaded[name] = self.program.load_method(name)
            except Exception as exc:
                raise BundleError(f"{self.bundle.artifact('pte')}: cannot load method {name} ({exc})") from exc
        return self._loaded[name]

    def run_ids(self, ids: list[int]) -> np.ndarray:
        m = pick_bucket(self.methods, len(ids))
        x, mask = pad_to_bucket(ids, m, pad_id=self.pad_id)
        out = self._method(m.name).execute([x, mask])[0]
        return out.detach().numpy()[0]

    def predict_logits(self, texts: Sequence[str]) -> np.ndarray:
        texts = check_texts(texts)
        return np.stack([self.run_ids(ids) for ids in self.token_ids(texts)]).astype(np.float32)
