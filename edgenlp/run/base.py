"""One interface over every runtime.

A runner turns texts into logits through one backend::

    runner = get_runner("out/minilm-sst2", runtime="executorch", threads=2)
    logits = runner.predict_logits(["a gripping film", "dull"])   # float32 [2, num_labels]

Python runners tokenize with the bundle's WordPiece settings; the native runner
tokenizes in C++. All of them return the same logits within float tolerance.
"""

from __future__ import annotations

import importlib
import logging
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from edgenlp.errors import EdgeNLPError
from edgenlp.bundle import Bundle

log = logging.getLogger(__name__)

# The one list of runtime names: runners here, measurers in edgenlp.profile.
RUNTIMES = ("executorch", "onnx", "native", "eager")


class Runner:
    """Base class: ``predict_logits(texts) -> float32 [N, num_labels]``."""

    name: str = "base"
    labels: tuple[str, ...] = ()

    def predict_logits(self, texts: Sequence[str]) -> np.ndarray:
        raise NotImplementedError

    def predict(self, texts: Sequence[str]) -> list[dict]:
        """Label and probabilities per text."""
        logits = self.predict_logits(texts)
        probs = softmax(logits)
        return [
            {"text": t, "label": self.labels[int(p.argmax())], "probs": {l: float(v) for l, v in zip(self.labels, p)}}
            for t, p in zip(texts, probs)
        ]

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def softmax(logits: np.ndarray) -> np.ndarray:
    z = logits - logits.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


def check_texts(texts: Sequence[str]) -> list[str]:
    texts = list(texts)
    if not texts:
        raise EdgeNLPError("no text given")
    for i, t in enumerate(texts):
        if not isinstance(t, str):
            raise EdgeNLPError(f"text {i} is not a string")
    return texts


class BundleRunner(Runner):
    """Shared tokenization for the Python runners of a bundle."""

    def __init__(self, bundle: Bundle | str | Path, *, threads: int | None = None) -> None:
        self.bundle = bundle if isinstance(bundle, Bundle) else Bundle.open(bundle)
        self.labels = self.bundle.labels
        self.threads = threads
        tok = self.bundle.tokenizer
        self._tok = tok
        self.pad_id = self.bundle.remap_ids([tok.pad_token_id or 0])[0]

    def token_ids(self, texts: Sequence[str]) -> list[list[int]]:
        """Model input ids per text (remapped when the bundle's vocabulary is trimmed)."""
        from edgenlp.models.tokenizer import token_ids

        ids = token_ids(self._tok, texts, max_len=self.bundle.max_seq_len)
        if self.bundle.id_map is None and self.bundle.vocab_map is None:
            return ids
        return [self.bundle.remap_ids(row) for row in ids]


RunnerFactory = Callable[..., Runner]  # (target, *, threads) -> Runner


def _lazy(module: str, name: str) -> RunnerFactory:
    def factory(target, *, threads=None):
        return getattr(importlib.import_module(module), name)(target, threads=threads)

    return factory


# runtime name -> factory; open to plug-ins (a board transport, another backend) via register_runner.
RUNNERS: dict[str, RunnerFactory] = {
    "executorch": _lazy("edgenlp.run.executorch", "ExecuTorchRunner"),
    "onnx": _lazy("edgenlp.run.onnx", "OnnxRunner"),
    "native": _lazy("edgenlp.run.native", "NativeRunner"),
    "eager": _lazy("edgenlp.run.eager", "EagerRunner"),
}


def register_runner(runtime: str, factory: RunnerFactory) -> None:
    """Plug a runner in: ``factory(target, threads=...)`` returns a :class:`Runner`."""
    RUNNERS[runtime] = factory


def get_runner(target: str | Path, *, runtime: str = "executorch", threads: int | None = None, **dynamic) -> Runner:
    """A runner for a bundle directory (executorch/onnx/native) or a model (eager).

    A dynamic bundle (or dynamic model directory, for eager) gets the
    segment-by-segment runner of :mod:`edgenlp.run.dynamic`; ``dynamic`` takes
    its options (``static``, ``exit_threshold``, ``keep``), an error for any
    other target.
    """
    if runtime not in RUNNERS:
        raise EdgeNLPError(f"unknown runtime {runtime!r}; choose one of {', '.join(RUNNERS)}")
    if threads is not None and threads < 1:
        raise EdgeNLPError(f"--threads must be >= 1, got {threads}")
    # dynamic bundles: segments, exits and token pruning (edgenlp.run.dynamic)
    from edgenlp.run.dynamic import dynamic_runner

    runner = dynamic_runner(target, runtime=runtime, threads=threads, **dynamic)
    if runner is not None:
        return runner
    return RUNNERS[runtime](target, threads=threads)
