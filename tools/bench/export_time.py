"""Where the time of `edgenlp export` goes, per stage, and the parity bound it applied.

Exports MiniLM (or ``--model``, e.g. a fine-tuned directory) for ``--task`` to
ExecuTorch with four buckets (16, 32, 64, 128), each export in a fresh process,
interleaved: int8 linears + int8 word table (``--quant int8
--quant-embeddings int8``) and fp32, each lowered in one process (the
baseline: how every export lowered before ``edgenlp.export.lowering``) and in
``--processes`` processes (the default export: one per core). For each it records the
wall and CPU seconds of the whole export, the stages the manifest reports
(quantize, ``torch.export`` per bucket, edge lowering + XNNPACK partitioning,
``to_executorch`` + serialization, the parity references and runs), and the
parity figures: the lowering error, the reference's activation-rounding error,
their ratio (max and RMS), the bound applied and the kernel family. CPU seconds
count this process only; the helper processes' CPU time is in ``children_cpu_s``.

    PYTHONPATH=. python tools/bench/export_time.py --rounds 1
    PYTHONPATH=. python tools/bench/export_time.py --model /tmp/ft-b77 --task banking77 --seq-len 64

Writes tools/bench/results/export-time.{json,md}. Timings on a loaded host
are wall time under contention: the JSON records the load average, and the CPU
seconds (process time) are the figure that load moves least.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tools.bench.harness import REPO, RESULTS, Results, load_average, median  # noqa: E402

log = logging.getLogger("bench.export_time")

CONFIGS = {
    "int8+emb-int8": {"scheme": "int8", "embeddings": "int8"},
    "fp32": None,
}
TARGETS_S = {"int8+emb-int8": 90.0, "fp32": 45.0}  # issue 26, on 2 idle cores


def key(config: str, processes: int) -> str:
    return f"{config}, lowered in {processes} process{'es' * (processes > 1)}"


def one(config: str, *, model: str, task: str, seq_len: int, buckets: tuple[int, ...], threads: int,
        processes: int) -> dict:
    """One export in this process, lowering in ``processes`` processes; the manifest's timings and parity figures."""
    import resource

    import torch

    os.environ["EDGENLP_LOWER_PROCESSES"] = str(processes)

    torch.set_num_threads(threads)
    from edgenlp.bundle import Bundle
    from edgenlp.data.tasks import load_task
    from edgenlp.export.api import ExportConfig, export_bundle
    from edgenlp.models.registry import load_model
    from edgenlp.quantize.api import quantize_model
    from edgenlp.quantize.config import QuantizeConfig

    data = load_task(task)
    m, info = load_model(model, labels=data.labels)
    cpu0, wall0, load0 = time.process_time(), time.perf_counter(), load_average()
    q = CONFIGS[config]
    if q is not None:
        m, info = quantize_model(m, info, QuantizeConfig(**q), task=data)
    with tempfile.TemporaryDirectory() as tmp:
        b = export_bundle(m, info, Path(tmp) / "b", task=data,
                          config=ExportConfig(formats=("pte",), max_seq_len=seq_len, buckets=buckets))
        man = Bundle.open(b.path).manifest
    p = man["parity"]["executorch"]
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    row = {"config": config, "processes": processes, "lowering_processes": man["artifacts"]["pte"]["lowering_processes"],
           "wall_s": round(time.perf_counter() - wall0, 2), "cpu_s": round(time.process_time() - cpu0, 2),
           "children_cpu_s": round(children.ru_utime + children.ru_stime, 2), "load_avg_before": load0,
           "load_avg_after": load_average(), "stages_s": man["export"]["stages"],
           "parity": {k: p.get(k) for k in ("max_abs_diff", "rms_diff", "tolerance", "argmax_agreement", "samples",
                                           "activation_rounding_error", "activation_rounding_rms", "kernel_family",
                                           "per_bucket", "passed")},
           "bound": p.get("bound"), "fp32": p.get("fp32")}
    if p.get("activation_rounding_error"):
        row["parity"]["max_ratio"] = round(p["max_abs_diff"] / p["activation_rounding_error"], 3)
        row["parity"]["rms_ratio"] = round(p["rms_diff"] / p["activation_rounding_rms"], 3)
    return row


def run_fresh(config: str, processes: int, args) -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]),
           "OMP_NUM_THREADS": str(args.threads)}
    cmd = [sys.executable, str(Path(__file__).resolve()), "--one", config, "--model", args.model, "--task", args.task,
           "--seq-len", str(args.seq_len), "--buckets", ",".join(map(str, args.buckets)), "--threads", str(args.threads),
           "--processes", str(processes)]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"{config} export failed: {proc.stderr.strip()[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def markdown(doc: dict) -> str:
    lines = [f"# Export time: {doc['model']} for {doc['task']}, ExecuTorch, buckets {doc['buckets']}", "",
             "| config | lowered in | wall s (median) | vs 1 process | CPU s (+ helpers) | target s (2 idle cores) | quantize | "
             "torch.export (all buckets) | edge lower + partition | to_executorch + serialize | parity | "
             "lowering err / rounding err (max, RMS) | bound |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, s in doc["summary"].items():
        st = s["stages_s"]
        export = sum(v for k, v in st.items() if k.startswith("pte_torch_export_"))
        parity = sum(v for k, v in st.items() if k.startswith("parity_"))
        ratio = (f"{s['parity']['max_ratio']:.2f}, {s['parity']['rms_ratio']:.2f}"
                 if s["parity"].get("max_ratio") is not None else "n/a (fp32)")
        base = doc["summary"].get(key(s["config"], 1))
        speed = f"{base['wall_s'] / s['wall_s']:.2f}x" if base else ""
        lines.append(f"| {s['config']} | {s['lowering_processes']} | {s['wall_s']:.1f} | {speed} | "
                     f"{s['cpu_s']:.1f} (+ {s.get('children_cpu_s', 0):.1f}) | {TARGETS_S[s['config']]:.0f} | "
                     f"{st.get('quantize', 0):.1f} | {export:.1f} | {st.get('pte_edge_lower_partition', 0):.1f} | "
                     f"{st.get('pte_to_executorch_serialize', 0):.1f} | {parity:.1f} | {ratio} | "
                     f"{s['bound']['applied'] if s.get('bound') else ''} |")
    lines += ["", f"Stages are wall seconds from the manifest's `export.stages` (median round of {doc['rounds']}). "
                  "Lowering in 1 process is how every export lowered before `edgenlp.export.lowering`: the baseline, "
                  f"measured in the same run, interleaved. Load average during the runs: {doc['load_during']}. "
                  "On a loaded host wall time is CPU time stretched by contention; the targets are for 2 idle cores.", ""]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="minilm-l6")
    ap.add_argument("--label", default=None, help="How the results name the model (default: --model)")
    ap.add_argument("--task", default="banking77")
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--buckets", type=lambda s: tuple(int(x) for x in s.split(",")), default=(16, 32, 64, 128))
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--configs", default=",".join(CONFIGS))
    ap.add_argument("--processes", type=int, default=2, help="lowering processes of the default export (the baseline is 1)")
    ap.add_argument("--one", choices=sorted(CONFIGS), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    if args.one:
        print(json.dumps(one(args.one, model=args.model, task=args.task, seq_len=args.seq_len, buckets=args.buckets,
                             threads=args.threads, processes=args.processes)))
        return 0
    results = Results(script="export_time", threads=args.threads)
    runs = [(c, p) for c in args.configs.split(",") for p in sorted({1, args.processes})]
    rows: list[dict] = []
    loads = []
    for r in range(args.rounds):
        for c, p in (runs if r % 2 == 0 else runs[::-1]):  # interleaved, alternating order
            log.info("round %d: %s", r, key(c, p))
            row = {**run_fresh(c, p, args), "round": r}
            rows.append(row)
            loads.append(row["load_avg_after"][0])
            summary = {}
            for rc, rp in runs:
                got = [x for x in rows if x["config"] == rc and x["processes"] == rp]
                if got:
                    mid = sorted(got, key=lambda x: x["wall_s"])[len(got) // 2]
                    summary[key(rc, rp)] = {**mid, "wall_s": median([x["wall_s"] for x in got]),
                                            "cpu_s": median([x["cpu_s"] for x in got]), "rounds": len(got)}
            doc = {"model": args.label or args.model, "task": args.task, "seq_len": args.seq_len, "buckets": list(args.buckets),
                   "targets_s": TARGETS_S, "rounds": r + 1, "load_during": loads, "rows": rows, "summary": summary}
            results.write(RESULTS / "export-time", doc, markdown(doc))  # after every export: a long run keeps what it has
    return 0


if __name__ == "__main__":
    sys.exit(main())
