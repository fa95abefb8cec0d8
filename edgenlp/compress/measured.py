"""Measured planning: the planner's top candidates built, scored on a validation split, the best measured one chosen.

The accuracy prior ranks candidates from other tasks' measurements, so its
drop is a guess for this model and task. ``compress --measure K`` builds the
``K`` candidates of the plan (its choice, then the best of each other pruning:
:meth:`edgenlp.targets.planner.Plan.shortlist`) for real (pruned, recovered, quantized and
lowered, as the final bundle would be), runs each bundle over a validation
split held out of the training data (never dev), and chooses the first of
them, in the plan's order, whose measured drop is within ``--max-drop`` and
whose measured size and predicted latency for its real shape fit the budgets.
Dev accuracy is then measured once, for the chosen bundle only (the verify
stage).

Every measured candidate is appended to a local cache
(``<cache>/measured-candidates.json``, :func:`cache_path`) keyed by the
model, the task's data and the fine-tuning config; the next ``compress`` of
the same model and task plans with those measured drops in place of the
prior's (:meth:`edgenlp.targets.prior.AccuracyModel.with_measured_candidates`),
and prices a pruning it has built on the shape it really had (heads and FFN
width per layer), not on the nominal even shape.
"""

from __future__ import annotations

import datetime as _dt
import json
import logging
import math
from pathlib import Path
from typing import Any, Mapping, Sequence

log = logging.getLogger(__name__)

VALIDATION_ROWS = 1000  # held out of train, at most a tenth of it
CACHE_FILE = "measured-candidates.json"
CACHE_VERSION = 1


def validation_rows(train_rows: int) -> int:
    """Rows held out of a training split of ``train_rows`` rows: 1,000, at most a tenth of it, at least 1.

    >>> validation_rows(67349), validation_rows(9003), validation_rows(64)
    (1000, 900, 6)
    """
    return max(1, min(VALIDATION_ROWS, train_rows // 10))


def cache_path() -> Path:
    from edgenlp.targets.costmodel.tables import cache_dir

    return cache_dir() / CACHE_FILE


def _read_cache(path: Path) -> dict:
    """The cache document at ``path``; an empty one when the file is missing, unreadable or of another version."""
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        doc = None
    if not isinstance(doc, dict) or doc.get("version") != CACHE_VERSION:
        doc = {"version": CACHE_VERSION, "rows": []}
    return doc


def cache_rows(key: Mapping[str, Any], path: Path | None = None) -> list[dict]:
    """The cached measurements made under ``key`` (model, data, fine-tuning), oldest first; [] when none or unreadable."""
    want = json.dumps(dict(key), sort_keys=True)
    return [r for r in _read_cache(path or cache_path()).get("rows", [])
            if isinstance(r, dict) and json.dumps(r.get("key"), sort_keys=True) == want
            and "candidate" in r and isinstance(r.get("drop"), (int, float)) and math.isfinite(r["drop"])]


def add_to_cache(key: Mapping[str, Any], rows: Sequence[Mapping[str, Any]], path: Path | None = None) -> Path:
    """Append ``rows`` (``{"candidate", "drop", ...}``) under ``key``; written atomically. Returns the cache file."""
    from edgenlp.utils import atomic_write_json

    path = path or cache_path()
    doc = _read_cache(path)
    when = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    doc["rows"] = [*doc.get("rows", []), *({**dict(r), "key": dict(key), "when": when} for r in rows)]
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(path, doc)
    return path


def bundle_accuracy(bundle: Path, split, *, threads: int = 1) -> dict:
    """Accuracy of ``bundle`` over ``split`` through ExecuTorch, as a user would run it."""
    from edgenlp.run.base import get_runner
    from edgenlp.run.evaluate import evaluate_split

    with get_runner(bundle, runtime="executorch", threads=threads) as runner:
        r = evaluate_split(runner, split)
    return {k: r[k] for k in ("accuracy", "macro_f1", "n") if k in r}


def measure_candidate(bundle: Path, *, candidate: Mapping[str, Any], predicted: Mapping[str, Any], val, reference: float,
                      target, budgets, max_drop: float, threads: int) -> dict:
    """One built candidate: its validation accuracy and drop, its measured size and the prediction for its real shape."""
    from edgenlp.bundle import Bundle
    from edgenlp.compress.planning import predict_bundle
    from edgenlp.compress.verify import size_check

    acc = bundle_accuracy(bundle, val, threads=threads)
    b = Bundle.open(bundle)
    real = predict_bundle(target, b, seq_len=budgets.seq_len, threads=budgets.threads)
    size = size_check(b.manifest.get("sizes", {}), budget_mb=budgets.size_mb, predicted_mb=real["size_mb"],
                      runtime=getattr(target, "runtime", "executorch"))
    drop = 100.0 * (reference - float(acc["accuracy"]))
    latency_ok = budgets.latency_ms is None or real["latency_ms"] <= budgets.latency_ms
    memory_ok = budgets.memory_mb is None or real["peak_memory_mb"] <= budgets.memory_mb
    fails = [*(["accuracy"] if drop > max_drop else []), *(["size"] if not size["passed"] else []),
             *(["latency"] if not latency_ok else []), *(["memory"] if not memory_ok else [])]
    return {"candidate": dict(candidate), "predicted_drop": predicted.get("predicted_drop"),
            "predicted_latency_ms": predicted.get("predicted_latency_ms"), "predicted_size_mb": predicted.get("predicted_size_mb"),
            "val_accuracy": float(acc["accuracy"]), "val_rows": int(acc.get("n", len(val))), "reference_val_accuracy": reference,
            "measured_drop": round(drop, 4), "measured_size_mb": size["measured"], "artifacts_mb": size["artifacts"],
            "real_shape_latency_ms": real["latency_ms"], "real_shape_memory_mb": real["peak_memory_mb"],
            **built_shape(b.manifest), "fails": fails, "meets": not fails}


def built_shape(manifest: Mapping[str, Any]) -> dict:
    """``{"heads": [...], "ffn": [...]}`` per layer of a built bundle's encoder ({} when the manifest does not say)."""
    shape = (manifest.get("model") or {}).get("shape") or {}
    if not isinstance(shape.get("heads"), list) or not isinstance(shape.get("ffn"), list):
        return {}
    return {"heads": [int(h) for h in shape["heads"]], "ffn": [int(f) for f in shape["ffn"]]}


def choose_measured(rows: Sequence[Mapping[str, Any]]) -> tuple[int, str]:
    """``(index, why)``: the first row, in the plan's order, that meets the budgets and the accuracy bound as measured;
    when none does, the one with the smallest measured drop (verification then fails it, and the next attempt plans
    without it)."""
    if not rows:
        raise ValueError("choose_measured needs at least one measured candidate")
    for i, r in enumerate(rows):
        if r["meets"]:
            skipped = [f"#{j + 1} ({', '.join(rows[j]['fails'])})" for j in range(i)]
            why = (f"the plan's #{i + 1} on its objective" + (f"; ahead of it, {', '.join(skipped)} missed as measured" if skipped
                                                              else ", and it met every bound as measured"))
            return i, why
    i = min(range(len(rows)), key=lambda j: rows[j]["measured_drop"])
    return i, f"no candidate met every bound as measured; #{i + 1} lost the least on validation"


def eager_accuracy(model, info, split, labels, *, max_len: int) -> dict:
    """Accuracy (and macro-F1) of ``model`` in eager PyTorch over ``split``, on the CPU."""
    from edgenlp.finetune.trainer import encode_split, evaluate, load_tokenizer

    model = model.to("cpu")
    data = encode_split(load_tokenizer(info), split, tuple(labels), max_len=max_len)
    return {**evaluate(model, data, num_labels=len(labels)), "n": len(split)}


def measure_built(built: Sequence[tuple[Mapping[str, Any], Path, str]], out: Path, *, model_dir: Path, labels, val,
                  max_len: int, target, budgets, max_drop: float, threads: int, echo=None,
                  not_built: Sequence[Mapping[str, Any]] | None = None) -> dict:
    """The measure stage: every built ``(plan point, bundle, stage)`` on ``val``; the choice; ``measure.json`` at ``out``.

    The reference is the uncompressed model at ``model_dir`` in eager PyTorch
    over the same rows, truncated as the bundles truncate (``max_len``).
    ``not_built`` (shortlisted candidates whose build failed) is recorded as given.
    """
    from edgenlp.models.registry import load_model
    from edgenlp.utils import atomic_write_json

    model, info = load_model(model_dir, labels=list(labels))
    reference = eager_accuracy(model, info, val, labels, max_len=max_len)
    rows = []
    for j, (point, bundle, stage) in enumerate(built, 1):
        if echo is not None:
            echo(f"candidate {j}/{len(built)} on {len(val)} validation rows")
        rows.append({**measure_candidate(bundle, candidate=point["candidate"], predicted=point, val=val,
                                         reference=float(reference["accuracy"]), target=target, budgets=budgets,
                                         max_drop=max_drop, threads=threads), "stage": stage})
    i, why = choose_measured(rows)
    doc = {"reference": {"val_accuracy": reference["accuracy"], "through": "eager PyTorch", "max_len": max_len},
           "val_rows": len(val), "max_drop": max_drop, "rows": rows, "chosen_index": i, "chosen": rows[i]["candidate"],
           "why": why, "not_built": [dict(n) for n in not_built or ()]}
    atomic_write_json(out, doc)
    return {k: doc[k] for k in ("reference", "val_rows", "rows", "chosen_index", "chosen", "why", "not_built")}


def remember(key: Mapping[str, Any], rows: Sequence[Mapping[str, Any]], *, source: str, path: Path | None = None) -> None:
    """Cache the measure stage's ``rows`` under ``key``; a cache that cannot be written costs the next run, not this one."""
    try:
        add_to_cache(key, [{"candidate": r["candidate"], "drop": r["measured_drop"], "val_rows": r["val_rows"],
                            "source": source, **{k: r[k] for k in ("heads", "ffn") if k in r}} for r in rows], path)
    except OSError as exc:
        log.warning("measured candidates not cached: %s", exc)


def recalled(key: Mapping[str, Any], path: Path | None = None) -> list[dict]:
    """The cached measurements under ``key`` as the planner takes them (``{"candidate", "drop", "source"}``, and
    ``heads`` / ``ffn`` per layer of the pruned model as built, when recorded)."""
    return [{"candidate": r["candidate"], "drop": r["drop"], "source": r.get("source", "measured"),
             **{k: r[k] for k in ("heads", "ffn") if isinstance(r.get(k), list)}}
            for r in cache_rows(key, path)]
