"""Structural checks of a profile: which events exist and where they went, never how long they took.

Timing claims (how much of the end-to-end time the components cover, which
row is slower) live in ``tools/bench/`` (``component_profile.py`` records
``components_sum_ms`` against the end-to-end median for every runtime); a unit
test only checks what cannot vary with the machine's load.
"""

from __future__ import annotations

import contextlib
import math

from edgenlp.profile.attribution import EventKind
from edgenlp.profile.components import COMPONENTS


def check_attribution(measurement, plan, *, runs: int, components: tuple[str, ...] = COMPONENTS) -> None:
    """Attribution is complete by event count.

    One linear event per linear of ``plan``, in its order and attributed to its
    component and layer; every operator event attributed to a known component;
    each layer's attention core and FFN activation have operator events of
    their own; every row in ``components`` has at least one event; every event
    and run total covers each of the ``runs`` timed runs.
    """
    ops = [e for e in measurement.events if e.kind is not EventKind.CONTAINER]
    linears = [e for e in ops if e.kind is EventKind.LINEAR]
    assert len(linears) == len(plan), f"{measurement.runtime}: {len(linears)} linear events for {len(plan)} linears"
    got = [(e.component, e.layer) for e in linears]
    want = [(a.component, a.layer) for a in plan.anchors]
    assert got == want, f"{measurement.runtime}: linear events attributed {got}, plan {want}"
    unattributed = [e.name for e in ops if e.component not in COMPONENTS]
    assert not unattributed, f"{measurement.runtime}: operator events without a component: {unattributed}"
    # the operators between linears land in their region: attention core after Q/K/V, the activation after ffn_in
    regions = {(e.layer, e.component) for e in ops if e.kind is EventKind.OP}
    for a in plan.anchors:
        want_region = {"query": "attn_core", "ffn_in": "ffn"}.get(a.part)
        if want_region:
            assert (a.layer, want_region) in regions, f"{measurement.runtime}: no operator event in layer {a.layer}'s {want_region}"
    seen = {e.component for e in ops}
    assert set(components) <= seen, f"{measurement.runtime}: no event for {sorted(set(components) - seen)}"
    short = [e.name for e in measurement.events if len(e.durations_ms) < runs]
    assert not short, f"{measurement.runtime}: events timed in fewer than {runs} runs: {short}"
    assert len(measurement.profiled_total_ms) == runs and len(measurement.end_to_end_ms) == runs, measurement.runtime


def check_document(doc: dict, runtime: str) -> None:
    """Every component row is present and carries a latency for ``runtime``; the totals are consistent by definition."""
    rows = {r["name"]: r for r in doc["components"]}
    assert list(rows) == list(COMPONENTS), list(rows)
    for name, row in rows.items():
        value = row["latency_ms"].get(runtime)
        assert value is not None and math.isfinite(value) and value >= 0, (name, row["latency_ms"])
    t = doc["total"]
    assert math.isfinite(t["latency_ms"][runtime]) and math.isfinite(t["profiled_total_ms"][runtime])
    # unattributed is defined as end to end minus the components: an identity of the document, not a timing claim
    assert math.isclose(t["components_sum_ms"][runtime], sum(r["latency_ms"][runtime] for r in rows.values()), abs_tol=1e-3)
    assert math.isclose(t["unattributed_ms"][runtime], t["latency_ms"][runtime] - t["components_sum_ms"][runtime], abs_tol=1e-3)


@contextlib.contextmanager
def recorded_measurements(monkeypatch, measurer_class):
    """Record ``(target, measurement)`` of every ``measurer_class.measure`` call inside the block (the profiler's own calls)."""
    calls: list = []
    original = measurer_class.measure

    def measure(self, target, spec):
        m = original(self, target, spec)
        calls.append((target, m))
        return m

    monkeypatch.setattr(measurer_class, "measure", measure)
    try:
        yield calls
    finally:
        monkeypatch.setattr(measurer_class, "measure", original)
