"""Benchmark: where a quantized bundle spends its time, per component, against fp32 (not CI).

``edgenlp export MODEL --quant SCHEME`` builds one bundle per precision from a
fine-tuned model (the quantize step itself: int8 per-channel or int4 groupwise
linears on XNNPACK; the word table stays fp32 so that only the linears differ).
Each bundle is then profiled per component through ExecuTorch (ETDump, XNNPACK
per-operator events) at each sequence length, 1 thread. The bundles are
profiled in interleaved rounds (``--rounds``, each ``--runs`` timed runs; the
order flips every round), and
every cell is the median over the rounds, so a change of machine load hits all
precisions alike. This answers "if a scheme is slower than fp32 (or than int8),
show it and explain it from the profile": the per-component ratios say which
rows lose.

Writes ``<out>.json`` (every round's documents, the ISA flags) and ``<out>.md``.

    python tools/bench/quant_profile.py --model out/compress/finetune/model --task sst2
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import time
from pathlib import Path

_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]  # a bench script must not shadow the stdlib
ROOT = _HERE.parents[1]
sys.path.insert(0, str(ROOT))

from tools.bench.harness import RESULTS, Results, median, run_rounds  # noqa: E402

log = logging.getLogger("bench.quant_profile")
COMPONENTS = ("embedding", "attn_qkv", "attn_core", "attn_out", "ffn", "other")


def export(model: str, task: str, out: Path, *, quant: str, seq_len: int) -> Path:
    from click.testing import CliRunner

    from edgenlp.cli import main

    extra = [] if quant == "fp32" else ["--quant", quant]
    r = CliRunner().invoke(main, ["export", model, "--task", task, "--format", "pte", "--seq-len", str(seq_len),
                                  *extra, "--out", str(out)])  # fmt: skip
    if r.exit_code != 0:
        raise SystemExit(f"export {quant} failed: {r.output.strip()}")
    return out


def summarize(rounds: list[dict[str, list[dict]]], quants: list[str]) -> list[dict]:
    """Per (seq_len, precision): median over rounds of each component's ms and of the end-to-end time."""
    out = []
    for i, doc0 in enumerate(rounds[0][quants[0]]):
        for q in quants:
            docs = [r[q][i] for r in rounds]
            comp = {c: median([next(x for x in d["components"] if x["name"] == c)["latency_ms"]["executorch"] for d in docs])
                    for c in COMPONENTS}
            first = docs[0]
            out.append({
                "seq_len": doc0["seq_len"], "precision": q,
                "component_ms": {c: round(v, 4) for c, v in comp.items()},
                "components_sum_ms": round(median([d["total"]["components_sum_ms"]["executorch"] for d in docs]), 4),
                "total_ms": round(median([d["total"]["latency_ms"]["executorch"] for d in docs]), 4),
                "flops": {c["name"]: c["flops"] for c in first["components"]},
                "weight_bytes": {c["name"]: c["weight_bytes"] for c in first["components"]},
                "weight_format": {c["name"]: c.get("weight_format") for c in first["components"]},
                "pte_mb": round(first.get("artifact_bytes", {}).get("model.pte", 0) / 1e6, 2),
            })
    return out


def markdown(rows: list[dict], meta: dict) -> str:
    quants = meta["quant"]
    lines = [f"# Quantized bundles per component vs fp32 ({meta['date']})", "",
             f"Host: {meta['cpu']}, ISA flags: {meta['isa']}. Model `{meta['model']}` ({meta['task']}), exported with "
             f"`edgenlp export --quant` (word table fp32 in every bundle, so only the linears differ); ExecuTorch + XNNPACK, "
             f"1 thread; each cell is the median over {meta['rounds']} alternating rounds of {meta['runs']} profiled runs. "
             f"Component cells are ms from ETDump (XNNPACK per-operator events); ratios are to fp32 in the same rounds. "
             f"{meta.get('note', '')}", ""]
    by = {(r["seq_len"], r["precision"]): r for r in rows}
    for seq in sorted({r["seq_len"] for r in rows}):
        base = by[(seq, "fp32")] if (seq, "fp32") in by else None
        lines += [f"## seq {seq}", "", "| component | FLOPs | " + " | ".join(f"{q} ms" for q in quants)
                  + (" | " + " | ".join(f"{q} × fp32" for q in quants if q != "fp32") if base else "") + " |",
                  "|---|---:|" + "---:|" * (len(quants) + (len(quants) - 1 if base else 0))]
        for c in COMPONENTS:
            cells = [f"{by[(seq, q)]['component_ms'][c]:.2f}" for q in quants]
            ratios = []
            if base:
                for q in quants:
                    if q == "fp32":
                        continue
                    b = base["component_ms"][c]
                    ratios.append(f"{by[(seq, q)]['component_ms'][c] / b:.2f}" if b > 0.005 else "–")
            flops = by[(seq, quants[0])]["flops"][c]
            lines.append(f"| {c} | {flops / 1e6:.1f}M | " + " | ".join(cells) + (" | " + " | ".join(ratios) if ratios else "") + " |")
        tot = [f"**{by[(seq, q)]['total_ms']:.2f}**" for q in quants]
        tr = [f"**{by[(seq, q)]['total_ms'] / base['total_ms']:.2f}**" for q in quants if q != "fp32"] if base else []
        lines.append("| end to end (plain runs) | | " + " | ".join(tot) + (" | " + " | ".join(tr) if tr else "") + " |")
        lines.append("")
    lines += ["`.pte` sizes: " + ", ".join(f"{q} {by[(rows[0]['seq_len'], q)]['pte_mb']:.1f} MB" for q in quants) + ".", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="A fine-tuned model directory (or a built-in name).")
    ap.add_argument("--task", default="sst2")
    ap.add_argument("--quant", default="fp32,int8,int4", help="Comma-separated precisions; fp32 first gives the ratios.")
    ap.add_argument("--seq-len", default="32,128")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--workdir", type=Path, default=None, help="Keep the bundles here (reused when present).")
    ap.add_argument("--note", default="")
    ap.add_argument("--out", type=Path, default=RESULTS / "quant_profile")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")

    from edgenlp.profile.api import ProfileConfig, profile
    from edgenlp.utils import isa_flags

    writer = Results(script="quant_profile", threads=1)
    quants = [q.strip() for q in args.quant.split(",") if q.strip()]
    seq_lens = tuple(int(s) for s in args.seq_len.split(","))
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-qprof-") as tmp:
        root = args.workdir or Path(tmp)
        bundles = {}
        for q in quants:
            path = root / q
            if not (path / "manifest.json").is_file():
                log.info("exporting %s", q)
                export(args.model, args.task, path, quant=q, seq_len=max(seq_lens))
            bundles[q] = path
        cfg = ProfileConfig(seq_lens=seq_lens, runtimes=("executorch",), threads=(1,), runs=args.runs, warmup=2)
        per = run_rounds({q: (lambda q=q: profile(bundles[q], cfg)) for q in quants}, rounds=args.rounds,
                         before_round=lambda i: log.info("round %d/%d", i + 1, args.rounds))
        rounds = [{q: per[q][i] for q in quants} for i in range(args.rounds)]
    env = writer.environment
    meta = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "cpu": env["cpu"].get("model", "?"), "isa": isa_flags(),
            "model": args.model, "task": args.task, "quant": quants, "seq_lens": list(seq_lens), "rounds": args.rounds,
            "runs": args.runs, "note": args.note, "seconds": round(time.perf_counter() - t0, 1)}
    rows = summarize(rounds, quants)
    writer.write(args.out, {"meta": meta, "rows": rows, "environment": env, "rounds": rounds}, markdown(rows, meta))
    return 0


if __name__ == "__main__":
    sys.exit(main())
