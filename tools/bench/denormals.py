"""Benchmark: ExecuTorch method time with denormals flushed to zero and without, per method of one bucket. Not CI.

Takes a dynamic bundle (``tools/bench/dynamic.py``'s) and one bucket: its static ``forward_<S>``, ``embed_<S>`` and
every ``seg<k>_<S>``, each run on the same inputs (a review's tokens, real length = the bucket; the hidden states
each segment gets are the previous segment's output) with ``torch.set_flush_denormal`` off and on
(:func:`edgenlp.run.executorch.execute`), alternately in one process, 1 thread. A method's time is the median of its
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
    from edgenlp.run.executorch import execute

    runner = get_runner(bundle, runtime="executorch", threads=1)
    be = runner.backend
    texts = load_task(task).dev.texts
    ids = next(x for x in runner.token_ids(texts[:200]) if len(x) >= bucket)[:bucket]  # a review that fills the bucket
    x = torch.tensor([ids], dtype=torch.int64)
    mask = torch.ones_like(x)
    bias = torch.zeros((1, bucket), dtype=torch.float32)
    static = be._method(next(m.name for m in be.bundle.pte_methods if m.seq_len == bucket))
    embed = be._method(be.entry.embedding_pte[bucket])
    segs = [be._method(s.pte[bucket]) for s in be.entry.segments]
    inputs = {"forward": [x, mask], "embed": [x]}
    h = execute(embed, [x])[0]
    for k, m in enumerate(segs):
        inputs[f"seg{k}"] = [h, bias]
        h = execute(m, [h, bias])[0]
    methods = {"forward": static, "embed": embed, **{f"seg{k}": m for k, m in enumerate(segs)}}
    times: dict[str, dict[str, list[float]]] = {n: {"off": [], "on": []} for n in methods}
    for r in range(rounds):
        for name, m in methods.items():
            for mode in (("off", "on") if r % 2 == 0 else ("on", "off")):
                for _ in range(calls):
                    t0 = time.perf_counter()
                    if mode == "on":
                        execute(m, inputs[name])
                    else:
                        m.execute(inputs[name])
                    times[name][mode].append(1000 * (time.perf_counter() - t0))
    med = {n: {mode: float(np.median(v)) for mode, v in t.items()} for n, t in times.items()}
    seg_names = [n for n in methods if n != "forward"]
    return {"bundle": str(bundle), "bucket": bucket, "task": task, "rounds": rounds, "calls_per_round": calls,
            "methods": med,
            "segmented_sum_ms": {mode: sum(med[n][mode] for n in seg_names) for mode in ("off", "on")}}


def markdown(doc: dict) -> str:
    lines = ["# Denormals flushed to zero: ExecuTorch method time, per method", "",
             f"`{Path(doc['bundle']).parent.name}/{Path(doc['bundle']).name}`, bucket {doc['bucket']} (a {doc['task']} "
             f"dev review that fills it), 1 thread; the median of {doc['rounds']} x {doc['calls_per_round']} calls, "
             "flush off and on alternating.", "",
             "| method | flush off (ms) | flush on (ms) | off / on |", "|---|---:|---:|---:|"]
    for n, m in doc["methods"].items():
        lines.append(f"| {n} | {m['off']:.2f} | {m['on']:.2f} | {m['off'] / m['on']:.2f} |")
    s = doc["segmented_sum_ms"]
    f = doc["methods"]["forward"]
    lines.append(f"| embed + every segment | {s['off']:.2f} | {s['on']:.2f} | {s['off'] / s['on']:.2f} |")
    lines += ["", f"The static forward over embed + every segment (the segmented path's method time at keep ratio 1): "
                  f"{f['off'] / s['off']:.2f}x with flush off, {f['on'] / s['on']:.2f}x with it on."]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bundle", type=Path, required=True, help="A dynamic bundle.")
    ap.add_argument("--bucket", type=int, default=128)
    ap.add_argument("--task", default="imdb")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--calls", type=int, default=5)
    ap.add_argument("--out", type=Path, default=RESULTS / "denormals")
    args = ap.parse_args()
    doc = measure(args.bundle, args.bucket, args.task, args.rounds, args.calls)
    Results(script="denormals", threads=1).write(args.out, doc, markdown(doc))


if __name__ == "__main__":
    main()
