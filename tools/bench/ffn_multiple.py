"""Benchmark: FFN widths that 32 divides (``edgenlp prune --ffn-multiple 32``) against free widths (not CI).

``fast`` pruning returns FFN widths such as 1222 or 70. An int4 scheme then
keeps every such layer's ``ffn_out`` at int8 (its in-features are not a
multiple of the group size), and the runtime's GEMM tiles run partly empty.
For each sparsity this script prunes the same teacher with ``fast`` twice
(``--ffn-multiple 1`` and ``32``), quantizes both the same way (``--scheme``,
int4 by default, with the int4 word table and the trimmed vocabulary: the
compress headline's accuracy end), and measures:

* dev accuracy through ExecuTorch (``edgenlp eval``),
* ``.pte`` size, and how many linears the scheme had to keep at int8,
* ExecuTorch latency at seq 128 and 32, 1 thread, the unpruned fp32 bundle
  and every variant in interleaved rounds in one process (ratios, medians).

Writes ``<out>.json`` and ``<out>.md``. Every step goes through the CLI, as a
user would run it; finished steps in ``--workdir`` are reused.

    python tools/bench/ffn_multiple.py --teacher /work/artifacts/teachers/sst2 --task sst2 --sparsities 0.3 0.5
"""

from __future__ import annotations

import sys
from pathlib import Path

_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]  # a bench script must not shadow the stdlib

import argparse  # noqa: E402
import json  # noqa: E402
import logging  # noqa: E402
import os  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402

ROOT = _HERE.parents[1]
sys.path.insert(0, str(ROOT))

from tools.bench.harness import RESULTS, Results  # noqa: E402

log = logging.getLogger("bench.ffn_multiple")


def edgenlp(*args, threads: int) -> None:
    cmd = [sys.executable, "-m", "edgenlp.cli", *map(str, args)]
    log.info("run: edgenlp %s", " ".join(map(str, args)))
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    subprocess.run(cmd, check=True, env=env, cwd=ROOT)


def accuracy(bundle: Path, task: str, *, threads: int) -> float:
    out = bundle / "eval.json"
    if not out.is_file():
        res = subprocess.run([sys.executable, "-m", "edgenlp.cli", "eval", str(bundle), "--task", task, "--threads",
                              str(threads), "--json"], check=True, capture_output=True, text=True, cwd=ROOT)
        out.write_text(res.stdout)
    return float(json.loads(out.read_text())["accuracy"])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--teacher", type=Path, required=True, help="fine-tuned model directory")
    p.add_argument("--task", default="sst2")
    p.add_argument("--sparsities", nargs="+", type=float, default=[0.3, 0.5])
    p.add_argument("--multiples", nargs="+", type=int, default=[1, 32])
    p.add_argument("--scheme", default="int4", choices=["int8", "int4"])
    p.add_argument("--threads", type=int, default=2, help="threads for pruning and evaluation (latency: 1)")
    p.add_argument("--iters", type=int, default=15)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--workdir", type=Path, default=Path("/tmp/ffn-multiple"))
    p.add_argument("--note", default="")
    p.add_argument("--out", type=Path, default=RESULTS / "ffn_multiple")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")

    from edgenlp.utils import isa_flags
    from tools.bench.prune import measure  # the interleaved ExecuTorch latency of prune.py

    writer = Results(script="ffn_multiple", threads=1)
    t0 = time.perf_counter()
    wd = args.workdir
    wd.mkdir(parents=True, exist_ok=True)
    bundles = {}
    base = wd / "bundle-unpruned"
    if not (base / "manifest.json").is_file():
        edgenlp("export", args.teacher, "--task", args.task, "--format", "pte", "--buckets", "32,128", "--out", base,
                threads=args.threads)
    bundles["unpruned fp32"] = base
    rows = []
    for s in args.sparsities:
        for m in args.multiples:
            name = f"fast{round(100 * s)}-m{m}"
            pruned, q = wd / name, wd / f"{name}-{args.scheme}"
            if not (pruned / "prune.json").is_file():
                edgenlp("prune", args.teacher, "--task", args.task, "--method", "fast", "--target-sparsity", s,
                        "--ffn-multiple", m, "--threads", args.threads, "--out", pruned, "-q", threads=args.threads)
            if not (q / "manifest.json").is_file():
                edgenlp("quantize", pruned, "--scheme", args.scheme, "--embeddings", "int4", "--trim-vocab", "--task",
                        args.task, "--format", "pte", "--buckets", "32,128", "--out", q, threads=args.threads)
            rep = json.loads((pruned / "prune.json").read_text())
            qrep = json.loads((q / "quantize.json").read_text())
            bits = qrep["final_bits"]
            rows.append({"name": name, "sparsity": s, "ffn_multiple": m, "ffn": rep["shape"]["ffn"],
                         "heads": rep["shape"]["heads"], "achieved": rep["achieved"]["encoder_params"],
                         "dev_fp32_eager": rep["dev_after"]["accuracy"],
                         "dev_quantized": accuracy(q, args.task, threads=args.threads),
                         "int8_fallbacks": len(qrep.get("fallbacks", [])),
                         "linears_4bit": sum(1 for b in bits.values() if b == 4), "linears": len(bits),
                         "pte_mb": round((q / "model.pte").stat().st_size / 1e6, 2), "bundle": str(q)})
            bundles[name] = q
    teacher_acc = accuracy(base, args.task, threads=args.threads)
    lat = measure(bundles, iters=args.iters, rounds=args.rounds)
    results = {"isa": isa_flags(), "environment": writer.environment, "note": args.note, "task": args.task,
               "scheme": args.scheme, "teacher": str(args.teacher), "teacher_dev": teacher_acc, "rows": rows,
               "latency": lat, "wall_min": round((time.perf_counter() - t0) / 60, 1)}
    writer.write(args.out, results, render(results))
    log.info("wrote %s (%.1f min)", args.out.with_suffix(".md"), results["wall_min"])
    return 0


def render(r: dict) -> str:
    lat = r["latency"]

    def ms(name, seq):
        return lat[name][str(seq)]["median_ms"]

    cpu = r["environment"]["cpu"]["model"]
    lines = [f"# FFN widths that 32 divides vs free widths ({r['task']}, `fast`, {r['scheme']} linears + int4 table + "
             "trimmed vocabulary)", "",
             f"Machine: {cpu}, ISA flags {r['isa']}. {r['note']}".rstrip(), "",
             f"Unpruned teacher `{r['teacher']}`: dev {100 * r['teacher_dev']:.2f}% (fp32 bundle through ExecuTorch), "
             f"{ms('unpruned fp32', 128):.2f} ms @128, {ms('unpruned fp32', 32):.2f} ms @32. Latency: ExecuTorch "
             "(XNNPACK), 1 thread, batch 1, median over interleaved rounds; speed-up = unpruned fp32 / variant.", "",
             "| sparsity | --ffn-multiple | FFN per layer | 4-bit linears | int8 fallbacks | dev acc (ET) | Δ vs teacher | "
             ".pte MB | ms @128 | speed-up @128 | ms @32 | speed-up @32 |",
             "|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for row in r["rows"]:
        a, b = ms(row["name"], 128), ms(row["name"], 32)
        lines.append(f"| {100 * row['sparsity']:.0f}% ({100 * row['achieved']:.1f}%) | {row['ffn_multiple']} | "
                     f"{row['ffn']} | {row['linears_4bit']}/{row['linears']} | {row['int8_fallbacks']} | "
                     f"{100 * row['dev_quantized']:.2f}% | {100 * (row['dev_quantized'] - r['teacher_dev']):+.2f} | "
                     f"{row['pte_mb']} | {a:.2f} | {ms('unpruned fp32', 128) / a:.2f}x | {b:.2f} | "
                     f"{ms('unpruned fp32', 32) / b:.2f}x |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
