"""ONNX Runtime: batches padded to their longest text."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

from edgenlp.errors import BundleError
from edgenlp.bundle import Bundle
from edgenlp.models.tokenizer import pad_batch
from edgenlp.run.base import BundleRunner, check_texts


def make_session(path: Path | bytes, *, threads: int | None = None, profile_prefix: str | None = None):
    """The one ONNX Runtime session factory (runners, the profiler, the benchmarks).

    CPU execution provider, sequential executor (one node at a time, what the
    profiler's attribution relies on), ORT's own log lines above warnings
    silenced. ``threads`` sizes the intra-op pool (one inter-op thread);
    ``None`` keeps ORT's default. ``profile_prefix`` turns on ORT's profiler,
    writing ``<prefix>_<date>.json`` when ``session.end_profiling()`` is called.
    ``path`` is an ``.onnx`` file or the serialized model. Raises
    :class:`~edgenlp.errors.BundleError` naming the file when ORT cannot load it.
    """
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    if threads:
        so.intra_op_num_threads = int(threads)
        so.inter_op_num_threads = 1
    if profile_prefix:
        so.enable_profiling = True
        so.profile_file_prefix = profile_prefix
    try:
        return ort.InferenceSession(path if isinstance(path, bytes) else str(path), so, providers=["CPUExecutionProvider"])
    except Exception as exc:  # noqa: BLE001 - ORT raises its own exception types
        where = "ONNX model" if isinstance(path, bytes) else str(path)
        raise BundleError(f"{where}: cannot load ONNX model ({type(exc).__name__}: {str(exc).splitlines()[0][:200]})") from exc


class OnnxRunner(BundleRunner):
    name = "onnx"
    batch_size = 32

    def __init__(self, bundle: Bundle | str | Path, *, threads: int | None = None) -> None:
        super().__init__(bundle, threads=threads)
        self.session = make_session(self.bundle.artifact("onnx"), threads=threads)

    def run_batch(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        return self.session.run(["logits"], {"input_ids": ids, "attention_mask": mask})[0]

    def predict_logits(self, texts: Sequence[str]) -> np.ndarray:
        texts = check_texts(texts)
        all_ids = self.token_ids(texts)
        out = []
        for i in range(0, len(all_ids), self.batch_size):
            ids, mask = pad_batch(all_ids[i : i + self.batch_size], pad_id=self.pad_id)
            out.append(self.run_batch(ids, mask))
        return np.concatenate(out).astype(np.float32)
