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
from edgenlp.profile.measure import Measurement, MeasureSpec, ProfileTarget, cached_artifact, remember_artifact

log = logging.getLogger(__name__)

CONTAINERS = ("DELEGATE_CALL", "OPERATOR_CALL")
SKIP = ("Method::init", "Program::load_method", "Method::execute")


def classify(name: str) -> EventKind | None:
    """Kind of an ETDump event name; None for events that are not part of one execution."""
    if name in SKIP:
        return None
    if name in CONTAINERS:
        return EventKind.CONTAINER
    if name.startswith("Fully Connected") or "sparse_linear" in name:  # XNNPACK's GEMMs; edgenlp's block-sparse ops
        return EventKind.LINEAR
    if name.startswith("Convert"):  # dynamic quantization of the next linear's input
        return EventKind.PRELUDE
    return EventKind.OP


def lower(model, seq_lens: tuple[int, ...], out: Path) -> Path:
    """Lower ``model`` as a bundle would (:func:`edgenlp.export.executorch.to_pte`), one method per length."""
    from edgenlp.export.executorch import to_pte

    res = to_pte(model, buckets=tuple(sorted(set(seq_lens))))
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    tmp.write_bytes(res.buffer)
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

    def program_for(self, target: ProfileTarget, spec: MeasureSpec) -> tuple[Path, str]:
        """The program and method name that run ``spec.seq_len`` (lowering the model on first use)."""
        if spec.batch != 1:
            raise EdgeNLPError(f"executorch: methods take batch 1, got --batch {spec.batch}")
        if target.pte is None:
            if target.model is None or target.workdir is None:
                raise ValueError("executorch profiling needs a .pte or a model and a workdir")
            path = target.workdir / "model.pte"
            seqs = tuple(sorted(set(target.seq_lens or (spec.seq_len,))))
            key = {"format": "pte", "seq_lens": list(seqs)}
            if cached_artifact(target, path, key):
                log.info("reusing %s", path)
            else:
                log.info("lowering %s to ExecuTorch/XNNPACK (methods for seq %s)", target.name, ", ".join(map(str, seqs)))
                lower(target.model, seqs, path)
                remember_artifact(target, path, key)
            target.pte = path
            target.pte_methods = {s: f"forward_{s}" for s in seqs}
        method = target.pte_methods.get(spec.seq_len)
        if method is None:
            have = ", ".join(str(s) for s in sorted(target.pte_methods)) or "none"
            raise EdgeNLPError(f"executorch: {target.pte} has no method for seq {spec.seq_len} (has: {have}); pick --seq-len from those")
        return target.pte, method

    def measure(self, target: ProfileTarget, spec: MeasureSpec) -> Measurement:
        pte, method_name = self.program_for(target, spec)
        with tempfile.TemporaryDirectory(prefix="edgenlp-etdump-") as tmp:
            out = Path(tmp) / "result.json"
            args = {
                "pte": str(pte),
                "method": method_name,
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


def compare_programs(programs: list[tuple[Path, str, int]], *, seq_len: int, threads: int, runs: int, warmup: int = 3,
                     timeout_s: float = 3600.0) -> list[list[float]]:
    """Plain end-to-end times (ms) of several ``(pte, method, vocab_size)`` programs measured in alternation.

    One subprocess loads them all and runs each once per round, so a speed-up
    between them is not skewed by a change of machine load between two
    separate measurements.
    """
    with tempfile.TemporaryDirectory(prefix="edgenlp-compare-") as tmp:
        out = Path(tmp) / "result.json"
        args = {"mode": "compare", "threads": threads, "runs": runs, "warmup": warmup, "seq_len": seq_len, "out": str(out),
                "programs": [{"pte": str(p), "method": m, "vocab_size": int(v)} for p, m, v in programs]}
        cmd = [sys.executable, "-m", "edgenlp.profile._et_worker", json.dumps(args)]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
        if proc.returncode != 0 or not out.exists():
            tail = " | ".join(proc.stderr.strip().splitlines()[-3:])
            raise EdgeNLPError(f"executorch: timing {', '.join(str(p) for p, _, _ in programs)} failed (exit {proc.returncode}): {tail}")
        return json.loads(out.read_text())["end_to_end_ms"]
