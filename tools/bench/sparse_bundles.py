"""Benchmark: MiniLM bundles whose encoder linears run edgenlp's block-sparse ops, against the dense bundles (not CI).

Issue 23, stage 2: the kernels passed their gate as lone GEMMs
(``sparse_kernels.py``); this measures them where they would ship, as
``edgenlp::sparse_linear`` / ``sparse_linear_qd8`` ops inside a whole
``model.pte`` whose other ops stay in XNNPACK (the partitioner cuts the
graph around each sparse op, so every layer pays extra delegate calls).

For each block sparsity the encoder linears of MiniLM-L6 get that fraction
of their blocks zeroed by magnitude (:func:`edgenlp.prune.sparsity.block_masks`;
no training: the latency of a pattern does not depend on the accuracy it
keeps) and the model is exported twice: fp32, and int8 (``quantize_model``
per-channel int8 linears; the sparse ones become ``sparse_linear_qd8``). The
dense fp32 and dense int8 bundles of the same weights are the baselines.
Every level runs the ops, also below the sparsity from which ``export``
uses them (``edgenlp.sparse.convert.MIN_SPARSITY``, set from this table).
Every export passes the usual parity check against eager PyTorch. All
programs are then timed in one fresh process, once per round in alternation
(:func:`edgenlp.profile.executorch.compare_programs`), seq 128, 1 thread,
median and p10–p90.

    python tools/bench/sparse_bundles.py --workdir /tmp/spb            # 50/70/80/90%, 1x4
    python tools/bench/sparse_bundles.py --workdir /tmp/spb --block 4x1 --sparsities 0.7 0.9
    python tools/bench/sparse_kernels.py --m 128 --blocks 1x4 --out /tmp/sk   # then, on the same host:
    python tools/bench/sparse_bundles.py --workdir /tmp/spb --kernels /tmp/sk.json

``--kernels`` takes a ``sparse_kernels.py`` results file measured on the same
host at M = ``--seq`` and adds each sparse bundle's kernel-bench bound: the
latency the bundle would have if its encoder layers' six linears ran at the
kernel bench's speed and everything else (attention core, norms, activations,
embeddings, pooler) cost what it costs in the dense bundle of the same
precision, ``dense - L x dense layer + L x sparse layer`` (Amdahl's law with
the measured shares). The gap between a bundle and its bound is what the
integration costs (the graph cut around each op, activations quantized per
op, weights that arrive cold); the bound itself is what sparse linears alone
can give.

Writes ``results/sparse-bundles.{json,md}``.
"""

from __future__ import annotations

import argparse
import copy
import json
import logging
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tools.bench.harness import RESULTS, Results, load_average  # noqa: E402

log = logging.getLogger("bench.sparse_bundles")

SENTENCES = ["a gripping, funny and moving film", "dull and lifeless from start to finish", "not good, not bad",
             "the best thing i have seen all year", "tedious", "a joy to watch"]


def build(workdir: Path, *, model_name: str, sparsities: list[float], block: str, seq: int) -> dict[str, dict]:
    """Export every bundle that is not in ``workdir`` yet; ``{name: {"path", "precision", "sparsity", ...}}``."""
    from edgenlp.bundle import Bundle
    from edgenlp.export.api import ExportConfig, export_bundle
    from edgenlp.models.registry import load_model
    from edgenlp.prune.config import SparsifyConfig
    from edgenlp.prune.sparsity import apply_block_masks, block_masks, encoder_linears, measured_sparsity
    from edgenlp.quantize.api import quantize_model
    from edgenlp.quantize.config import QuantizeConfig
    from edgenlp.recipe import Step

    from edgenlp.sparse import convert

    # Every level runs the sparse ops, below the export's thresholds too (convert.MIN_SPARSITY), to show where they pay.
    convert.MIN_SPARSITY = {"fp32": 0.0, "int8": 0.0}
    model, info = load_model(model_name, labels=("neg", "pos"))
    cfg = ExportConfig(formats=("pte",), max_seq_len=seq, buckets=(seq,), parity_samples=len(SENTENCES))
    variants: list[tuple[str, float]] = [("dense", 0.0)] + [(f"{block}-{round(100 * s)}", s) for s in sparsities]
    out: dict[str, dict] = {}
    for label, sp in variants:
        m, i = model, info
        if sp > 0:
            m = copy.deepcopy(model)
            apply_block_masks(m, block_masks(m, sp, block))
            achieved = measured_sparsity(m, block)
            step = Step("sparsify", SparsifyConfig(sparsity=sp, block=block),
                        {"block": block, "linears": sorted(encoder_linears(m)),
                         "mean_sparsity": round(sum(achieved.values()) / len(achieved), 6), "note": "magnitude, untrained"})
            i = replace(info, recipe=(*info.recipe, step))
        for precision in ("fp32", "int8"):
            name = f"{label}-{precision}"
            path = workdir / name
            if not (path / "manifest.json").is_file():
                t0 = time.perf_counter()
                mm, ii = (m, i) if precision == "fp32" else quantize_model(m, i, QuantizeConfig(scheme="int8"))
                export_bundle(mm, ii, path, config=cfg, sample_texts=SENTENCES)
                log.info("exported %s in %.0fs", name, time.perf_counter() - t0)
            b = Bundle.open(path)
            (method,) = b.manifest["artifacts"]["pte"]["methods"]
            sparse = b.manifest.get("sparse") or {}
            out[name] = {"path": str(path), "precision": precision, "sparsity": sp, "block": block if sp else None,
                         "pte_mb": round((path / "model.pte").stat().st_size / 1e6, 2),
                         "delegate_calls": method["delegate_calls"],
                         "sparse_linears": sum(1 for r in sparse.get("linears", {}).values() if r.get("op")),
                         "parity_max_abs_diff": b.manifest["parity"]["executorch"]["max_abs_diff"],
                         "vocab_size": model.shape.vocab_size, "method": method["name"]}
    return out


def measure(bundles: dict[str, dict], *, seq: int, threads: int, runs: int) -> dict[str, dict]:
    from edgenlp.profile.executorch import compare_programs

    names = list(bundles)
    times = compare_programs([(Path(bundles[n]["path"]) / "model.pte", bundles[n]["method"], bundles[n]["vocab_size"])
                              for n in names], seq_len=seq, threads=threads, runs=runs)
    out = {}
    for name, t in zip(names, times):
        qs = statistics.quantiles(t, n=10)
        out[name] = {"median_ms": round(statistics.median(t), 3), "p10_ms": round(qs[0], 3), "p90_ms": round(qs[-1], 3)}
    return out


def markdown(doc: dict, *, title: str = "# Block-sparse bundles against dense ones") -> str:
    rows = doc["bundles"]
    dense = {p: rows[f"dense-{p}"]["median_ms"] for p in ("fp32", "int8")}
    fastest_dense = min(dense.values())
    lines = [title, "",
             f"MiniLM-L6, seq {doc['seq']}, {doc['threads']} thread; every program timed in one fresh process, once per "
             f"round in alternation, {doc['runs']} rounds; median and p10–p90. Load average {doc['load']['before']} "
             f"before the timing, {doc['load']['after']} after. Block sparsity by magnitude over every encoder linear "
             "(no training: latency does not depend on it); the pooler, classifier and embeddings stay dense.", "",
             "| bundle | precision | block sparsity | sparse linears | delegate calls | model.pte MB | median ms | "
             "p10–p90 ms | × dense, same precision | × fastest dense |",
             "|---|---|---:|---:|---:|---:|---:|---|---:|---:|"]
    for name, r in rows.items():
        lines.append(f"| {name} | {r['precision']} | {100 * r['sparsity']:.0f}% | {r['sparse_linears']} | "
                     f"{r['delegate_calls']} | {r['pte_mb']} | {r['median_ms']:.2f} | {r['p10_ms']:.2f}–{r['p90_ms']:.2f} | "
                     f"{dense[r['precision']] / r['median_ms']:.2f}× | {fastest_dense / r['median_ms']:.2f}× |")
    lines += bounds_markdown(doc.get("kernel_bound"))
    lines += ["", *doc["verdict"], ""]
    return "\n".join(lines)


def verdict(rows: dict) -> list[str]:
    """The stage-2 targets: >= 1.6x the dense bundle of the same precision at 70%, >= 3x at 90%."""
    out = []
    for p in ("fp32", "int8"):
        dense = rows[f"dense-{p}"]["median_ms"]
        for sp, goal in ((0.7, 1.6), (0.9, 3.0)):
            hit = [r for r in rows.values() if r["precision"] == p and abs(r["sparsity"] - sp) < 1e-9]
            if hit:
                x = dense / hit[0]["median_ms"]
                shown = f"{x:.3f}" if x < goal <= round(x, 2) else f"{x:.2f}"  # a miss the rounding would hide
                out.append(f"- {p} at {100 * sp:.0f}%: {shown}× the dense {p} bundle (target ≥ {goal}×: "
                           f"{'met' if x >= goal else 'MISSED'}).")
    return out


def kernel_bounds(rows: dict, kernels: dict, *, seq: int, block: str, file: str) -> dict:
    """Per sparse bundle, its kernel-bench bound (see the module docstring) from a ``sparse_kernels.py`` results doc
    (read from ``file``)."""
    layers = {(r["precision"], r["block"], round(float(r["sparsity"]), 4)): r
              for r in kernels["analysis"]["layer"] if r["m"] == seq}
    per_layer = len(kernels["layer"])  # the linears the kernel bench times as one encoder layer
    out = {}
    for name, r in rows.items():
        if not r["sparsity"]:
            continue
        k = layers.get(("f32" if r["precision"] == "fp32" else "qd8", block, round(r["sparsity"], 4)))
        if k is None or r["sparse_linears"] % per_layer != 0:
            continue
        n_layers = r["sparse_linears"] // per_layer
        dense_ms = rows[f"dense-{r['precision']}"]["median_ms"]
        dense_layer = (k["xnn_f32_us"] if r["precision"] == "fp32" else k["xnn_qd8_us"])["median"] / 1000
        sparse_layer = k["us"]["median"] / 1000
        bound_ms = dense_ms - n_layers * dense_layer + n_layers * sparse_layer
        out[name] = {"bound_ms": round(bound_ms, 3), "bound_speedup": round(dense_ms / bound_ms, 3),
                     "linears_share_of_dense": round(n_layers * dense_layer / dense_ms, 3),
                     "kernel_layer_speedup": round(dense_layer / sparse_layer, 3),
                     "over_bound_ms": round(r["median_ms"] - bound_ms, 3),
                     "measured_speedup": round(dense_ms / r["median_ms"], 3)}
    return {"file": file, "date": (kernels.get("conditions") or {}).get("date"),
            "host": (kernels.get("host") or {}).get("isa"), "seq": seq, "bundles": out}


def bounds_markdown(b: dict) -> list[str]:
    if not b or not b["bundles"]:
        return []
    lines = ["", f"Kernel-bench bound (`sparse_kernels.py` at M = {b['seq']} on this host, {b['date']}): the bundle's "
             "latency if its encoder linears ran at the kernel bench's speed and the rest cost what it costs in the dense "
             "bundle of the same precision.", "",
             "| bundle | linears' share of the dense bundle | linears alone, × dense | bound, × dense bundle | "
             "measured, × dense bundle | measured over the bound |",
             "|---|---:|---:|---:|---:|---:|"]
    for name, r in b["bundles"].items():
        lines.append(f"| {name} | {100 * r['linears_share_of_dense']:.0f}% | {r['kernel_layer_speedup']:.2f}× | "
                     f"{r['bound_speedup']:.2f}× | {r['measured_speedup']:.2f}× | {r['over_bound_ms']:+.2f} ms |")
    return lines


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workdir", required=True, help="Bundles are written here (and reused when present).")
    p.add_argument("--model", default="minilm-l6")
    p.add_argument("--sparsities", nargs="+", type=float, default=[0.5, 0.7, 0.8, 0.9])
    p.add_argument("--block", default="1x4", choices=["1x4", "1x8", "4x1"])
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--runs", type=int, default=30)
    p.add_argument("--out", default=str(RESULTS / "sparse-bundles"))
    p.add_argument("--kernels", type=Path, default=None,
                   help="A sparse_kernels.py results JSON from this host (M = --seq): add each bundle's kernel-bench bound.")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    res = Results(script="sparse_bundles", threads=args.threads)
    bundles = build(workdir, model_name=args.model, sparsities=args.sparsities, block=args.block, seq=args.seq)
    before = load_average()
    timing = measure(bundles, seq=args.seq, threads=args.threads, runs=args.runs)
    rows = {n: {**{k: v for k, v in bundles[n].items() if k not in ("path", "vocab_size", "method")}, **timing[n]}
            for n in bundles}
    doc = {"seq": args.seq, "threads": args.threads, "runs": args.runs, "block": args.block, "bundles": rows,
           "load": {"before": before, "after": load_average()}, "verdict": verdict(rows)}
    if args.kernels is not None:
        doc["kernel_bound"] = kernel_bounds(rows, json.loads(args.kernels.read_text()), seq=args.seq, block=args.block,
                                            file=args.kernels.name)
    res.write(Path(args.out), doc, markdown(doc))
    print(markdown(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
