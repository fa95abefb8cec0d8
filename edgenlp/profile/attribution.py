"""Attribute a runtime's per-operator events to components by anchoring on the linears.

Runtimes that profile per operator (XNNPACK inside ExecuTorch, ONNX Runtime,
a native runner's ETDump) execute one operator at a time in a topological
order of the graph and name operators by kernel, not by module. Every linear
layer is one recognisable kernel (``Fully Connected``, ``Gemm``/``MatMul`` with
a weight); the model's :class:`~edgenlp.profile.components.LinearPlan` says
which linear comes k-th. So the k-th linear event *is* anchor k, and each
other operator belongs to the region between the anchors around it:

==================================  ===============================
after anchor …                      region
==================================  ===============================
(before the first linear)           ``embedding`` (gathers, adds, norm, mask bias)
a Q/K/V projection                  ``attn_core`` (head split, QKᵀ, softmax, AV, merge)
the output projection               ``other`` (residual add + norm)
the FFN input linear                ``ffn`` (activation)
the FFN output linear               ``other`` (residual add + norm)
pooler / classifier                 ``other``
==================================  ===============================

Operators that only prepare a linear's input (dynamic quantization of the
activation: XNNPACK ``Convert``, ORT ``DynamicQuantizeLinear``) belong to the
*next* linear. Container events (a whole delegate call, the method) are not
operators; the difference between their time and the operators they contain
is reported as ``runtime_overhead_ms``.

A layer pruned to nothing (0 heads and FFN width 0) runs no linear, so its
residual adds and norms land in the region of the linear before them.

If the number of linear events differs from the plan the attribution is
refused (:class:`AttributionError`) instead of guessed.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from edgenlp.errors import EdgeNLPError
from edgenlp.profile.components import COMPONENTS, LinearPlan

# canonical linear part -> region of the operators that follow it (until the next linear)
REGION_AFTER = {"query": "attn_core", "key": "attn_core", "value": "attn_core", "attn_out": "other", "ffn_in": "ffn", "ffn_out": "other"}


class AttributionError(EdgeNLPError):
    """Operator events that cannot be matched to the model's linears."""


class EventKind(str, Enum):
    LINEAR = "linear"  # one linear layer (anchor)
    PRELUDE = "prelude"  # prepares the next linear's input (activation quantization)
    OP = "op"  # any other operator
    CONTAINER = "container"  # wraps other events (delegate call); not summed


@dataclass(frozen=True)
class TimedEvent:
    """One operator (or gap) as a runtime reports it, with its duration in each measured run."""

    name: str
    kind: EventKind
    durations_ms: tuple[float, ...]
    component: str | None = None  # set by attribution
    layer: int | None = None  # set by attribution

    def to_dict(self) -> dict:
        return {"name": self.name, "kind": self.kind.value, "component": self.component, "layer": self.layer}


def _region_after(anchor) -> str:
    if anchor is None:
        return "embedding"
    if anchor.layer is None:
        return "other"
    return REGION_AFTER[anchor.part]


def attribute(events: list[TimedEvent], plan: LinearPlan, *, runtime: str) -> list[TimedEvent]:
    """Return ``events`` (in execution order) with ``component`` and ``layer`` set.

    Raises :class:`AttributionError` when the linear events do not match ``plan``.
    """
    linears = [e for e in events if e.kind is EventKind.LINEAR]
    if len(linears) != len(plan):
        raise AttributionError(
            f"{runtime}: found {len(linears)} linear operators but the model has {len(plan)} linears; "
            "per-component attribution needs one event per linear (was the graph fused or partly delegated?)"
        )
    out: list[TimedEvent] = []
    k = 0  # anchors seen so far
    pending: list[TimedEvent] = []  # prelude events waiting for their linear
    for e in events:
        if e.kind is EventKind.CONTAINER:
            out.append(e)
            continue
        if e.kind is EventKind.PRELUDE and k < len(plan):
            pending.append(e)
            continue
        if e.kind is EventKind.LINEAR:
            a = plan.anchors[k]
            out += [_with(p, a.component, a.layer) for p in pending]
            pending = []
            out.append(_with(e, a.component, a.layer))
            k += 1
            continue
        prev = plan.anchors[k - 1] if k else None
        out.append(_with(e, _region_after(prev), prev.layer if prev else None))
    prev = plan.anchors[-1] if plan.anchors else None
    out += [_with(p, "other", prev.layer if prev else None) for p in pending]
    return out


def _with(e: TimedEvent, component: str, layer: int | None) -> TimedEvent:
    assert component in COMPONENTS, component
    return TimedEvent(e.name, e.kind, e.durations_ms, component, layer)
