"""Diagnostic: where running a dynamic bundle in segments costs more than its static program, per XNNPACK operator. Not CI.

A dynamic bundle holds the static program (``forward_<S>``) and the same layers cut into segments (``embed_<S>``,
``seg<k>_<S>``), each segment one XNNPACK delegate call that also returns its exit's logits. Run every segment
(no exit taken) and the chain does the static program's work plus the exit heads; what it costs beyond that is
the price of the early exits' control flow.

For every ``--bundle`` and bucket this script:

1. times the static method and the chain (embedding, then every segment, each taking the previous one's hidden
   states) alternately, call by call, in one process, 1 thread, on a dev sentence of the task cut or repeated to fill
   the bucket (no padding): the medians over ``--rounds`` calls;
2. profiles each of the two with ExecuTorch's ETDump (XNNPACK's per-operator events, the runtime's own
   profiling as ``../shared/RUNTIME_NOTES.md`` describes), each in a process of its own so that the operator
   events of one method do not mix with another's: milliseconds per pass by operator kind (the sum of an
   operator's events over ``--iters`` passes, divided by the passes). Profiling adds its own cost per operator, so
   the table explains the difference; the timed medians measure it.

Writes ``<out>.json`` and ``<out>.md`` with the host's ISA flags.

    python tools/bench/segment_overhead.py --bundle "fp32 heads=/tmp/hl/fixed-128-fp32/bundle" \\
        --bundle "int8 heads=/tmp/hl/fixed-128/bundle" --buckets 32 128 --out tools/bench/results/segment-overhead
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

from tools.bench.harness import RESULTS, Results  # noqa: E402

# operator kinds the table names (XNNPACK's event names without their " #n"); the rest are summed as "other"
HEAD_OPS = ("Fully Connected (NC, F32) GEMM",)  # fp32 linears: in these bundles only an fp32 exit head has them
RUNTIME_EVENTS = ("Method::execute", "DELEGATE_CALL", "OPERATOR_CALL")


def fail(msg: str) -> None:
    print(f"error: {msg}", file=sys.stderr)
    raise SystemExit(2)


def _methods(manifest: dict, bucket: int) -> tuple[str, str, list[str]]:
    d = manifest.get("dynamic")
    if not d:
        fail("the bundle has no segments (manifest without a dynamic section)")
    if bucket not in d["buckets"]:
        fail(f"bucket {bucket} is not one of the bundle's {d['buckets']}")
    return f"forward_{bucket}", d["embedding"]["pte"][str(bucket)], [s["pte"][str(bucket)] for s in d["segments"]]


def _ids(bundle: Path, bucket: int, task: str) -> list[int]:
    """A dev sentence's token ids, cut or repeated (its words between [CLS] and [SEP]) to exactly ``bucket``."""
    from edgenlp.data.tasks import load_task
    from edgenlp.run.base import get_runner

    runner = get_runner(bundle, runtime="executorch", threads=1)
    ids = max(runner.token_ids(load_task(task).dev.texts[:50]), key=len)
    words = ids[1:-1] or [ids[0]]
    body = (words * (bucket // len(words) + 1))[: bucket - 2]
    return [ids[0], *body, ids[-1]]


def _load(pte: Path, etdump: bool):
    import executorch.kernels.quantized  # noqa: F401  (registers the quantized kernels)
    from executorch.extension.pybindings.portable_lib import _unsafe_reset_threadpool
    from executorch.runtime import Runtime

    _unsafe_reset_threadpool(1)  # before loading (RUNTIME_NOTES)
    if etdump:
        return Runtime.get().load_program(str(pte), enable_etdump=True, debug_buffer_size=0)
    return Runtime.get().load_program(str(pte))


def _passes(program, names, ids: list[int]):
    """``(static pass, chain pass)`` callables on ``ids`` (no padding: the bias is all zeros)."""
    import torch

    forward, embed, segs = names
    fwd, emb = program.load_method(forward), program.load_method(embed)
    seg = [program.load_method(n) for n in segs]
    x = torch.tensor([ids], dtype=torch.int64)
    mask, bias = torch.ones_like(x), torch.zeros((1, len(ids)), dtype=torch.float32)

    def static():
        fwd.execute([x, mask])

    def chain():
        h = emb.execute([x])[0]
        for m in seg:
            h = m.execute([h, bias])[0]

    return static, chain


def profile_worker(args) -> None:
    """One pass kind (``--worker static|chain``) ``--iters`` times with ETDump; writes ``{event: ms per pass}``."""
    manifest = json.loads((args.bundle_path / "manifest.json").read_text())
    names = _methods(manifest, args.bucket)
    program = _load(args.bundle_path / "model.pte", etdump=True)
    static, chain = _passes(program, names, json.loads(args.ids))
    run = static if args.worker == "static" else chain
    for _ in range(3):
        run()
    with tempfile.TemporaryDirectory() as tmp:
        # the warm-up passes are in the dump too: profile a fresh program for the counted passes
        program = _load(args.bundle_path / "model.pte", etdump=True)
        static, chain = _passes(program, names, json.loads(args.ids))
        run = static if args.worker == "static" else chain
        for _ in range(args.iters):
            run()
        dump = Path(tmp) / "etdump.etdp"
        program.write_etdump_result_to_file(str(dump), str(Path(tmp) / "debug.bin"))
        from executorch.devtools import Inspector

        df = Inspector(etdump_path=str(dump)).to_dataframe()
    per_pass: dict[str, float] = defaultdict(float)
    calls: dict[str, float] = defaultdict(float)
    for _, row in df.iterrows():
        if row["event_block_name"] != "Execute":
            continue
        kind = re.sub(r" #\d+$", "", str(row["event_name"]))
        raw = [float(v) for v in row["raw"]]
        per_pass[kind] += sum(raw) / args.iters
        calls[kind] += len(raw) / args.iters
    Path(args.worker_out).write_text(json.dumps({"ms": per_pass, "calls": calls}))


def _profile(bundle: Path, bucket: int, ids: list[int], worker: str, iters: int) -> dict:
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        cmd = [sys.executable, __file__, "--worker", worker, "--bundle-path", str(bundle), "--bucket", str(bucket),
               "--ids", json.dumps(ids), "--iters", str(iters), "--worker-out", f.name]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode:
            raise RuntimeError(f"profiling {worker} of {bundle} failed:\n{done.stderr[-2000:]}")
        return json.loads(Path(f.name).read_text())


def _time(bundle: Path, bucket: int, ids: list[int], rounds: int) -> dict:
    manifest = json.loads((bundle / "manifest.json").read_text())
    program = _load(bundle / "model.pte", etdump=False)
    static, chain = _passes(program, _methods(manifest, bucket), ids)
    for _ in range(5):
        static(), chain()
    t = {"static": [], "chain": []}
    for r in range(rounds):
        for name, f in ((("static", static), ("chain", chain)) if r % 2 == 0 else (("chain", chain), ("static", static))):
            t0 = time.perf_counter()
            f()
            t[name].append(1000 * (time.perf_counter() - t0))
    return {k: float(np.median(v)) for k, v in t.items()}


def measure(bundles: dict[str, Path], buckets, task: str, rounds: int, iters: int) -> dict:
    cases = []
    for label, bundle in bundles.items():
        manifest = json.loads((bundle / "manifest.json").read_text())
        seg_linears = [m.get("delegated_linears") for m in manifest["dynamic"]["pte"]["methods"] if m["name"].startswith("seg")]
        for bucket in buckets:
            _methods(manifest, bucket)
            ids = _ids(bundle, bucket, task)
            timed = _time(bundle, bucket, ids, rounds)
            prof = {w: _profile(bundle, bucket, ids, w, iters) for w in ("static", "chain")}
            cases.append({"bundle": label, "path": str(bundle), "bucket": bucket, "timed_ms": timed,
                          "overhead": timed["chain"] / timed["static"] - 1.0, "profile": prof,
                          "segment_linears": seg_linears[0] if seg_linears else None})
    return {"task": task, "rounds": rounds, "iters": iters, "cases": cases}


def _rows(case: dict) -> list[tuple[str, float, float, float, float]]:
    """(operator kind, static ms, chain ms, static calls, chain calls), largest difference first, the rest as 'other'."""
    s, c = case["profile"]["static"], case["profile"]["chain"]
    kinds = (set(s["ms"]) | set(c["ms"])) - set(RUNTIME_EVENTS)
    rows = [(k, s["ms"].get(k, 0.0), c["ms"].get(k, 0.0), s["calls"].get(k, 0.0), c["calls"].get(k, 0.0)) for k in kinds]
    rows.sort(key=lambda r: -abs(r[2] - r[1]))
    top, rest = rows[:8], rows[8:]
    if rest:
        top.append(("other", sum(r[1] for r in rest), sum(r[2] for r in rest), sum(r[3] for r in rest),
                    sum(r[4] for r in rest)))
    return top


def markdown(doc: dict) -> str:
    out = ["# What running in segments costs over the static program", "",
           f"Every segment run (no exit taken) on a {doc['task']} dev sentence cut or repeated to fill the bucket, 1 thread. "
           f"**Timed**: the static method and the chain (embedding + every segment) alternating call by call, "
           f"medians of {doc['rounds']} calls each. **Profiled**: ETDump's XNNPACK operator events, ms per pass "
           f"(the sum over {doc['iters']} passes / passes), each pass kind in a process of its own; profiling adds a "
           "cost per operator, so the timed medians are the measurement and the profile says where it goes.", "",
           "| bundle | bucket | segment linears | static ms | chain ms | chain / static | profiled difference | of it: fp32 linears |",
           "|---|---:|---|---:|---:|---:|---:|---:|"]
    for case in doc["cases"]:
        s, c = case["profile"]["static"]["ms"], case["profile"]["chain"]["ms"]
        diff = c.get("Method::execute", 0.0) - s.get("Method::execute", 0.0)
        head = sum(c.get(k, 0.0) - s.get(k, 0.0) for k in HEAD_OPS)
        t = case["timed_ms"]
        out.append(f"| {case['bundle']} | {case['bucket']} | {case['segment_linears']} | {t['static']:.3f} | "
                   f"{t['chain']:.3f} | {t['chain'] / t['static']:.3f} | {diff:+.3f} ms | {head:+.3f} ms |")
    for case in doc["cases"]:
        out += ["", f"## {case['bundle']}, bucket {case['bucket']}: by operator (profiled ms per pass)", "",
                "| operator | static ms | chain ms | difference | static calls | chain calls |", "|---|---:|---:|---:|---:|---:|"]
        for k, a, b, na, nb in _rows(case):
            out.append(f"| {k} | {a:.4f} | {b:.4f} | {b - a:+.4f} | {na:.0f} | {nb:.0f} |")
        s, c = case["profile"]["static"]["ms"], case["profile"]["chain"]["ms"]
        out.append(f"| Method::execute (whole passes) | {s.get('Method::execute', 0):.4f} | {c.get('Method::execute', 0):.4f} | "
                   f"{c.get('Method::execute', 0) - s.get('Method::execute', 0):+.4f} | | |")
    return "\n".join(out) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bundle", action="append", default=[], help="LABEL=PATH of a dynamic bundle (repeatable).")
    ap.add_argument("--buckets", type=int, nargs="+", default=[32, 128])
    ap.add_argument("--task", default="sst2")
    ap.add_argument("--rounds", type=int, default=400)
    ap.add_argument("--iters", type=int, default=100)
    ap.add_argument("--out", type=Path, default=RESULTS / "segment-overhead")
    # a profiling worker (one pass kind, its own process)
    ap.add_argument("--worker", choices=("static", "chain"), help=argparse.SUPPRESS)
    ap.add_argument("--bundle-path", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--bucket", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--ids", help=argparse.SUPPRESS)
    ap.add_argument("--worker-out", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        profile_worker(args)
        return
    bundles = {}
    for item in args.bundle:
        label, sep, path = item.partition("=")
        if not sep or not (Path(path) / "manifest.json").is_file():
            fail(f"--bundle {item!r}: expected LABEL=PATH of a bundle directory")
        bundles[label] = Path(path)
    if not bundles:
        fail("give at least one --bundle LABEL=PATH")
    doc = measure(bundles, args.buckets, args.task, args.rounds, args.iters)
    Results(script="segment_overhead", threads=1).write(args.out, doc, markdown(doc))


if __name__ == "__main__":
    main()
