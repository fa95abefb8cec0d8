"""ExecuTorch measurer: ETDump per-operator events from the XNNPACK delegate, read with the devtools Inspector.

The encoder lowers to one XNNPACK delegate call. The pip runtime is built with
XNNPACK's profiler, so ETDump holds one event per XNNPACK operator
(``Fully Connected (NC, F32) GEMM #k``, ``Batch Matrix Multiply …``,
``Softmax …``) in execution order, plus ``native_call_*`` events for portable
kernels outside the delegate (the embedding gather) and container events
(``DELEGATE_CALL``, ``Method::execute``). Operators are attributed by anchoring
on the ``Fully Connected`` events (:mod:`edgenlp.profile.attribution`); no
ETRecord is needed for that, so a bundle's ``model.pte`` is profiled as it is.

Each measurement runs in a fresh subprocess (:mod:`edgenlp.profile._et_worker`):
the thread pool must be sized before a program is loaded, and resizing it in
a process that already loaded one can crash.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from edgenlp.errors import EdgeNLPError
from edgenlp.profile.attribution import EventKind, TimedEvent, attribute
from edgenlp.profile.measure import Measurement, MeasureSpec, ProfileTarget

log = logging.getLogger(__name__)

CONTAINERS = ("DELEGATE_CALL", "OPERATOR_CALL")
SKIP = ("Method::init", "Program::load_method", "Method::execute")


def classify(name: str) -> EventKind | None:
    """Kind of an ETDump event name; None for events that are not part of one execution."""
    if name in SKIP:
        return None
    if name in CONTAINERS:
        return EventKind.CONTAINER
    if name.startswith("Fully Connected"):
        return EventKind.LINEAR
    if name.startswith("Convert"):  # dynamic quantization of the next linear's input
        return EventKind.PRELUDE
    return EventKind.OP


def lower(model, seq_len: int, batch: int, out: Path, *, vocab_size: int) -> Path:
    """Export ``model`` (layer norms decomposed) at a fixed shape and lower it whole to XNNPACK."""
    import torch
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower

    from edgenlp.export.graph import example_inputs, prepare

    inputs = example_inputs(seq_len, batch=batch, vocab_size=vocab_size)
    ep = torch.export.export(prepare(model), inputs)
    prog = to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()]).to_executorch()
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    tmp.write_bytes(prog.buffer)
    os.replace(tmp, out)
    return out


class ExecuTorchMeasurer:
    runtime = "executorch"
    method = (
        "ETDump XNNPACK per-operator events (Inspector), attributed by anchoring on 'Fully Connected' "
        "events in execution order; end-to-end from separate runs without ETDump"
    )

    def __init__(self, *, timeout_s: float = 3600.0) -> None:
        self.timeout_s = timeout_s

    def program_for(self, target: ProfileTarget, spec: MeasureSpec) -> Path:
        if target.pte is not None:
            return target.pte
        if target.model is None or target.workdir is None:
            raise ValueError("executorch profiling needs a .pte or a model and a workdir")
        path = target.workdir / f"model_s{spec.seq_len}_b{spec.batch}.pte"
        if not path.exists():
            log.info("lowering %s to ExecuTorch/XNNPACK at seq %d", target.name, spec.seq_len)
            lower(target.model, spec.seq_len, spec.batch, path, vocab_size=target.vocab_size)
        return path

    def measure(self, target: ProfileTarget, spec: MeasureSpec) -> Measurement:
        pte = self.program_for(target, spec)
        with tempfile.TemporaryDirectory(prefix="edgenlp-etdump-") as tmp:
            out = Path(tmp) / "result.json"
            args = {
                "pte": str(pte),
                "threads": spec.threads,
                "runs": spec.runs,
                "warmup": spec.warmup,
                "seq_len": spec.seq_len,
                "batch": spec.batch,
                "vocab_size": target.vocab_size,
                "workdir": tmp,
                "out": str(out),
            }
            cmd = [sys.executable, "-m", "edgenlp.profile._et_worker", json.dumps(args)]
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=self.timeout_s)
            if proc.returncode != 0 or not out.exists():
                tail = " | ".join(proc.stderr.strip().splitlines()[-3:])
                raise EdgeNLPError(f"executorch: profiling {pte} failed (exit {proc.returncode}): {tail}")
            result = json.loads(out.read_text())
        events = []
        for row in result["events"]:
            kind = classify(row["name"])
            if kind is not None:
                events.append(TimedEvent(row["name"], kind, tuple(row["raw_ms"][-spec.runs :])))
        totals = result["method_execute_ms"][-spec.runs :]
        attributed = attribute(events, target.plan, runtime=self.runtime)
        return Measurement(self.runtime, self.method, spec, result["end_to_end_ms"], totals, attributed)
