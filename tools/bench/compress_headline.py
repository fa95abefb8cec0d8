"""Benchmark: the ``compress`` headline target on this host (not CI).

The target (issue "Device targets, a cost model, a budget planner and
``edgenlp compress``"): ``compress --target host --latency-ms X --max-drop 1.0``
at seq 128 and 1 thread, with X one third of the fastest peer measured in the
same run, gives a MiniLM bundle within 1 point of the uncompressed fine-tuned
model that really runs within X and is at most 10% of the fp32 bundle's size.

Steps, all in one run folder:

1. the fine-tune stage of ``compress`` (or a copy of a finished one,
   ``--finetune-from``: the stage runner reuses it when its inputs match);
2. the fp32 bundle of that model (``edgenlp export``), and the peers built from
   it: ONNX Runtime fp32 (the bundle's ``model.onnx``), ONNX Runtime int8
   (``quantize_dynamic``, per-channel weights), and ExecuTorch int8 through the
   stock XNNPACK flow (PT2E ``XNNPACKQuantizer``, dynamic per-channel, on the
   bundle's inference graph; ``runtime/tests/quant_programs.py``);
3. the peers timed in interleaved rounds in one fresh process
   (tools/bench/workers.py ``programs``; ``--runs`` rounds, median each);
   X = fastest median / ``--speedup`` (default 3; the issue's first target is 2);
4. ``compress`` on the ``host`` target with ``--latency-ms X``, size budget
   ``--size-fraction`` x the fp32 ``model.pte`` and ``--max-drop``;
5. the compressed bundle timed again beside the peers (same process, same
   rounds), so "runs within X" is checked against peers measured alongside it.

Writes ``<out>.json`` and ``<out>.md`` with the CPU's ISA flags.

    python tools/bench/compress_headline.py --workdir /tmp/headline --finetune-from out/compress/finetune
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tools.bench.harness import RESULTS, Results, Timings, fresh_process  # noqa: E402

log = logging.getLogger("bench.compress_headline")


# -- timing (a fresh process: thread pools set before anything loads) ------------------------------------------------

def time_programs(programs: dict[str, dict], *, seq_len: int, threads: int, runs: int, warmup: int = 5) -> dict[str, dict]:
    """Every program once per round, ``runs`` rounds, in one fresh process (workers.programs).

    Returns name -> {median_ms, p10_ms, p90_ms, runs}.
    """
    names = list(programs)
    spec = {"seq_len": seq_len, "threads": threads, "runs": runs, "warmup": warmup, "programs": [programs[n] for n in names]}
    t = Timings.from_rounds(dict(zip(names, fresh_process("programs", spec, threads=threads)["ms"])))
    out = {}
    for name in names:
        s = t.summary(name)
        out[name] = {"median_ms": round(s["median"], 3), "p10_ms": round(s["p10"], 3), "p90_ms": round(s["p90"], 3), "runs": s["n"]}
    return out


# -- peers -------------------------------------------------------------------------------------------------------------

def build_peers(model_dir: Path, peers_dir: Path, *, data, seq_len: int) -> dict:
    """The fp32 bundle of the fine-tuned model and the three peer programs (reused when present)."""
    from edgenlp.export.api import ExportConfig, export_bundle
    from edgenlp.export.graph import example_inputs, prepare
    from edgenlp.models.registry import load_model
    from edgenlp.targets.calibrate import quantize_onnx_int8

    peers_dir.mkdir(parents=True, exist_ok=True)
    fp32 = peers_dir / "fp32-bundle"
    model, info = load_model(model_dir, labels=data.labels)
    if not (fp32 / "manifest.json").is_file():
        log.info("exporting the fp32 bundle")
        export_bundle(model, info, fp32, config=ExportConfig(max_seq_len=seq_len), task=data)
    vocab = model.shape.vocab_size
    ort_int8 = peers_dir / "ort-int8.onnx"
    if not ort_int8.is_file():
        log.info("ONNX Runtime int8 (quantize_dynamic, per-channel)")
        quantize_onnx_int8(fp32 / "model.onnx", ort_int8)
    et_int8 = peers_dir / "et-int8-stock.pte"
    if not et_int8.is_file():
        log.info("ExecuTorch int8, stock PT2E XNNPACKQuantizer flow")
        sys.path.insert(0, str(ROOT / "runtime" / "tests"))
        from quant_programs import lower

        tmp = et_int8.with_name(f".{et_int8.name}.tmp")
        tmp.write_bytes(lower(prepare(model).eval(), {f"forward_{seq_len}": example_inputs(seq_len, vocab_size=vocab)},
                               linears="int8"))
        tmp.replace(et_int8)
    return {
        "fp32_bundle": fp32,
        "programs": {
            "ExecuTorch fp32 (edgenlp bundle)": {"runtime": "executorch", "path": str(fp32 / "model.pte"), "method": f"forward_{seq_len}",
                                                 "vocab_size": vocab},
            "ONNX Runtime fp32": {"runtime": "onnxruntime", "path": str(fp32 / "model.onnx"), "vocab_size": vocab},
            "ONNX Runtime int8 dynamic per-channel": {"runtime": "onnxruntime", "path": str(ort_int8), "vocab_size": vocab},
            "ExecuTorch int8 (stock XNNPACK flow)": {"runtime": "executorch", "path": str(et_int8), "method": f"forward_{seq_len}",
                                                     "vocab_size": vocab},
        },
        "sizes_mb": {"fp32 model.pte": (fp32 / "model.pte").stat().st_size / 1e6, "fp32 model.onnx": (fp32 / "model.onnx").stat().st_size / 1e6,
                     "ort int8": ort_int8.stat().st_size / 1e6, "et int8 stock": et_int8.stat().st_size / 1e6},
    }


PEERS = ("ONNX Runtime fp32", "ONNX Runtime int8 dynamic per-channel", "ExecuTorch int8 (stock XNNPACK flow)")


def markdown(r: dict) -> str:
    f = lambda v, d=2: "–" if v is None else f"{v:.{d}f}"  # noqa: E731
    recovery = f"the {r['recovery']} one" if r.get("recovery") else "the preset's"
    lines = [f"# `compress` headline target on the host ({r['date']})", "",
             f"Host: {r['cpu']}, ISA flags: {r['isa']}. MiniLM-L6 on {r['task']}, seq {r['seq_len']}, {r['threads']} thread(s); "
             f"every time is the median of {r['runs']} alternating rounds in one process; a pruning's sparsity measures "
             f"{r.get('prune_target', 'params')}; the recovery after a pruning is {recovery}. {r.get('note', '')}", "",
             "## Peers (before compress)", "", "| program | median ms | p10–p90 ms |", "|---|---:|---|"]
    for name, t in r["peers_before"].items():
        lines.append(f"| {name} | {f(t['median_ms'])} | {f(t['p10_ms'])}–{f(t['p90_ms'])} |")
    lines += ["", f"Fastest peer: **{r['fastest_peer']}**, {f(r['fastest_peer_ms'])} ms, so X = {f(r['latency_budget_ms'])} ms. "
              f"Size budget: {r['size_fraction']:.0%} of the fp32 `model.pte` ({f(r['fp32_pte_mb'], 1)} MB) = {f(r['size_budget_mb'], 1)} MB; "
              f"max drop {r['max_drop']} points.", ""]
    c = r["compress"]

    def outcome_rows(c: dict, *, limit_drop: float | None) -> list[str]:
        lat = c.get("host_ms_beside_peers")
        fastest = r.get("fastest_peer_ms_after")
        return [f"| chosen | | {c['chosen']} | |",
                f"| dev accuracy | {'≥ ' + f(100 * c['reference'] - limit_drop) + '%' if limit_drop is not None else 'no limit'} "
                f"(uncompressed {f(100 * c['reference'])}%) | {f(100 * c['measured'])}% ({f(c['drop_points'])} points) | "
                f"{'yes' if c['drop_points'] <= r['max_drop'] else 'no'} |",
                f"| latency, beside the peers | ≤ {f(r['latency_budget_ms'])} ms | {f(lat)} ms "
                f"({f(fastest / lat if lat and fastest else None)}× the fastest peer) | {'yes' if c.get('latency_met') else 'no'} |",
                f"| size (`model.pte`) | ≤ {f(r['size_budget_mb'], 1)} MB | {f(c.get('size_mb'), 1)} MB "
                f"({(c.get('size_mb') or 0) / r['fp32_pte_mb']:.1%} of fp32) | {'yes' if c.get('size_met') else 'no'} |"]

    if c.get("error"):
        lines += ["## Outcome", "", f"`compress` did not produce a bundle: {c['error']}", ""]
    else:
        lines += ["## Outcome", "", "| | target | result | met |", "|---|---|---|---|", *outcome_rows(c, limit_drop=r["max_drop"]), ""]
    if c.get("attempts"):
        lines += ["Attempts: " + "; ".join(c["attempts"]), ""]
    lines += validation_lines(c)
    fr = r.get("frontier")
    if fr:
        lines += ["## The two ends of the trade-off, built and measured", "",
                  "No candidate was predicted to meet X, the size budget and the accuracy bound together, so both ends were "
                  "compressed for real with the same fine-tuned model, each within the size budget: at the accuracy end the "
                  "candidate predicted fastest within the accuracy bound (or, if none is, the one predicted most accurate), at the "
                  "latency end the one predicted most accurate within X (accuracy unlimited; static, `--dynamic off`: exits "
                  "calibrated to an unlimited drop would stop every sentence at the first layer).", ""]
        for key, title in (("fastest_within_drop", "The accuracy end"),
                           ("most_accurate_within_x", f"The latency end (X = {f(r['latency_budget_ms'])} ms)")):
            point = fr.get(key)
            if point is None:
                lines += [f"### {title}", "", "No candidate of the search space is predicted there.", ""]
                continue
            pc = point.get("compress", {})
            lines += [f"### {title}", "", f"Rule: {point.get('rule', title)}. Planner's pick: {point['candidate']} "
                      f"(predicted {f(point['predicted_latency_ms'])} ms, drop {f(point['predicted_drop'])} points).", ""]
            if pc.get("passed") and pc.get("host_ms_beside_peers") is not None:
                lines += ["| | target | result | met |", "|---|---|---|---|",
                          *outcome_rows(pc, limit_drop=r["max_drop"] if key == "fastest_within_drop" else None), ""]
            else:
                lines += [f"`compress` did not produce a bundle: {pc.get('error', 'not run')}", ""]
            if pc.get("attempts"):
                lines += ["Attempts: " + "; ".join(pc["attempts"]), ""]
            lines += validation_lines(pc)
    if r.get("peers_after"):
        lines += ["Peers timed again beside the bundles: " + ", ".join(f"{n} {f(t['median_ms'])} ms" for n, t in r["peers_after"].items()) + ".", ""]
    return "\n".join(lines)


def validation_lines(c: dict) -> list[str]:
    """The candidates ``compress`` built and scored on its validation rows (held out of train), as a sentence."""
    rows = c.get("validation") or []
    if not rows:
        return []
    f = lambda v: "–" if v is None else f"{v:.2f}"  # noqa: E731
    return ["Scored on the validation rows: " + "; ".join(
        f"{v['candidate']}: drop {f(v['val_drop'])} points"
        + (f", {v['heads']} heads and {v['ffn']:,} FFN neurons kept" if v.get("heads") is not None else "")
        + f", predicted {f(v['predicted_ms_real_shape'])} ms on that shape" for v in rows) + ".", ""]


def main(argv: list[str] | None = None) -> int:
    from edgenlp.compress.config import RECOVERY_NAMES

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="minilm-l6")
    p.add_argument("--task", default="sst2")
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--runs", type=int, default=30)
    p.add_argument("--max-drop", type=float, default=1.0)
    p.add_argument("--size-fraction", type=float, default=0.10, help="Size budget as a fraction of the fp32 model.pte (0 = none).")
    p.add_argument("--speedup", type=float, default=3.0, help="X = fastest peer / this.")
    p.add_argument("--preset", default="quick")
    p.add_argument("--prune-target", default="params", help="What a pruned candidate's sparsity measures "
                   "(compress --prune-target).")
    p.add_argument("--recovery", default=None, choices=RECOVERY_NAMES,
                   help="The recovery distillation after a pruning (compress --recovery; default: the preset's).")
    p.add_argument("--max-attempts", type=int, default=3)
    p.add_argument("--data-dir", default=None)
    p.add_argument("--finetune-from", type=Path, default=None, help="A finished compress run's finetune/ folder to reuse.")
    p.add_argument("--workdir", type=Path, default=Path("/tmp/compress-headline"))
    p.add_argument("--note", default="")
    p.add_argument("--no-frontier", dest="frontier", action="store_false",
                   help="When compress finds no candidate, do not build the two ends of the trade-off.")
    p.add_argument("--out", type=Path, default=RESULTS / "compress-headline")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    from edgenlp.bundle import Bundle, pick_bucket
    from edgenlp.compress.config import CompressConfig
    from edgenlp.compress.pipeline import Compressor
    from edgenlp.utils import isa_flags

    run_dir = args.workdir / "run"
    if args.finetune_from is not None and not (run_dir / "finetune").exists():
        run_dir.mkdir(parents=True, exist_ok=True)
        shutil.copytree(args.finetune_from, run_dir / "finetune")
    results = Results(script="compress_headline", threads=args.threads)
    env = results.environment
    result = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "cpu": env["cpu"].get("model", "?"), "isa": isa_flags(),
              "task": args.task, "seq_len": args.seq_len, "threads": args.threads, "runs": args.runs, "max_drop": args.max_drop,
              "size_fraction": args.size_fraction, "speedup": args.speedup, "prune_target": args.prune_target,
              "recovery": args.recovery, "preset": args.preset,
              "note": args.note, "environment": env}

    def write() -> None:
        results.write(args.out, result, markdown(result) if "compress" in result else None)

    base_cfg = dict(model=args.model, task=args.task, target="host", seq_len=args.seq_len, threads=args.threads,
                    max_drop=args.max_drop, preset=args.preset, max_attempts=args.max_attempts,
                    prune_target=args.prune_target, recovery=args.recovery)
    # 1. the fine-tuned model (the stage does not depend on the budgets, so the compress run below reuses it)
    probe = Compressor(CompressConfig(**base_cfg), run_dir, data_dir=args.data_dir, device="auto", progress=False,
                       echo=lambda m: log.info("%s", m))
    ft = probe.finetune()
    # 2-3. peers, timed alternately
    peers = build_peers(ft.path / "model", args.workdir / "peers", data=probe.data, seq_len=args.seq_len)
    before = time_programs(peers["programs"], seq_len=args.seq_len, threads=args.threads, runs=args.runs)
    fastest = min(PEERS, key=lambda n: before[n]["median_ms"])
    x = before[fastest]["median_ms"] / args.speedup
    fp32_mb = peers["sizes_mb"]["fp32 model.pte"]
    size_budget = fp32_mb * args.size_fraction if args.size_fraction > 0 else None
    result.update(peers_before=before, fastest_peer=fastest, fastest_peer_ms=before[fastest]["median_ms"], latency_budget_ms=round(x, 3),
                  fp32_pte_mb=round(fp32_mb, 3), size_budget_mb=None if size_budget is None else round(size_budget, 3),
                  peer_sizes_mb={k: round(v, 3) for k, v in peers["sizes_mb"].items()})
    write()
    log.info("fastest peer %s %.2f ms -> X = %.2f ms; size budget %s MB", fastest, before[fastest]["median_ms"], x, size_budget)
    # 4. compress under X
    cfg = CompressConfig(**base_cfg, latency_ms=round(x, 3), size_mb=None if size_budget is None else round(size_budget, 3))
    bundles: dict[str, Path] = {}
    result["compress"] = comp = run_compress(cfg, run_dir, args)
    if comp.get("passed"):
        bundles["compressed bundle"] = run_dir / "bundle"
    # 5. when it fails: build both ends of the trade-off for real, so "how far" is measured, not predicted
    if not comp.get("passed") and args.frontier:
        ends = frontier(probe, ft, x_ms=x, peer_ms=before[fastest]["median_ms"], size_mb=size_budget, max_drop=args.max_drop, seq_len=args.seq_len,
                        threads=args.threads)
        result["frontier"] = ends
        for key, point in ends.items():
            if point is None:
                continue
            d = args.workdir / f"run-{key}"
            if not (d / "finetune").exists():
                d.mkdir(parents=True, exist_ok=True)
                # the exits stage is reused where its inputs match (its budget follows --max-drop)
                for stage in ("finetune", "baseline", "exits"):
                    if (run_dir / stage).exists():
                        shutil.copytree(run_dir / stage, d / stage)
            # the accuracy-unlimited end runs static: exits calibrated to an unlimited drop stop everything at layer 1
            dynamic = {"dynamic": "off"} if point["max_drop"] > args.max_drop else {}
            # the latency end is the most accurate within X: compress ranks by accuracy there, not by latency
            objective = {"objective": point["objective"]} if point.get("objective") else {}
            fcfg = CompressConfig(**{**base_cfg, "max_drop": point["max_drop"], **dynamic, **objective},
                                  latency_ms=point["latency_ms"],
                                  size_mb=None if size_budget is None else round(size_budget, 3))
            point["compress"] = run_compress(fcfg, d, args)
            if point["compress"].get("passed"):
                bundles[key] = d / "bundle"
            write()
    # 6. every bundle built, timed again beside the peers (same process, same rounds)
    if bundles:
        progs = {n: peers["programs"][n] for n in PEERS}
        for name, bundle in bundles.items():
            b = Bundle.open(bundle)
            progs[name] = {"runtime": "executorch", "path": str(b.artifact("pte")),
                           "method": pick_bucket(b.pte_methods, args.seq_len).name,
                           "vocab_size": int(b.manifest["model"]["shape"]["vocab_size"])}
        after = time_programs(progs, seq_len=args.seq_len, threads=args.threads, runs=args.runs)
        result["peers_after"] = {n: after[n] for n in PEERS}
        result["fastest_peer_ms_after"] = min(after[n]["median_ms"] for n in PEERS)
        for name, bundle in bundles.items():
            c = comp if name == "compressed bundle" else result["frontier"][name]["compress"]
            ms = after[name]
            size = (bundle / "model.pte").stat().st_size / 1e6
            c.update(host_ms_beside_peers=ms["median_ms"], host_timing=ms, latency_met=ms["median_ms"] <= x,
                     speedup_vs_fastest_peer=round(result["fastest_peer_ms_after"] / ms["median_ms"], 3),
                     size_mb=round(size, 3), size_met=size_budget is None or size <= size_budget,
                     accuracy_met=c["drop_points"] <= args.max_drop)
    write()
    log.info("wrote %s", args.out.with_suffix(".md"))
    return 0


def run_compress(cfg, run_dir: Path, args) -> dict:
    """One ``compress`` run; its outcome (chosen, accuracy, attempts) or the error."""
    from edgenlp.compress.pipeline import Compressor
    from edgenlp.errors import EdgeNLPError

    t0 = time.perf_counter()
    comp: dict = {"latency_budget_ms": cfg.latency_ms, "size_budget_mb": cfg.size_mb, "max_drop": cfg.max_drop}
    try:
        Compressor(cfg, run_dir, data_dir=args.data_dir, device="auto", progress=False, echo=lambda m: log.info("%s", m)).run()
    except EdgeNLPError as exc:
        comp["error"] = str(exc)
        log.warning("compress: %s", exc)
    comp["wall_s"] = round(time.perf_counter() - t0, 1)
    comp["validation"] = measured_rows(run_dir)
    plan_doc = run_dir / "plan" / "plan.json"  # what a pruning's sparsity measured (the first attempt's plan)
    if plan_doc.is_file():
        comp["prune_measure"] = json.loads(plan_doc.read_text()).get("prune_measure") or {"target": "params"}
    doc_path = run_dir / "compress.json"
    if doc_path.is_file():
        doc = json.loads(doc_path.read_text())
        comp["attempts"] = [f"{a.get('attempt')} ({_chosen_text(a['chosen'])}): {', '.join(a.get('failures', [])) or 'passed'}"
                            for a in doc.get("attempts", [])]
        if doc.get("passed"):
            acc = doc["predicted"]["accuracy"]
            comp.update(passed=True, chosen=_chosen_text(doc["chosen"]), reference=acc["reference"], measured=acc["measured"],
                        drop_points=acc["drop_points"],
                        compress_json={k: doc.get(k) for k in ("chosen", "predicted", "host_speedup_detail", "sizes", "finetune")})
    return comp


def measured_rows(run_dir: Path) -> list[dict]:
    """What ``compress`` built and scored on its validation rows in ``run_dir``, every attempt: the candidate, its
    validation drop, its heads and FFN widths, and the cost model's latency for that real shape."""
    out = []
    for path in sorted(run_dir.glob("measure*/measure.json")):
        for row in json.loads(path.read_text()).get("rows", []):
            out.append({"stage": path.parent.name, "candidate": _chosen_text(row["candidate"]),
                        "val_accuracy": row.get("val_accuracy"), "val_drop": row.get("measured_drop"),
                        "heads": sum(row["heads"]) if row.get("heads") else None,
                        "ffn": sum(row["ffn"]) if row.get("ffn") else None,
                        "predicted_ms_real_shape": row.get("real_shape_latency_ms"), "meets": row.get("meets")})
    return out


def frontier(probe, ft, *, x_ms: float, peer_ms: float, size_mb: float | None, max_drop: float, seq_len: int, threads: int) -> dict:
    """The two ends of the trade-off the planner saw, within the size budget.

    ``fastest_within_drop``: the candidate predicted fastest among those predicted
    to lose at most ``max_drop`` (compressed with the fastest peer's time as the
    latency budget: ``compress`` then builds the fastest candidate it predicts
    within the bound, and its own prediction as the budget would fail it on the
    cost model's error); ``most_accurate_within_x``: the candidate with the smallest
    predicted drop among those predicted to run within X (compressed with no
    accuracy limit, most accurate first: ``compress --objective accuracy``). Each is
    then built and measured by ``compress`` itself. The plan reads the rows
    ``compress`` measured for this model (the run just before), as its own does.
    """
    from edgenlp.compress.measured import recalled
    from edgenlp.compress.planning import plan_for_compress, trimmed_vocab_size
    from edgenlp.models.registry import load_model
    from edgenlp.targets.target import Budgets

    model, info = load_model(ft.path / "model", labels=probe.data.labels)
    budgets = Budgets(size_mb=size_mb, seq_len=seq_len, threads=threads)
    doc = plan_for_compress(probe.target, budgets, shape=model.shape, num_labels=model.num_labels, preset=probe.preset,
                            excluded=[], task=probe.data, max_drop=None, measured=recalled(probe.measured_key(ft)),
                            trimmed_vocab_size=trimmed_vocab_size(info, probe.tuning))
    cons = [c for c in doc["considered"] if size_mb is None or c["predicted_size_mb"] <= size_mb]
    accurate = [c for c in cons if c["predicted_drop"] <= max_drop]
    fast = [c for c in cons if c["predicted_latency_ms"] <= x_ms]
    out: dict = {"fastest_within_drop": None, "most_accurate_within_x": None}
    if accurate:  # fastest among the accurate ones: compressed with the fastest peer's time as the budget
        c = min(accurate, key=lambda c: (c["predicted_latency_ms"], c["predicted_drop"]))
        out["fastest_within_drop"] = {"candidate": _chosen_text(c["candidate"]), "predicted_latency_ms": round(c["predicted_latency_ms"], 3),
                                      "predicted_drop": round(c["predicted_drop"], 3), "latency_ms": round(max(c["predicted_latency_ms"] * 1.001, peer_ms), 4),
                                      "max_drop": max_drop, "rule": f"fastest predicted within {max_drop:g} point(s) and the size budget "
                                                                    f"(latency budget: the fastest peer's {peer_ms:.2f} ms)"}
    elif cons:  # nothing is predicted within the bound at this size: the most accurate at this size, at any latency
        c = min(cons, key=lambda c: (c["predicted_drop"], c["predicted_latency_ms"]))
        out["fastest_within_drop"] = {"candidate": _chosen_text(c["candidate"]), "predicted_latency_ms": round(c["predicted_latency_ms"], 3),
                                      "predicted_drop": round(c["predicted_drop"], 3), "latency_ms": None, "max_drop": 100.0,
                                      "rule": f"no candidate within the size budget is predicted within {max_drop:g} point(s): the one "
                                              "predicted most accurate within the size budget, at any latency"}
    if fast:
        c = min(fast, key=lambda c: (c["predicted_drop"], c["predicted_latency_ms"]))
        out["most_accurate_within_x"] = {"candidate": _chosen_text(c["candidate"]), "predicted_latency_ms": round(c["predicted_latency_ms"], 3),
                                         "predicted_drop": round(c["predicted_drop"], 3), "latency_ms": round(x_ms, 3), "max_drop": 100.0,
                                         "objective": "accuracy",
                                         "rule": "most accurate predicted within X and the size budget (accuracy unlimited)"}
    log.info("frontier: %s", out)
    return out


def _chosen_text(c: dict) -> str:
    sys.path.insert(0, str(Path(__file__).parent))
    from compress import chosen_text

    return chosen_text(c)


if __name__ == "__main__":
    sys.exit(main())
