"""Measured latency behind one interface, and the eager PyTorch measurer.

A :class:`Measurer` takes a :class:`ProfileTarget` and a :class:`MeasureSpec`
and returns a :class:`Measurement`: plain end-to-end timings plus a list of
timed events in execution order, each attributed to a component (and layer).
The eager, ExecuTorch and ONNX Runtime measurers live in this package; a
native runner or a remote board only has to return events (for instance the
operator names and per-run durations from its ETDump) and call
:func:`edgenlp.profile.attribution.attribute` with the model's
:class:`~edgenlp.profile.components.LinearPlan`.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np

from edgenlp.profile.attribution import EventKind, TimedEvent, attribute
from edgenlp.profile.components import COMPONENTS, LinearPlan
from edgenlp.profile.timing import interleave, median, p90  # noqa: F401  (median, p90: re-exported for the profile modules)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class MeasureSpec:
    """One measurement: input shape, threads, and how many timed runs after how many warm-up runs."""

    seq_len: int
    batch: int = 1
    threads: int = 1
    runs: int = 30
    warmup: int = 3

    def __post_init__(self) -> None:
        for name in ("seq_len", "batch", "threads", "runs"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.warmup < 0:
            raise ValueError(f"warmup must be >= 0, got {self.warmup}")


@dataclass
class ProfileTarget:
    """What is profiled: an eager model and/or lowered artifacts, plus the linear plan that maps events.

    ``model`` is an :class:`~edgenlp.models.encoder.EncoderClassifier` (None
    when only artifacts are known). ``pte``/``onnx`` point at artifacts to
    profile as they are; without them the measurers lower ``model`` into
    ``workdir`` once, the way a bundle is exported (``.pte`` methods for every
    length in ``seq_lens``, an ONNX model with a dynamic sequence axis).
    """

    name: str
    plan: LinearPlan
    vocab_size: int
    model: object | None = None
    analysis_model: object | None = None  # module tree for the analytic counts (the model, or a bundle's shape)
    pte: Path | None = None
    onnx: Path | None = None
    workdir: Path | None = None
    seq_lens: tuple[int, ...] = ()  # every length this profile will ask for (lowering makes them all at once)
    pte_methods: dict[int, str] = field(default_factory=dict)  # seq_len -> ExecuTorch method name
    info: dict = field(default_factory=dict)


@dataclass
class Measurement:
    """Timings of one runtime for one :class:`MeasureSpec`; events are attributed."""

    runtime: str
    method: str
    spec: MeasureSpec
    end_to_end_ms: list[float]  # plain timed runs, no profiling
    profiled_total_ms: list[float]  # total of each profiled run as the runtime saw it
    events: list[TimedEvent]
    device: dict | None = None  # where it ran, for measurers on a board (the document's "device" section)

    def _runs(self, key) -> dict:
        out: dict = {}
        n = len(self.profiled_total_ms)
        for e in self.events:
            if e.kind is EventKind.CONTAINER or e.component is None:
                continue
            k = key(e)
            if k is None:
                continue
            acc = out.setdefault(k, np.zeros(n))
            acc += np.asarray(e.durations_ms[-n:], dtype=float)
        return out

    def component_runs(self) -> dict[str, np.ndarray]:
        """Per component, the summed event time of each profiled run (ms)."""
        runs = self._runs(lambda e: e.component)
        n = len(self.profiled_total_ms)
        return {c: runs.get(c, np.zeros(n)) for c in COMPONENTS}

    def layer_component_runs(self) -> dict[tuple[int, str], np.ndarray]:
        return self._runs(lambda e: (e.layer, e.component) if e.layer is not None else None)

    def central_runs(self) -> np.ndarray:
        """Indices of the profiled runs whose total lies in the middle half (25th-75th percentile by rank)."""
        n = len(self.profiled_total_ms)
        order = np.argsort(np.asarray(self.profiled_total_ms, dtype=float), kind="stable")
        lo, hi = n // 4, max(n // 4 + 1, n - n // 4)
        return np.sort(order[lo:hi])

    def component_latency(self) -> dict[str, float]:
        """Per component, its mean time over the central runs (see :meth:`central_runs`).

        On a shared machine a time slice lost to another process lands in a
        random component of a random run: per-component medians then ignore
        it while the end-to-end median includes it. Averaging each component
        over the same middle-half runs keeps the components adding up to a
        typical run and stays robust to outlier runs.
        """
        idx = self.central_runs()
        return {c: float(np.mean(v[idx])) for c, v in self.component_runs().items()}


@runtime_checkable
class Measurer(Protocol):
    """Anything that can time a target: eager, ExecuTorch, ONNX Runtime, a native runner, a board."""

    runtime: str

    def measure(self, target: ProfileTarget, spec: MeasureSpec) -> Measurement: ...


def cached_artifact(target: ProfileTarget, path: Path, key: dict) -> bool:
    """Whether ``path`` in the workdir was lowered from this very model (same key) by an earlier profile.

    The key holds the lowering parameters; the model's name, shape and a
    fingerprint of its weights are added here. Call :func:`remember_artifact`
    after writing ``path``.
    """
    import json

    sidecar = path.with_name(path.name + ".key.json")
    if not (path.exists() and sidecar.exists()):
        return False
    try:
        return json.loads(sidecar.read_text()) == _artifact_key(target, key)
    except (OSError, ValueError):
        return False


def remember_artifact(target: ProfileTarget, path: Path, key: dict) -> None:
    import json

    path.with_name(path.name + ".key.json").write_text(json.dumps(_artifact_key(target, key)))


def _artifact_key(target: ProfileTarget, key: dict) -> dict:
    import hashlib

    import torch

    h = hashlib.sha256()
    with torch.no_grad():
        for name, t in target.model.state_dict().items():
            h.update(name.encode())
            if t.is_floating_point():
                h.update(np.float64(t.double().sum().item()).tobytes())
                h.update(np.float64(t.double().abs().sum().item()).tobytes())
    return {**key, "model": target.name, "shape": target.model.shape.to_dict(), "weights": h.hexdigest()}


# --------------------------------------------------------------------------- eager


class EagerMeasurer:
    """Eager PyTorch: forward pre/post hooks on the linears (and the root) cut each forward into a timeline.

    Each linear's own time is one event; the time between two consecutive
    marks (norms, residual adds, attention matmuls and softmax, activations)
    is a gap event attributed like any other operator. The hooked forwards
    sum to their own wall time exactly; ``end_to_end_ms`` comes from plain
    forwards without hooks, alternating with the hooked ones, so the cost of
    recording shows up as the difference.
    """

    runtime = "eager"
    method = "forward hooks on every linear + root; gaps between marks attributed by the linear that precedes them"

    def measure(self, target: ProfileTarget, spec: MeasureSpec) -> Measurement:
        import torch

        from edgenlp.export.graph import example_inputs

        if target.model is None:
            raise ValueError("eager profiling needs a model")
        model = target.model.eval()
        inputs = example_inputs(spec.seq_len, batch=spec.batch, vocab_size=target.vocab_size)
        old_threads = torch.get_num_threads()
        torch.set_num_threads(spec.threads)
        marks: list[tuple[float, str, str]] = []

        def hook(label: str, edge: str):
            def fn(*_args):
                marks.append((time.perf_counter(), edge, label))

            return fn

        def attach() -> list:
            hs = [model.register_forward_pre_hook(hook("model", "start")), model.register_forward_hook(hook("model", "end"))]
            for a in target.plan.anchors:
                module = model.get_submodule(a.module)
                hs += [module.register_forward_pre_hook(hook(a.module, "start")), module.register_forward_hook(hook(a.module, "end"))]
            return hs

        handles: list = []
        timelines: list[list[tuple[float, str, str]]] = []

        def hooked() -> None:
            nonlocal handles
            handles = attach()
            marks.clear()
            model(*inputs)
            timelines.append(list(marks))
            for h in handles:
                h.remove()
            handles = []

        try:
            with torch.inference_mode():
                # plain and hooked runs alternate so both see the same machine load
                t = interleave({"plain": lambda: model(*inputs), "hooked": hooked}, rounds=spec.runs, warmup=spec.warmup,
                               alternate=False)
        finally:
            for h in handles:
                h.remove()
            torch.set_num_threads(old_threads)
        e2e, timelines = t.values("plain"), timelines[-spec.runs :]
        events = _timeline_events(timelines)
        totals = [(tl[-1][0] - tl[0][0]) * 1e3 for tl in timelines]
        return Measurement(self.runtime, self.method, spec, e2e, totals, attribute(events, target.plan, runtime="eager"))


def _timeline_events(timelines: list[list[tuple[float, str, str]]]) -> list[TimedEvent]:
    """Turn per-run mark lists (same structure every run) into events with per-run durations."""
    first = timelines[0]
    if any(len(tl) != len(first) for tl in timelines):
        raise RuntimeError("eager forward took different paths across runs")
    events = []
    for j in range(len(first) - 1):
        (_, edge_a, label_a), (_, edge_b, label_b) = first[j], first[j + 1]
        durations = tuple((tl[j + 1][0] - tl[j][0]) * 1e3 for tl in timelines)
        if edge_a == "start" and edge_b == "end" and label_a == label_b and label_a != "model":
            events.append(TimedEvent(label_a, EventKind.LINEAR, durations))
        else:
            events.append(TimedEvent(f"ops {label_a}:{edge_a} -> {label_b}:{edge_b}", EventKind.OP, durations))
    return events
