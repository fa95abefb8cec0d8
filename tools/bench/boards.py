"""Benchmark: the per-component profile of one bundle on qemu:cortex-a53, qemu:cortex-a76 and the host (not CI).

One :func:`edgenlp.profile.api.profile` call with three runtimes: the native
runner under ``qemu-aarch64 -cpu cortex-a53`` and ``-cpu cortex-a76`` (boards
opened with :func:`edgenlp.boards.open_board`) and the native runner on this
machine. qemu times are emulation times, not device times: what this shows is
that the board path produces the same table, and how the shares compare.
Writes into ``tools/bench/results/``:

  boards.json   config, environment (ISA flags), the profile document(s), wall times
  boards.md     per-component ms and shares side by side, per sequence length

    python tools/bench/boards.py --bundle out/minilm-sst2              # any bundle with a .pte
    python tools/bench/boards.py --teacher /work/artifacts/teachers/sst2 --task sst2   # exported first
    python tools/bench/boards.py --teacher out/compress/finetune/model --task sst2 --quant fp32,int8
        # one bundle per precision (int8: the quantize step's int8 linears), the shares side by side
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import sys
import tempfile
import time
from pathlib import Path

# tools/bench/profile.py would shadow the standard library's ``profile`` (torch imports it through
# cProfile): drop this script's folder from the import path.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
ROOT = _HERE.parents[1]
sys.path.insert(0, str(ROOT))

from tools.bench.harness import RESULTS, Results  # noqa: E402

log = logging.getLogger("bench.boards")

LABEL = {"native": "host (native runner)"}


def column_label(rt: str) -> str:
    if rt.startswith("native@qemu:"):
        return f"{rt.split(':', 1)[1]} (qemu, emulated)"
    return LABEL.get(rt, rt)


def export(teacher: str, task: str, out: Path, seq_len: int, quant: str = "fp32") -> Path:
    from click.testing import CliRunner

    from edgenlp.cli import main

    buckets = ",".join(str(b) for b in (16, 32, 64, 128) if b <= seq_len)
    extra = [] if quant == "fp32" else ["--quant", quant]
    r = CliRunner().invoke(main, ["export", teacher, "--task", task, "--format", "pte", "--seq-len", str(seq_len),
                                  "--buckets", buckets, *extra, "--out", str(out)])  # fmt: skip
    if r.exit_code != 0:
        if r.exc_info is not None and not isinstance(r.exception, SystemExit):
            raise r.exception
        raise SystemExit(f"export failed: {r.output}")
    return out


def merge_host(board_docs: list[dict], host_docs: list[dict]) -> list[dict]:
    """Add the host's runtime columns (measured with more runs) into the boards' documents, per (seq, threads)."""
    host = {(d["seq_len"], d["threads"]): d for d in host_docs}
    out = []
    for doc in board_docs:
        h = host[(doc["seq_len"], doc["threads"])]
        doc = json.loads(json.dumps(doc))
        for rt in h["runtimes"]:
            doc["runtimes"].append(rt)
            doc["methods"][rt] = h["methods"][rt]
            for c, hc in zip(doc["components"], h["components"]):
                for key, val in hc.items():
                    if isinstance(val, dict) and rt in val:
                        c[key][rt] = val[rt]
                c["share_pct"]["latency"][rt] = hc["share_pct"]["latency"][rt]
            for key, val in h["total"].items():
                if isinstance(val, dict) and rt in val:
                    doc["total"][key][rt] = val[rt]
        out.append(doc)
    return out


def shares(doc: dict, rt: str) -> dict[str, float]:
    total = doc["total"]["components_sum_ms"][rt] or 1.0
    return {c["name"]: 100 * c["latency_ms"][rt] / total for c in doc["components"]}


def comparison(variants: dict[str, list[dict]]) -> list[str]:
    """Shares of every (precision, runtime) column side by side, one table per sequence length."""
    names = list(variants)
    lines = []
    for i, doc0 in enumerate(variants[names[0]]):
        cols = [(v, rt) for v in names for rt in variants[v][i]["runtimes"]]
        sh = {(v, rt): shares(variants[v][i], rt) for v, rt in cols}
        lines += [f"## Shares side by side: seq {doc0['seq_len']}, {doc0['threads']} thread(s)", "",
                  "| component | " + " | ".join(f"{v}: {column_label(rt)}" for v, rt in cols) + " |",
                  "|---|" + "---:|" * len(cols)]  # fmt: skip
        for c in doc0["components"]:
            lines.append(f"| {c['name']} | " + " | ".join(f"{sh[col][c['name']]:.1f}%" for col in cols) + " |")
        tot = {(v, rt): variants[v][i]["total"]["latency_ms"][rt] for v, rt in cols}
        lines.append("| end-to-end median ms | " + " | ".join(f"{tot[col]:.1f}" for col in cols) + " |")
        if len(names) > 1:
            base = names[0]
            lines.append(f"| × {base} (same column) | " + " | ".join(
                f"{tot[(v, rt)] / tot[(base, rt)]:.2f}×" if (base, rt) in tot else "–" for v, rt in cols) + " |")
        lines.append("")
    return lines


def markdown(docs: list[dict], config: dict, seconds: float, env: dict, *, title: str = "", level: str = "#") -> str:
    cpu = env["cpu"]
    lines = [
        f"{level} Per-component profile on boards (tools/bench/boards.py){title}",
        "",
        "**qemu (emulated, not device times)**: the `qemu` columns run the aarch64 runner under `qemu-aarch64 -cpu CPU` "
        "on this x86 host; their milliseconds measure emulation, not a Cortex-A53 or A76. Compare shares, not times.",
        "",
        f"Bundle: `{config['bundle']}`; {config['runs']} timed runs after {config['warmup']} warm-up on the boards, "
        f"{config['host_runs']} on the host, 1 thread; "
        f"cells are ms (share of the component sum). Host: {cpu.get('model', '?')}, ISA flags {', '.join(cpu.get('isa', []))}. "
        f"Wall time {seconds:.0f} s.",
        "",
    ]
    for doc in docs:
        rts = doc["runtimes"]
        lines += [f"{level}# seq {doc['seq_len']}, {doc['threads']} thread(s)", "",
                  "| component | FLOPs share | " + " | ".join(column_label(rt) for rt in rts) + " |",
                  "|---|---:|" + "---:|" * len(rts)]  # fmt: skip
        for c in doc["components"]:
            cells = []
            for rt in rts:
                total = doc["total"]["components_sum_ms"][rt] or 1.0
                ms = c["latency_ms"][rt]
                cells.append(f"{ms:.1f} ({100 * ms / total:.1f}%)")
            lines.append(f"| {c['name']} | {c['share_pct']['flops']:.1f}% | " + " | ".join(cells) + " |")
        t = doc["total"]
        lines.append("| components sum | | " + " | ".join(f"{t['components_sum_ms'][rt]:.1f}" for rt in rts) + " |")
        lines.append("| end-to-end median | | " + " | ".join(f"{t['latency_ms'][rt]:.1f}" for rt in rts) + " |")
        ratio = {rt: t["latency_ms"][rt] / t["latency_ms"]["native"] for rt in rts if "native" in rts}
        if ratio:
            lines.append("| × host | | " + " | ".join(f"{ratio[rt]:.1f}×" for rt in rts) + " |")
        lines.append("")
    devs = docs[0].get("devices") or [docs[0].get("device")]
    lines += ["Devices as probed:", ""]
    for d in devs:
        if d:
            lines.append(f"- `{d['runtime']}`: {d.get('cpu_model')}, {d.get('cores')} cores, {d.get('emulated') or 'native'}")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bundle", help="A bundle directory with model.pte.")
    ap.add_argument("--teacher", help="A fine-tuned model directory to export first (with --task).")
    ap.add_argument("--task", default="sst2")
    ap.add_argument("--quant", default="fp32",
                    help="With --teacher: comma-separated precisions to export and profile (fp32, int8, int4), one section each.")
    ap.add_argument("--cpus", default="cortex-a53,cortex-a76")
    ap.add_argument("--seq-len", default="32")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--host-runs", type=int, default=30, help="Timed runs on the host (cheap; steadies its column).")
    ap.add_argument("--out", default=str(RESULTS / "boards"), help="Results path stem (.json and .md are added).")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")

    from edgenlp.boards import board_runtime, open_board
    from edgenlp.profile.api import ProfileConfig, profile

    writer = Results(script="boards", threads=1)
    seq_lens = tuple(int(s) for s in args.seq_len.split(","))
    quants = [q.strip() for q in args.quant.split(",") if q.strip()]
    if args.bundle and quants != ["fp32"]:
        ap.error("--quant needs --teacher (a bundle is profiled as it is)")
    variants: dict[str, list[dict]] = {}
    t0 = time.perf_counter()
    with contextlib.ExitStack() as stack:
        if not args.bundle and not args.teacher:
            ap.error("give --bundle or --teacher")
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-boards-")))
        rts = []
        for cpu in args.cpus.split(","):
            board = stack.enter_context(open_board(f"qemu:{cpu}"))
            rts.append(stack.enter_context(board_runtime(board)))
        for quant in quants:
            bundle = Path(args.bundle) if args.bundle else export(args.teacher, args.task, tmp / quant, max(seq_lens), quant)
            log.info("profiling the %s bundle on %s and the host", quant, ", ".join(rts))
            config = ProfileConfig(seq_lens=seq_lens, runtimes=tuple(rts), threads=(1,), runs=args.runs, warmup=args.warmup)
            board_docs = profile(bundle, config)
            host_docs = profile(bundle, ProfileConfig(seq_lens=seq_lens, runtimes=("native",), threads=(1,), runs=args.host_runs,
                                                      warmup=max(3, args.warmup)))  # fmt: skip
            variants[quant] = merge_host(board_docs, host_docs)
    seconds = time.perf_counter() - t0
    env = writer.environment
    cfg = {"bundle": args.teacher or str(args.bundle), "task": args.task, "quant": quants, "cpus": args.cpus,
           "seq_lens": list(seq_lens), "runs": args.runs, "warmup": args.warmup, "host_runs": args.host_runs}  # fmt: skip
    out = Path(args.out)
    doc = {"config": cfg, "seconds": round(seconds, 1), "environment": env,
           "note": "qemu columns are emulation times, not device times",
           "profiles": variants[quants[0]] if len(quants) == 1 else None, "variants": variants}
    if len(quants) == 1:
        text = markdown(variants[quants[0]], cfg, seconds, env)
    else:
        text = "\n".join(["# Per-component profile on boards, " + " vs ".join(quants) + " (tools/bench/boards.py)", "",
                          "**qemu (emulated, not device times)**: compare shares and ratios within a column, not times.", "",
                          *comparison(variants)])
        for q in quants:
            text += "\n" + markdown(variants[q], cfg, seconds, env, title=f": {q}", level="##")
    writer.write(out, doc, text)
    print(json.dumps({"json": str(out) + ".json", "md": str(out) + ".md", "seconds": round(seconds, 1)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
