"""ExecuTorch Python runtime: picks the smallest sequence bucket and pads."""

from __future__ import annotations

import ctypes
import logging
import os
import threading
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


_ops_lock = threading.Lock()
_ops_library: ctypes.CDLL | None = None


def ops_library_path() -> Path:
    """``libedgenlp_ops.so`` (runtime/ops: edgenlp's own ExecuTorch kernels): beside libedgenlp, or ``$EDGENLP_OPS_LIB``."""
    env = os.environ.get("EDGENLP_OPS_LIB")
    if env:
        return Path(env)
    from edgenlp.run.native import library_path

    return library_path().parent / "libedgenlp_ops.so"


def register_edgenlp_ops(*, required: bool = False) -> bool:
    """Register edgenlp's ExecuTorch kernels (``edgenlp::sparse_linear*``) with this process's runtime, once.

    Loads ``libedgenlp_ops.so`` (:func:`ops_library_path`, built by ``bash
    runtime/build.sh``) into the ExecuTorch runtime the Python bindings use.
    Returns whether the kernels are registered; with ``required`` a missing
    or unloadable library is a :class:`BundleError` saying how to build it.
    """
    global _ops_library
    with _ops_lock:
        if _ops_library is not None:
            return True
        import executorch.runtime  # noqa: F401  (libexecutorch.so first: the library registers into it)

        path = ops_library_path()
        try:
            _ops_library = ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL)
        except OSError as exc:
            if required:
                raise BundleError(f"this bundle runs edgenlp's sparse ops, whose ExecuTorch kernels are in {path}: "
                                  f"build them with 'bash runtime/build.sh' ({exc})") from None
            log.debug("edgenlp ops library not loaded: %s", exc)
            return False
        log.debug("registered edgenlp's ExecuTorch kernels from %s", path)
        return True


def sparse_act_qmax() -> int | None:
    """The activation range of the int8 sparse kernel ``libedgenlp_ops.so`` runs here (255, or 127 on AVX2); None without it."""
    if not register_edgenlp_ops():
        return None
    return int(_ops_library.edgenlp_ops_act_qmax())


def load_program(path: Path, *, edgenlp_ops: bool = False, **kwargs):
    """An ExecuTorch program from ``path``; ``edgenlp_ops``: it calls edgenlp's own ops (the manifest's ``sparse.ops``)."""
    # Registers ExecuTorch's quantized kernels (quantized_decomposed::embedding_byte /
    # embedding_4bit, ...) with the runtime, for programs with quantized embeddings.
    import executorch.kernels.quantized  # noqa: F401
    from executorch.runtime import Runtime

    register_quantized_kernels()
    if edgenlp_ops:
        register_edgenlp_ops(required=True)
    try:
        with quiet_stderr():
            return Runtime.get().load_program(path, **kwargs)
    except Exception as exc:
        raise BundleError(f"{path}: cannot load ExecuTorch program ({type(exc).__name__}: {exc})") from exc


def uses_edgenlp_ops(bundle: Bundle) -> bool:
    """Whether the bundle's model.pte calls edgenlp's own ops (its manifest's ``sparse.ops``)."""
    return bool((bundle.manifest.get("sparse") or {}).get("ops"))


class ExecuTorchRunner(BundleRunner):
    name = "executorch"

    def __init__(self, bundle: Bundle | str | Path, *, threads: int | None = None) -> None:
        super().__init__(bundle, threads=threads)
        set_threads(threads)
        self.methods = self.bundle.pte_methods
        if not self.methods:
            raise BundleError(f"{self.bundle.path}: manifest lists no ExecuTorch methods")
        self.program = load_program(self.bundle.artifact("pte"), edgenlp_ops=uses_edgenlp_ops(self.bundle))
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
