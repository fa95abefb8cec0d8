"""Dynamic bundles and models, run segment by segment: stop at an exit, drop tokens, re-bucket.

One control loop (:func:`run_sentence`) drives three backends that each run
the embedding and the segments of a dynamic bundle (see :mod:`edgenlp.bundle`,
key ``dynamic``): ExecuTorch methods (fixed buckets), ONNX Runtime sessions
(any length) and the eager segment modules of a :class:`DynamicModel`. After
each segment it stops when the exit rule fires; otherwise, where tokens may
drop, it keeps the tokens :func:`edgenlp.dynamic.rules.keep_tokens` keeps and
re-pads them to the smallest bucket that holds them. The native runtime runs
the same loop in C++ (``runtime/src/edgenlp.cpp``, through
:class:`edgenlp.run.native.NativeDynamicRunner`)::

    runner = get_runner("out/sst2-dyn", runtime="executorch", threads=1)
    runner.predict(["a gripping film"])            # + exit_layer, tokens_kept per text
    runner.predict(["a gripping film"], exit_threshold=0.99, keep=0.5)   # per-call overrides
    get_runner("out/sst2-dyn", static=True)        # every layer, every token (the forward_<S> methods)

Overrides: ``exit_threshold`` (in the rule's range), ``keep`` (switches token
pruning to a keep ratio in (0, 1], 1 = no pruning), ``static``; per runner
(constructor) and per call.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np

from edgenlp.bundle import Bundle, pad_to_bucket, pick_bucket
from edgenlp.dynamic.manifest import DynamicEntry, SegmentEntry, onnx_output_names
from edgenlp.dynamic.rules import ExitState, check_keep_ratio, check_threshold, keep_tokens
from edgenlp.errors import BundleError, EdgeNLPError
from edgenlp.run.base import BundleRunner, Runner, check_texts, softmax

log = logging.getLogger(__name__)

DYNAMIC_OPTIONS = ("static", "exit_threshold", "keep")
SEGMENT_RUNTIMES = ("executorch", "onnx", "eager", "native")  # runtimes that know what a dynamic bundle is


@dataclass(frozen=True)
class Settings:
    """How one sentence runs: the manifest's spec with the overrides applied."""

    static: bool
    exits: bool
    rule: str
    threshold: float
    tokens: str
    thresholds: tuple
    keep_ratio: float


def resolve_settings(spec, *, static: bool = False, exit_threshold=None, keep=None, exits: bool = True,
                     rule: str | None = None) -> Settings:
    """``spec`` with overrides; raises :class:`EdgeNLPError` for a threshold or keep ratio out of range.

    ``rule`` (Python API) switches the exit rule; it needs ``exit_threshold``.
    """
    threshold, rule_ = spec.threshold, spec.rule
    if rule is not None and rule != spec.rule:
        if exit_threshold is None:
            raise EdgeNLPError(f"switching the exit rule to {rule!r} needs an exit threshold for it")
        rule_ = rule
    if exit_threshold is not None:
        if len(spec.exits) < 2:
            raise EdgeNLPError("--exit-threshold: this dynamic bundle has no early exits (exported with --exits none)")
        try:
            threshold = check_threshold(rule_, exit_threshold, num_exits=len(spec.exits), name="--exit-threshold")
        except ValueError as exc:
            raise EdgeNLPError(str(exc)) from None
    tokens, ratio = spec.tokens, spec.keep_ratio
    if keep is not None:
        try:
            ratio = check_keep_ratio(keep, name="--keep")
        except ValueError as exc:
            raise EdgeNLPError(str(exc)) from None
        if not spec.token_layers:
            raise EdgeNLPError("--keep: this dynamic bundle has no token layers (made with --tokens none)")
        tokens = "keep"
    return Settings(bool(static), bool(exits), rule_, threshold, tokens, tuple(spec.token_thresholds), ratio)


@dataclass
class Prediction:
    """One sentence: logits, the exit layer, tokens each run layer processed, and (traced) every output seen."""

    logits: np.ndarray
    exit_layer: int
    tokens: list[int]
    latency_ms: float = 0.0
    exit_logits: dict[int, np.ndarray] = field(default_factory=dict)
    importance: dict[int, np.ndarray] = field(default_factory=dict)
    kept: dict[int, np.ndarray] = field(default_factory=dict)


# --------------------------------------------------------------------------- backends


class Backend:
    """Runs the embedding and segment ``k`` at one sequence length; ``buckets`` None = any length."""

    buckets: tuple[int, ...] | None = None
    hidden_size: int = 0

    def embed(self, ids: np.ndarray):
        raise NotImplementedError

    def segment(self, k: int, hidden, bias: np.ndarray) -> list:
        raise NotImplementedError

    def static_logits(self, ids: list[int]) -> np.ndarray:
        raise NotImplementedError

    # array helpers: ExecuTorch and eager hold torch tensors, ONNX numpy arrays
    def to_numpy(self, x) -> np.ndarray:
        return np.asarray(x)

    def repad(self, hidden, keep: np.ndarray, length: int):
        h = self.to_numpy(hidden)
        out = np.zeros((1, length, h.shape[2]), dtype=np.float32)
        out[0, : len(keep)] = h[0, keep]
        return out

    def close(self) -> None:
        pass


class TorchBackend(Backend):
    def to_numpy(self, x) -> np.ndarray:
        return x.detach().numpy()

    def repad(self, hidden, keep: np.ndarray, length: int):
        # gathered in numpy, not torch: ~20 us either way on a quiet core, but torch's intra-op pool spins for
        # milliseconds when another process holds the cores (measured 24 ms a call with 2 torch threads under load)
        import torch

        return torch.from_numpy(super().repad(hidden, keep, length))


class ExecuTorchBackend(TorchBackend):
    def __init__(self, bundle: Bundle, entry: DynamicEntry, *, threads: int | None = None, pad_id: int = 0) -> None:
        from edgenlp.run.executorch import load_program, set_threads

        set_threads(threads)
        self.bundle, self.entry, self.pad_id = bundle, entry, pad_id
        self.buckets = entry.buckets
        self.hidden_size = entry.hidden
        self.program = load_program(bundle.artifact("pte"))
        self._loaded: dict[str, object] = {}
        self.check_program()

    def check_program(self) -> None:
        """The manifest's segments exist in the program with the inputs and outputs it says."""
        where = self.bundle.artifact("pte")
        have = self.program.method_names
        expected = [(name, 1, 1) for name in self.entry.embedding_pte.values()]
        expected += [(name, 2, len(s.outputs)) for s in self.entry.segments for name in s.pte.values()]
        for name, n_in, n_out in expected:
            if name not in have:
                raise BundleError(f"{where}: the manifest's dynamic segments name method {name!r}, which the program "
                                  "does not have (manifest and program disagree)")
            meta = self.program.metadata(name)
            if meta.num_inputs() != n_in or meta.num_outputs() != n_out:
                raise BundleError(f"{where}: method {name} takes {meta.num_inputs()} input(s) and returns "
                                  f"{meta.num_outputs()} output(s); the manifest says {n_in} and {n_out}")
        for s in self.entry.segments:
            for seq, name in s.pte.items():
                sizes = list(self.program.metadata(name).input_tensor_meta(0).sizes())
                if sizes != [1, seq, self.entry.hidden]:
                    raise BundleError(f"{where}: method {name} takes hidden states {sizes}; the manifest says "
                                      f"[1, {seq}, {self.entry.hidden}]")

    def _method(self, name: str):
        from edgenlp.utils import quiet_stderr

        m = self._loaded.get(name)
        if m is None:
            try:
                with quiet_stderr():
                    m = self._loaded[name] = self.program.load_method(name)
            except Exception as exc:
                raise BundleError(f"{self.bundle.artifact('pte')}: cannot load method {name} ({exc})") from exc
        return m

    def embed(self, ids: np.ndarray):
        import torch

        return self._method(self.entry.embedding_pte[ids.shape[1]]).execute([torch.from_numpy(ids)])[0]

    def segment(self, k: int, hidden, bias: np.ndarray) -> list:
        import torch

        return self._method(self.entry.segments[k].pte[bias.shape[1]]).execute([hidden, torch.from_numpy(bias)])

    def static_logits(self, ids: list[int]) -> np.ndarray:
        m = pick_bucket(self.bundle.pte_methods, len(ids))
        x, mask = pad_to_bucket(ids, m, pad_id=self.pad_id)
        return self._method(m.name).execute([x, mask])[0].detach().numpy()[0]


class OnnxBackend(Backend):
    def __init__(self, bundle: Bundle, entry: DynamicEntry, *, threads: int | None = None, pad_id: int = 0) -> None:
        from edgenlp.run.onnx import make_session

        self.bundle, self.entry, self.pad_id = bundle, entry, pad_id
        self.hidden_size = entry.hidden
        self.threads = threads
        self.embedding = make_session(bundle.path / entry.embedding_onnx, threads=threads)
        self.sessions = [make_session(bundle.path / s.onnx, threads=threads) for s in entry.segments]
        self._static = None
        for s, sess in zip(entry.segments, self.sessions):
            names = [o.name for o in sess.get_outputs()]
            if names != onnx_output_names(s.outputs) or [i.name for i in sess.get_inputs()] != ["hidden", "bias"]:
                raise BundleError(f"{bundle.path / s.onnx}: takes {[i.name for i in sess.get_inputs()]} and returns "
                                  f"{names}; the manifest says ['hidden', 'bias'] -> {onnx_output_names(s.outputs)}")

    def embed(self, ids: np.ndarray):
        return self.embedding.run(None, {"input_ids": ids})[0]

    def segment(self, k: int, hidden, bias: np.ndarray) -> list:
        return self.sessions[k].run(None, {"hidden": hidden, "bias": bias})

    def static_logits(self, ids: list[int]) -> np.ndarray:
        from edgenlp.run.onnx import make_session

        if self._static is None:
            self._static = make_session(self.bundle.artifact("onnx"), threads=self.threads)
        x = np.asarray([ids], dtype=np.int64)
        return self._static.run(["logits"], {"input_ids": x, "attention_mask": np.ones_like(x)})[0][0]


class EagerBackend(TorchBackend):
    """The :class:`DynamicModel`'s own segment modules in PyTorch (any length)."""

    def __init__(self, model, *, threads: int | None = None) -> None:
        import torch

        if threads:
            torch.set_num_threads(int(threads))
        self.model = model.eval()
        self.hidden_size = model.shape.hidden
        self.embedding = model.embedding_segment()
        self.modules = model.segments()

    def embed(self, ids: np.ndarray):
        import torch

        with torch.no_grad():
            return self.embedding(torch.from_numpy(ids))

    def segment(self, k: int, hidden, bias: np.ndarray) -> list:
        import torch

        with torch.no_grad():
            return list(self.modules[k](hidden, torch.from_numpy(bias)))

    def static_logits(self, ids: list[int]) -> np.ndarray:
        import torch

        x = torch.tensor([ids], dtype=torch.int64)
        with torch.no_grad():
            return self.model(x, torch.ones_like(x)).numpy()[0]


def segment_entries(model) -> tuple[SegmentEntry, ...]:
    """The :class:`SegmentEntry` list of an in-memory :class:`DynamicModel` (what its bundle's manifest would say)."""
    return tuple(SegmentEntry(k, (s.layer_indices[0] + 1, s.layer_indices[-1] + 1), s.has_exit, s.importance, {}, None)
                 for k, s in enumerate(model.segments()))


# --------------------------------------------------------------------------- the control loop


def smallest_bucket(buckets: tuple[int, ...] | None, n: int) -> int:
    if buckets is None:
        return n
    for b in buckets:
        if b >= n:
            return b
    raise EdgeNLPError(f"{n} tokens exceed the largest bucket {buckets[-1]}")


def run_sentence(backend: Backend, segments: Sequence[SegmentEntry], ids: list[int], settings: Settings, *,
                 mask_bias: float, pad_id: int = 0, num_layers: int, trace: bool = False) -> Prediction:
    """One sentence through ``segments``: the reference loop every runtime follows (see :mod:`edgenlp.bundle`)."""
    n = len(ids)
    if settings.static:
        return Prediction(np.asarray(backend.static_logits(ids), dtype=np.float32), num_layers, [n] * num_layers)
    length = smallest_bucket(backend.buckets, n)
    x = np.full((1, length), pad_id, dtype=np.int64)
    x[0, :n] = ids
    hidden = backend.embed(x)
    positions = np.arange(n)
    count = n
    state = ExitState(settings.rule, settings.threshold)
    tokens: list[int] = []
    out = Prediction(np.zeros(0, dtype=np.float32), num_layers, tokens)
    prune = settings.tokens != "none"
    for k, seg in enumerate(segments):
        bias = np.zeros((1, length), dtype=np.float32)
        bias[0, count:] = mask_bias
        outs = backend.segment(k, hidden, bias)
        first, last = seg.layers
        tokens.extend([count] * (last - first + 1))
        hidden = outs[0]
        if seg.exit:
            logits = np.array(backend.to_numpy(outs[1])[0], dtype=np.float32)
            if trace:
                out.exit_logits[last] = logits
            final = k == len(segments) - 1
            if final or (settings.exits and state.fires(logits)):
                out.logits, out.exit_layer = logits, last
                return out
        if seg.tokens and prune:
            imp = backend.to_numpy(outs[-1])[0, :count]
            keep = keep_tokens(imp, mode=settings.tokens, threshold=settings.thresholds[last - 1] if settings.thresholds else None,
                               ratio=settings.keep_ratio)
            if trace:
                out.importance[last] = np.array(imp, dtype=np.float32)
                out.kept[last] = positions[keep]
            if len(keep) < count:
                positions, count = positions[keep], len(keep)
                length = smallest_bucket(backend.buckets, count)
                hidden = backend.repad(hidden, keep, length)
        elif seg.tokens and trace:
            out.importance[last] = np.array(backend.to_numpy(outs[-1])[0, :count], dtype=np.float32)
    raise AssertionError("the last segment always answers")  # pragma: no cover


# --------------------------------------------------------------------------- runners


class DynamicRunner(Runner):
    """A runner over a dynamic bundle (ExecuTorch, ONNX) or a dynamic model directory (eager).

    ``predict``/``predict_logits``/``predict_details`` take the overrides
    ``static``, ``exit_threshold`` and ``keep`` per call (and, from Python,
    ``exits=False`` to run without early exits and ``rule`` with a threshold
    for it); the constructor's apply to every call.
    """

    def __init__(self, backend: Backend, *, name: str, labels, spec, segments, mask_bias: float, tokenize, pad_id: int,
                 static: bool = False, exit_threshold=None, keep=None) -> None:
        self.backend, self.name, self.labels = backend, name, tuple(labels)
        self.spec, self.segments, self.mask_bias = spec, tuple(segments), mask_bias
        self._tokenize, self.pad_id = tokenize, pad_id
        self.defaults = {"static": static, "exit_threshold": exit_threshold, "keep": keep}
        self.settings = resolve_settings(spec, **self.defaults)

    def settings_for(self, **overrides) -> Settings:
        unknown = set(overrides) - set(DYNAMIC_OPTIONS) - {"exits", "rule"}
        if unknown:
            raise TypeError(f"unknown option(s) {sorted(unknown)}")
        given = {k: v for k, v in overrides.items() if v is not None}
        if not given:
            return self.settings
        return resolve_settings(self.spec, **{**self.defaults, **given})

    def token_ids(self, texts: Sequence[str]) -> list[list[int]]:
        return self._tokenize(texts)

    def predict_details(self, texts: Sequence[str], *, trace: bool = False, **overrides) -> list[Prediction]:
        """A :class:`Prediction` per text; ``latency_ms`` times the model alone (not tokenization)."""
        texts = check_texts(texts)
        settings = self.settings_for(**overrides)
        out = []
        for ids in self.token_ids(texts):
            t0 = time.perf_counter()
            p = run_sentence(self.backend, self.segments, ids, settings, mask_bias=self.mask_bias, pad_id=self.pad_id,
                             num_layers=self.spec.num_layers, trace=trace)
            p.latency_ms = 1000 * (time.perf_counter() - t0)
            out.append(p)
        return out

    def predict_logits(self, texts: Sequence[str], **overrides) -> np.ndarray:
        return np.stack([p.logits for p in self.predict_details(texts, **overrides)]).astype(np.float32)

    def predict(self, texts: Sequence[str], **overrides) -> list[dict]:
        """Label and probabilities per text, with the exit layer and the tokens each run layer processed."""
        texts = check_texts(texts)
        preds = self.predict_details(texts, **overrides)
        probs = softmax(np.stack([p.logits for p in preds]))
        return [{"text": t, "label": self.labels[int(pr.argmax())], "probs": {l: float(v) for l, v in zip(self.labels, pr)},
                 "exit_layer": p.exit_layer, "tokens_kept": list(p.tokens)}
                for t, p, pr in zip(texts, preds, probs)]

    def close(self) -> None:
        self.backend.close()


def bundle_runner(bundle: Bundle | str | Path, *, runtime: str, threads: int | None = None, **options) -> Runner:
    """A :class:`DynamicRunner` over a dynamic bundle's ExecuTorch methods or ONNX files, or for ``native`` a
    :class:`edgenlp.run.native.NativeDynamicRunner` (the same loop in libedgenlp)."""
    b = bundle if isinstance(bundle, Bundle) else Bundle.open(bundle)
    if runtime == "native":
        from edgenlp.run.native import NativeDynamicRunner

        return NativeDynamicRunner(b, threads=threads, **options)
    entry = b.dynamic
    if entry is None:
        raise BundleError(f"{b.path}: not a dynamic bundle (its manifest has no segments)")
    tok = BundleRunner(b)  # tokenization with the bundle's settings and vocabulary map
    if runtime == "executorch":
        backend = ExecuTorchBackend(b, entry, threads=threads, pad_id=tok.pad_id)
    elif runtime == "onnx":
        backend = OnnxBackend(b, entry, threads=threads, pad_id=tok.pad_id)
    else:
        raise EdgeNLPError(f"runtime {runtime!r} does not run dynamic bundles segment by segment (use executorch, onnx "
                           "or native)")
    return DynamicRunner(backend, name=runtime, labels=b.labels, spec=entry.spec, segments=entry.segments,
                         mask_bias=entry.mask_bias, tokenize=tok.token_ids, pad_id=tok.pad_id, **options)


def eager_runner(model, *, info=None, max_seq_len: int = 128, threads: int | None = None, **options) -> DynamicRunner:
    """A :class:`DynamicRunner` over an in-memory :class:`DynamicModel` or a dynamic model directory."""
    from edgenlp.models.encoder import MASK_BIAS
    from edgenlp.models.tokenizer import build_tokenizer, token_ids

    if isinstance(model, (str, Path)):
        from edgenlp.dynamic.api import load_dynamic
        from edgenlp.models.registry import load_model

        base, info = load_model(model)
        model = load_dynamic(model, base=base)
    if info is None:
        from edgenlp.models.registry import DEFAULT_TOKENIZER, default_vocab_file

        vocab, settings = default_vocab_file(), DEFAULT_TOKENIZER
    else:
        vocab, settings = info.vocab_file, info.tokenizer
    tok = build_tokenizer(vocab, settings)
    return DynamicRunner(EagerBackend(model, threads=threads), name="eager", labels=model.labels, spec=model.spec,
                         segments=segment_entries(model), mask_bias=MASK_BIAS,
                         tokenize=lambda texts: token_ids(tok, texts, max_len=max_seq_len), pad_id=tok.pad_token_id or 0,
                         **options)


def is_dynamic_target(target, runtime: str) -> bool:
    """Whether ``target`` is a dynamic bundle (or, for eager, a dynamic model directory or bundle)."""
    p = Path(target) if isinstance(target, (str, Path)) else None
    if p is None:
        return hasattr(target, "segments") or (isinstance(target, Bundle) and target.is_dynamic)
    if (p / "manifest.json").is_file():
        try:
            import json

            return "dynamic" in json.loads((p / "manifest.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return False  # Bundle.open reports it properly
    if runtime == "eager":
        from edgenlp.dynamic.api import is_dynamic_dir

        return is_dynamic_dir(p)
    return False


def dynamic_runner(target, *, runtime: str, threads: int | None = None, **options) -> Runner:
    """What :func:`edgenlp.run.base.get_runner` returns for a dynamic target (or when dynamic options are given)."""
    given = {k: v for k, v in options.items() if v not in (None, False)}
    if runtime not in SEGMENT_RUNTIMES or not is_dynamic_target(target, runtime):
        if given:
            flags = ", ".join("--" + k.replace("_", "-") for k in given)
            raise EdgeNLPError(f"{target}: {flags} needs a dynamic bundle, and this one has no segments "
                               "(make the model with edgenlp dynamic, then export it)")
        return None
    if runtime == "eager":
        if hasattr(target, "segments"):
            return eager_runner(target, threads=threads, **options)
        p = Path(target)
        max_len = 128
        if (p / "manifest.json").is_file():
            b = Bundle.open(p)
            max_len, p = b.max_seq_len, Path((b.manifest.get("model") or {}).get("source") or "")
            from edgenlp.dynamic.api import is_dynamic_dir

            if not is_dynamic_dir(p):
                raise BundleError(f"{target}: eager runtime needs the source dynamic model directory, not found: {p}")
        return eager_runner(p, max_seq_len=max_len, threads=threads, **options)
    return bundle_runner(target, runtime=runtime, threads=threads, **options)
