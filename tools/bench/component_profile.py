"""Benchmark: the BERT per-component profile of bert-base and MiniLM-L6 on every runtime (not CI).

For each model: sequence lengths 32/128/512, eager PyTorch, ExecuTorch (XNNPACK)
and ONNX Runtime, 1 and 2 threads, through :func:`edgenlp.profile.api.profile`.
Writes into ``tools/bench/results/``:

  profile.json             {model: [profile documents]} (schema in edgenlp/profile/__init__.py)
  profile.md               tables per (model, seq, threads) and the key shares
  profile.<model>.png      stacked shares of params / FLOPs / latency

Results are written after each model, so a cut-short run keeps what it has.
The timing is the profiler's (plain and profiled runs interleaved,
:mod:`edgenlp.profile.timing`); the results go through tools/bench/harness.py.

    python tools/bench/component_profile.py                          # full plan
    python tools/bench/component_profile.py --models minilm-l6 --seq-len 32,128 --runs 10
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from edgenlp.cli.types import parse_int_list  # noqa: E402
from tools.bench.harness import RESULTS, Results  # noqa: E402

log = logging.getLogger("bench.profile")


def key_shares(docs: list[dict]) -> list[dict]:
    """Per (seq, threads, runtime): the shares the classic table's findings talk about."""
    out = []
    for doc in docs:
        c = {r["name"]: r for r in doc["components"]}
        for rt in doc["runtimes"]:
            out.append({
                "seq_len": doc["seq_len"], "threads": doc["threads"], "runtime": rt,
                "total_ms": doc["total"]["latency_ms"][rt],
                "embedding_params_pct": c["embedding"]["share_pct"]["params"],
                "qkv_over_out_params": c["attn_qkv"]["params"] / max(1, c["attn_out"]["params"]),
                "qkv_over_out_flops": c["attn_qkv"]["flops"] / max(1, c["attn_out"]["flops"]),
                "ffn_params_pct": c["ffn"]["share_pct"]["params"],
                "ffn_flops_pct": c["ffn"]["share_pct"]["flops"],
                "ffn_latency_pct": c["ffn"]["share_pct"]["latency"][rt],
                "attn_core_flops_pct": c["attn_core"]["share_pct"]["flops"],
                "attn_core_latency_pct": c["attn_core"]["share_pct"]["latency"][rt],
                "embedding_latency_pct": c["embedding"]["share_pct"]["latency"][rt],
                "unattributed_pct": round(100 * doc["total"]["unattributed_ms"][rt] / doc["total"]["latency_ms"][rt], 2),
            })  # fmt: skip
    return out


def write_results(all_docs: dict[str, list[dict]], args, seconds: dict[str, float], writer: Results) -> None:
    from edgenlp.profile.report import markdown, plot

    doc = {"config": vars(args), "seconds": seconds, "environment": writer.environment, "profiles": all_docs}
    lines = [
        "# Per-component profile (tools/bench/component_profile.py)",
        "",
        f"Runs per measurement: {args.runs} after {args.warmup} warm-up; latency cells are ms (share of the end-to-end median).",
        "Component latency: mean over the middle half of the profiled runs; total: median of plain end-to-end runs.",
        "`runtime overhead` = end-to-end minus the attributed operators (dispatch, delegate entry, bindings, hooks, noise).",
        "",
    ]
    for model, docs in all_docs.items():
        lines += [f"## {model}", "", f"Wall time of this model's benchmark: {seconds.get(model, 0):.0f} s", ""]
        lines += ["### Key shares (%)", ""]
        hdr = ["seq", "threads", "runtime", "total ms", "emb params", "FFN params", "FFN FLOPs", "FFN time",
               "attn core FLOPs", "attn core time", "unattributed"]  # fmt: skip
        lines += ["| " + " | ".join(hdr) + " |", "|" + "|".join(["---:"] * len(hdr)) + "|"]
        for k in key_shares(docs):
            lines.append("| " + " | ".join(str(x) for x in (
                k["seq_len"], k["threads"], k["runtime"], f"{k['total_ms']:.1f}", k["embedding_params_pct"], k["ffn_params_pct"],
                k["ffn_flops_pct"], k["ffn_latency_pct"], k["attn_core_flops_pct"], k["attn_core_latency_pct"], k["unattributed_pct"],
            )) + " |")  # fmt: skip
        lines += ["", "### Tables", "", markdown(docs), ""]
        writer.figure(RESULTS / f"profile.{model}.png", lambda path, docs=docs: plot(docs, path))
    writer.write(RESULTS / "profile", doc, "\n".join(lines))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=["bert-base", "minilm-l6"])
    ap.add_argument("--seq-len", type=parse_int_list, default="32,128,512")
    ap.add_argument("--runtimes", default="eager,executorch,onnx")
    ap.add_argument("--threads", type=parse_int_list, default="1,2")
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--workdir", default=None, help="keep lowered artifacts here (default: temporary)")
    ap.add_argument("--merge", action="store_true", help="keep other models' results already in profile.json")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    for noisy in ("onnx_ir", "onnxscript", "torch", "executorch"):
        logging.getLogger(noisy).setLevel(logging.WARNING)

    from edgenlp.profile.api import ProfileConfig, profile

    writer = Results(script="component_profile", threads=list(args.threads))
    config = ProfileConfig(
        seq_lens=args.seq_len, runtimes=tuple(args.runtimes.split(",")),
        threads=args.threads, runs=args.runs, warmup=args.warmup, per_layer=True,
    )  # fmt: skip
    all_docs: dict[str, list[dict]] = {}
    seconds: dict[str, float] = {}
    previous = RESULTS / "profile.json"
    if args.merge and previous.exists():
        old = json.loads(previous.read_text())
        all_docs.update({m: d for m, d in old.get("profiles", {}).items() if m not in args.models})
        seconds.update({m: s for m, s in old.get("seconds", {}).items() if m not in args.models})
    for model in args.models:
        t0 = time.perf_counter()
        workdir = Path(args.workdir) / model if args.workdir else None
        all_docs[model] = profile(model, config, workdir=workdir)
        seconds[model] = round(time.perf_counter() - t0, 1)
        log.info("%s done in %.0f s", model, seconds[model])
        write_results(all_docs, args, seconds, writer)
    return 0


if __name__ == "__main__":
    sys.exit(main())
