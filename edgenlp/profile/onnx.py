"""ONNX Runtime measurer: the session profiler's per-node events, attributed by anchoring on the linears.

ONNX Runtime rewrites the graph before running it (``MatMul``+``Add`` become
``Gemm``, residual add + norm become ``SkipLayerNormalization``, the scale
folds into ``FusedMatMul``), so exported node names do not survive as a
reliable module map. Its sequential executor still runs one node at a time,
and every linear stays one matrix-multiply node whose second operand is a
weight: the k-th such node is the plan's k-th linear
(:mod:`edgenlp.profile.attribution`). Attention's QKᵀ and AV are told apart
by having two activation inputs of rank >= 3.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from pathlib import Path

from edgenlp.errors import EdgeNLPError
from edgenlp.profile.attribution import EventKind, TimedEvent, attribute
from edgenlp.profile.measure import Measurement, MeasureSpec, ProfileTarget, cached_artifact, remember_artifact
from edgenlp.profile.timing import interleave

log = logging.getLogger(__name__)

MATMUL_OPS = {
    "Gemm", "FusedGemm", "QGemm", "MatMul", "FusedMatMul", "MatMulInteger", "MatMulIntegerToFloat",
    "DynamicQuantizeMatMul", "MatMulNBits", "QLinearMatMul",
}  # fmt: skip
PRELUDE_OPS = {"DynamicQuantizeLinear"}


def classify(op: str, input_shapes: list[list[int]]) -> EventKind:
    """Kind of an ORT node event from its operator type and input shapes."""
    if op in PRELUDE_OPS:
        return EventKind.PRELUDE
    if op in MATMUL_OPS:
        activations = [s for s in input_shapes if len(s) >= 3]
        if len(input_shapes) >= 2 and len(activations) >= 2:
            return EventKind.OP  # activation x activation: attention QKᵀ / AV
        return EventKind.LINEAR
    return EventKind.OP


def export(model, max_seq_len: int, out: Path) -> Path:
    """Export ``model`` as a bundle would (:func:`edgenlp.export.onnx.to_onnx`, dynamic batch and sequence)."""
    from edgenlp.export.onnx import to_onnx

    res = to_onnx(model, max_seq_len=max_seq_len)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    tmp.write_bytes(res.data)
    os.replace(tmp, out)
    return out


def _shapes(args: dict) -> list[list[int]]:
    return [list(next(iter(x.values()))) for x in args.get("input_type_shape", [])]


def parse_profile(path: str | Path) -> tuple[list[list[dict]], list[float]]:
    """Node events per run (execution order) and each run's ``model_run`` time in ms.

    A node belongs to the ``model_run`` whose time span contains its start.
    """
    import bisect

    records = json.loads(Path(path).read_text())
    model_runs = sorted((r for r in records if r.get("cat") == "Session" and r.get("name") == "model_run"), key=lambda r: r["ts"])
    starts = [r["ts"] for r in model_runs]
    runs: list[list[dict]] = [[] for _ in model_runs]
    nodes = (r for r in records if r.get("cat") == "Node" and str(r.get("name", "")).endswith("_kernel_time"))
    for r in sorted(nodes, key=lambda r: r["ts"]):
        k = bisect.bisect_right(starts, r["ts"]) - 1
        if k >= 0 and r["ts"] <= model_runs[k]["ts"] + model_runs[k]["dur"]:
            runs[k].append(r)
    return runs, [r["dur"] / 1e3 for r in model_runs]


class OnnxRuntimeMeasurer:
    runtime = "onnx"
    method = (
        "ONNX Runtime profiler node events (SessionOptions.enable_profiling), attributed by anchoring on "
        "matmul nodes with a weight operand in execution order; end-to-end from a session without profiling"
    )

    def model_for(self, target: ProfileTarget, spec: MeasureSpec) -> Path:
        if target.onnx is None:
            if target.model is None or target.workdir is None:
                raise ValueError("onnx profiling needs a .onnx or a model and a workdir")
            longest = max(target.seq_lens or (spec.seq_len,))
            path, key = target.workdir / "model.onnx", {"format": "onnx", "max_seq_len": longest}
            if cached_artifact(target, path, key):
                log.info("reusing %s", path)
            else:
                log.info("exporting %s to ONNX (dynamic sequence up to %d)", target.name, longest)
                export(target.model, longest, path)
                remember_artifact(target, path, key)
            target.onnx = path
        return target.onnx

    def measure(self, target: ProfileTarget, spec: MeasureSpec) -> Measurement:
        from edgenlp.export.graph import example_inputs
        from edgenlp.run.onnx import make_session

        path = self.model_for(target, spec)
        ids, mask = example_inputs(spec.seq_len, batch=spec.batch, vocab_size=target.vocab_size)
        plain = make_session(path, threads=spec.threads)
        names = [i.name for i in plain.get_inputs()]
        feed = dict(zip(names, (ids.numpy(), mask.numpy())))
        with tempfile.TemporaryDirectory(prefix="edgenlp-ortprof-") as tmp:
            sess = make_session(path, threads=spec.threads, profile_prefix=str(Path(tmp) / "ort"))
            # plain and profiled runs alternate so both see the same machine load
            t = interleave({"plain": lambda: plain.run(None, feed), "profiled": lambda: sess.run(None, feed)},
                           rounds=spec.runs, warmup=spec.warmup, alternate=False)
            e2e = t.values("plain")
            runs, totals = parse_profile(sess.end_profiling())
        runs, totals = runs[-spec.runs :], totals[-spec.runs :]
        first = runs[0]
        if any(len(r) != len(first) or [e["name"] for e in r] != [e["name"] for e in first] for r in runs):
            raise EdgeNLPError("onnx: node events differ between runs; cannot align them")
        events = []
        for j, e in enumerate(first):
            args = e.get("args", {})
            kind = classify(args.get("op_name", ""), _shapes(args))
            name = e["name"][: -len("_kernel_time")]
            events.append(TimedEvent(name, kind, tuple(r[j]["dur"] / 1e3 for r in runs)))
        return Measurement(self.runtime, self.method, spec, e2e, totals, attribute(events, target.plan, runtime=self.runtime))
