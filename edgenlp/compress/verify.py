"""Verify a built bundle: accuracy through the bundle runtimes, budgets predicted and measured on the host."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

log = logging.getLogger(__name__)

# Which artifact a target's size budget counts (the file its preferred runtime loads).
RUNTIME_ARTIFACT = {"executorch": "model.pte", "onnx": "model.onnx", "native": "model.pte"}


def _predictions(runner, texts) -> np.ndarray:
    return runner.predict_logits(list(texts)).argmax(-1)


def verify_bundle(bundle_path: Path, out: Path, *, data, target, budgets, reference_accuracy: float, max_drop: float,
                  baseline_latency_ms: float, runs: int, threads: int, native: bool,
                  baseline_program: tuple[Path, str] | None = None) -> dict:
    """Measure the bundle and check it against the budgets and the accuracy limit; writes ``verify.json``.

    Accuracy is the dev set through ExecuTorch (and through the native runtime
    when it is built, with the share of identical predictions). Latency is
    predicted for the target by the cost model from the bundle's real shape
    and precision, and measured on this host (the measured number decides
    only when the target *is* this host). Size is the artifact the target's
    runtime loads. The host speed-up comes from the uncompressed program
    (``baseline_program``: its ``.pte`` and method) and the bundle timed in
    alternation in one process; without it, from the baseline stage's
    separate measurement (``baseline_latency_ms``), marked as such.
    """
    from edgenlp.bundle import Bundle
    from edgenlp.compress.pipeline import _profile
    from edgenlp.compress.planning import predict_bundle
    from edgenlp.metrics import classification_report
    from edgenlp.run.base import get_runner
    from edgenlp.utils import atomic_write_json

    bundle = Bundle.open(bundle_path)
    dev = data.dev
    gold = dev.label_ids(bundle.labels)
    accuracy: dict[str, dict] = {}
    preds: dict[str, np.ndarray] = {}
    runtimes = ["executorch"] + (["native"] if native else [])
    for rt in runtimes:
        with get_runner(bundle_path, runtime=rt, threads=threads) as runner:
            preds[rt] = _predictions(runner, dev.texts)
        accuracy[rt] = classification_report(preds[rt].tolist(), gold, num_labels=len(bundle.labels))
    agreement = {rt: float((preds[rt] == preds["executorch"]).mean()) for rt in runtimes if rt != "executorch"}

    doc = _profile(bundle_path, seq_len=budgets.seq_len, threads=threads, runs=runs, runtimes=tuple(runtimes))
    atomic_write_json(out / "profile.json", doc)
    measured_ms = {rt: float(doc["total"]["latency_ms"][rt]) for rt in runtimes}
    speedup = _host_speedup(bundle, baseline_program, baseline_latency_ms, measured_ms["executorch"],
                            seq_len=budgets.seq_len, threads=threads, runs=runs)
    predicted = predict_bundle(target, bundle, seq_len=budgets.seq_len, threads=budgets.threads)

    artifact = RUNTIME_ARTIFACT.get(getattr(target, "runtime", "executorch"), "model.pte")
    size_mb = bundle.manifest["sizes"].get(artifact, 0) / 1e6
    acc = float(accuracy["executorch"]["accuracy"])
    drop = 100.0 * (reference_accuracy - acc)
    on_host = getattr(target, "name", "") == "host"

    checks = {
        "accuracy": {"reference": reference_accuracy, "measured": acc, "drop_points": round(drop, 3), "limit": max_drop,
                     "passed": drop <= max_drop},
        "size_mb": {"budget": budgets.size_mb, "measured": round(size_mb, 3), "predicted": predicted["size_mb"],
                    "artifact": artifact, "passed": budgets.size_mb is None or size_mb <= budgets.size_mb},
        "latency_ms": {"budget": budgets.latency_ms, "predicted": predicted["latency_ms"], "estimated": predicted["estimated"],
                       "host_measured": round(measured_ms["executorch"], 3), "decided_by": "host measurement" if on_host else "cost model",
                       "passed": budgets.latency_ms is None or (measured_ms["executorch"] if on_host else predicted["latency_ms"]) <= budgets.latency_ms},
        "memory_mb": {"budget": budgets.memory_mb, "predicted": predicted["peak_memory_mb"], "estimated": predicted["estimated"],
                      "passed": budgets.memory_mb is None or predicted["peak_memory_mb"] <= budgets.memory_mb},
    }
    failures = []
    for name, c in checks.items():
        if c["passed"]:
            continue
        if name == "accuracy":
            failures.append(f"accuracy drop {drop:.2f} points > {max_drop}")
        else:
            got = c.get("host_measured") if (name == "latency_ms" and on_host) else c.get("measured", c.get("predicted"))
            failures.append(f"{name.replace('_', ' ')} {got} > budget {c['budget']}")
    kind = "accuracy" if not checks["accuracy"]["passed"] else ("budget" if failures else None)
    result = {
        "passed": not failures,
        "failures": failures,
        "failures_kind": kind,
        "checks": checks,
        "accuracy": {rt: {k: r[k] for k in ("accuracy", "macro_f1") if k in r} for rt, r in accuracy.items()},
        "agreement_with_executorch": agreement,
        "host_latency_ms": {rt: round(v, 3) for rt, v in measured_ms.items()},
        "host_speedup": speedup["speedup"],
        "host_speedup_detail": speedup,
        "parity": bundle.manifest.get("parity", {}),
        "sizes": bundle.manifest.get("sizes", {}),
        "threads": threads,
    }
    atomic_write_json(out / "verify.json", result)
    log.info("verify: %s", "passed" if result["passed"] else "; ".join(failures))
    return result


def _host_speedup(bundle, baseline_program: tuple[Path, str] | None, baseline_ms: float, bundle_ms: float, *,
                  seq_len: int, threads: int, runs: int) -> dict:
    """Uncompressed ÷ compressed host latency, from alternating runs when the baseline program is at hand."""
    from edgenlp.bundle import pick_bucket
    from edgenlp.profile.executorch import compare_programs

    if baseline_program is None:
        return {"speedup": round(baseline_ms / bundle_ms, 3) if bundle_ms > 0 else None, "baseline_ms": round(baseline_ms, 3),
                "bundle_ms": round(bundle_ms, 3), "method": "separate measurements (baseline stage, verify stage)"}
    pte, method = baseline_program
    bucket = pick_bucket(bundle.pte_methods, seq_len)
    # ids below the (possibly trimmed) bundle vocabulary are valid for both programs
    vocab = int(bundle.manifest["model"]["shape"]["vocab_size"])
    times = compare_programs([(pte, method, vocab), (bundle.artifact("pte"), bucket.name, vocab)],
                             seq_len=bucket.seq_len, threads=threads, runs=max(runs, 20))
    base, comp = float(np.median(times[0])), float(np.median(times[1]))
    return {"speedup": round(base / comp, 3) if comp > 0 else None, "baseline_ms": round(base, 3), "bundle_ms": round(comp, 3),
            "runs": len(times[0]), "method": "alternating runs in one process (median each)"}
