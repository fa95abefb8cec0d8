"""Diagnostic: ExecuTorch method time with denormals flushed to zero and without, per method of one bucket. Not CI.

The question: do attention probabilities underflowing into the denormal range slow the segments (x86 cores take a
microcode assist on each operation that touches a denormal)? Flushing them to zero is one call
(``torch.set_flush_denormal``), and the native runtime could set FTZ/DAZ around each method call. Measured on the
Xeon host (``tools/bench/results/denormals.md``): with off and on alternating call by call, off / on is 1.00 within
the noise for every method and input, so the runtimes leave the flag alone. Timed in blocks instead, this host's slow phases
(every method ~1.4x slower for minutes at a time) had looked like a denormal effect.

Takes a dynamic bundle (``tools/bench/dynamic.py``'s) and one bucket: its static ``forward_<S>``, ``embed_<S>`` and
every ``seg<k>_<S>``, each run on the same inputs (a dev review that fills the bucket, and two tokens each repeated to fill
it; the hidden states each segment gets are the previous segment's output) with ``torch.set_flush_denormal`` off and on
(a local wrapper), alternately in one process, 1 thread. A method's time is the median of its
calls. Writes ``<out>.json`` and ``<out>.md``.

    python tools/bench/denormals.py --bundle /tmp/imdb/bench/imdb128-ltp/bundle-fp32 --bucket 128
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

from tools.bench.harness import RESULTS, Results  # noqa: E402


def measure(bundle: Path, bucket: int, task: str, rounds: int, calls: int) -> dict:
    import torch

    from edgenlp.data.tasks import load_task
    from edgenlp.run.base import get_runner

    def execute(method, inputs):  # flush on for this call, then off again (PyTorch's default)
        torch.set_flush_denormal(True)
        try:
            return method.execute(inputs)
        finally:
            torch.set_flush_denormal(False)

    runner = get_runner(bundle, runtime="executorch", threads=1)
    be = runner.backend
    texts = load_task(task).dev.texts
    review = next(x for x in runner.token_ids(texts[:200]) if len(x) >= bucket)[:bucket]  # a review that fills the bucket

    def repeated(text: str) -> list[int]:  # "[CLS] w w ... w [SEP]", filling the bucket
        return [review[0]] + [runner.token_ids([text])[0][1]] * (bucket - 2) + [review[-1]]

    cases = {"review": (review, f"the first {task} dev review of at least {bucket} tokens, cut to {bucket}"),
             "good x126": (repeated("good"), f"[CLS], {bucket - 2} x 'good', [SEP]"),
             'quote x126': (repeated('"'), f"[CLS], {bucket - 2} x '\"', [SEP]")}
    static = be._method(next(m.name for m in be.bundle.pte_methods if m.seq_len == bucket))
    embed = be._method(be.entry.embedding_pte[bucket])
    segs = [be._method(s.pte[bucket]) for s in be.entry.segments]
    methods = {"forward": static, "embed": embed, **{f"seg{k}": m for k, m in enumerate(segs)}}
    bias = torch.zeros((1, bucket), dtype=torch.float32)
    out = {}
    for input_name, (ids, _) in cases.items():
        x = torch.tensor([ids], dtype=torch.int64)
        inputs = {"forward": [x, torch.ones_like(x)], "embed": [x]}
        h = execute(embed, [x])[0]
        for k, m in enumerate(segs):
            inputs[f"seg{k}"] = [h, bias]
            h = execute(m, [h, bias])[0]
        times: dict[str, dict[str, list[float]]] = {n: {"off": [], "on": []} for n in methods}
        for r in range(rounds):
            for name, m in methods.items():
                for c in range(calls):  # off and on alternate call by call, so both see the same machine
                    for mode in (("off", "on") if (r + c) % 2 == 0 else ("on", "off")):
                        t0 = time.perf_counter()
                        if mode == "on":
                            execute(m, inputs[name])
                        else:
                            m.execute(inputs[name])
                        times[name][mode].append(1000 * (time.perf_counter() - t0))
        med = {n: {mode: float(np.median(v)) for mode, v in t.items()} for n, t in times.items()}
        out[input_name] = {"methods": med, "segmented_sum_ms": {
            mode: sum(v[mode] for n, v in med.items() if n != "forward") for mode in ("off", "on")}}
    return {"bundle": str(bundle), "bucket": bucket, "task": task, "rounds": rounds, "calls_per_round": calls,
            "inputs": {n: d for n, (_, d) in cases.items()}, "by_input": out}


def markdown(doc: dict) -> str:
    names = list(doc["by_input"])
    lines = ["# Denormals flushed to zero: ExecuTorch method time, per method", "",
             f"`{Path(doc['bundle']).parent.name}/{Path(doc['bundle']).name}`, bucket {doc['bucket']}, 1 thread; the "
             f"median of {doc['rounds']} x {doc['calls_per_round']} calls, flush off and on alternating call by call. Inputs: "
             + "; ".join(f"{n}: {d}" for n, d in doc["inputs"].items()) + ".", "",
             "| method | " + " | ".join(f"{n}: flush off (ms) | {n}: flush on (ms) | {n}: off / on" for n in names) + " |",
             "|---|" + "---:|---:|---:|" * len(names)]
    rows = list(doc["by_input"][names[0]]["methods"]) + ["embed + every segment"]
    for row in rows:
        cells = []
        for n in names:
            d = doc["by_input"][n]
            m = d["segmented_sum_ms"] if row == "embed + every segment" else d["methods"][row]
            cells.append(f"{m['off']:.2f} | {m['on']:.2f} | {m['off'] / m['on']:.2f}")
        lines.append(f"| {row} | " + " | ".join(cells) + " |")
    lines.append("")
    for n in names:
        d = doc["by_input"][n]
        f, s = d["methods"]["forward"], d["segmented_sum_ms"]
        lines.append(f"- {n}: the static forward over embed + every segment (the segmented path's method time at keep "
                     f"ratio 1) {f['off'] / s['off']:.2f}x with flush off, {f['on'] / s['on']:.2f}x with it on.")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bundle", type=Path, required=True, help="A dynamic bundle.")
    ap.add_argument("--bucket", type=int, default=128)
    ap.add_argument("--task", default="imdb")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--calls", type=int, default=5)
    ap.add_argument("--out", type=Path, default=RESULTS / "denormals")
    args = ap.parse_args()
    doc = measure(args.bundle, args.bucket, args.task, args.rounds, args.calls)
    Results(script="denormals", threads=1).write(args.out, doc, markdown(doc))


if __name__ == "__main__":
    main()
