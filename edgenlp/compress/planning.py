"""The planner as ``compress`` uses it: budgets from the target, a plan document, exclusions after a failed attempt."""

from __future__ import annotations

import dataclasses
import logging
from typing import Any, Mapping

log = logging.getLogger(__name__)

# Weight precision from most to least bits; a candidate is "more aggressive" with fewer bits.
BITS_ORDER = ("fp32", "mixed", "int8", "int4")
EMB_ORDER = (None, "int8", "int4")


def load_target(name_or_path: str):
    from edgenlp.targets import load_target as _load

    return _load(name_or_path)


def resolve_budgets(target, *, latency_ms=None, memory_mb=None, size_mb=None, seq_len=None, threads=None,
                    latency_stat=None):
    """The target's default budgets with the command line's overrides."""
    return target.budgets.override(latency_ms=latency_ms, memory_mb=memory_mb, size_mb=size_mb, seq_len=seq_len,
                                   threads=threads, latency_stat=latency_stat)


def attention_weight(target, shape, *, seq_len: int, threads: int = 1, precision: str = "int8") -> float:
    """What one attention-core FLOP costs in linear-layer FLOPs on ``target``, per its cost model.

    The ratio of the two components' predicted milliseconds per FLOP for
    ``shape`` at ``seq_len`` with ``precision`` linears: the weight a
    ``latency`` pruning target prices each head's attention core at
    (:class:`~edgenlp.prune.config.PruneConfig`). On a CPU the attention core
    and its softmax run in fp32 beside int8 GEMMs, so a head costs more than
    its parameters say.
    """
    from edgenlp.models.arithmetic import component_flops
    from edgenlp.targets.costmodel import CostModel

    pred = CostModel.for_target(target).predict(shape, bits=precision, seq_len=seq_len, threads=threads)
    flops = component_flops(shape, seq_len=seq_len, num_labels=0)
    linear = ("attn_qkv", "attn_out", "ffn")
    per_linear = sum(pred.components_ms.get(c, 0.0) for c in linear) / sum(flops[c] for c in linear)
    per_core = pred.components_ms.get("attn_core", 0.0) / flops["attn_core"]
    return max(per_core / per_linear, 1e-3)


def _bits_rank(bits) -> int:
    if isinstance(bits, (list, tuple)):
        return BITS_ORDER.index("mixed")
    return BITS_ORDER.index(bits) if bits in BITS_ORDER else 0


def aggressiveness(c: Mapping[str, Any]) -> tuple:
    return (float(c.get("sparsity") or 0.0), _bits_rank(c.get("bits", "fp32")), EMB_ORDER.index(c.get("embeddings"))
            if c.get("embeddings") in EMB_ORDER else 0, int(bool(c.get("trim_vocab"))), int(bool(c.get("exits"))),
            float(c.get("block_sparsity") or 0.0))


def at_least_as_aggressive(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """``a`` removes at least what ``b`` removes on every axis (same pruning method, or ``b`` prunes nothing)."""
    same_method = not b.get("sparsity") or a.get("prune_method") == b.get("prune_method")
    return same_method and all(x >= y for x, y in zip(aggressiveness(a), aggressiveness(b)))


def exclusions_after(candidate: Mapping[str, Any], kind: str | None) -> list[dict]:
    """What a failed attempt rules out, as exclusion rules the next plan applies.

    After an accuracy miss everything at least as aggressive as the candidate
    loses at least as much (``{"at_least": c}``); after a budget miss everything
    at most as aggressive is at least as slow or large (``{"at_most": c}``);
    after a bundle ran slower on the host than the uncompressed program, the
    same weight and word-table precision pruned no more is at least as slow
    (``{"slower": c}``: the precision's kernels are what is slow here).
    """
    if kind == "accuracy":
        return [{"at_least": dict(candidate)}]
    if kind == "budget":
        return [{"at_most": dict(candidate)}]
    if kind == "slower":
        return [{"slower": dict(candidate)}]
    return [{"exactly": dict(candidate)}]


def _same_precision(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    bits = lambda c: tuple(c.get("bits")) if isinstance(c.get("bits"), (list, tuple)) else c.get("bits", "fp32")  # noqa: E731
    return bits(a) == bits(b) and a.get("embeddings") == b.get("embeddings")


def is_excluded(c: Mapping[str, Any], rules: list[Mapping[str, Any]]) -> bool:
    for r in rules:
        if "at_least" in r and at_least_as_aggressive(c, r["at_least"]):
            return True
        if "at_most" in r and at_least_as_aggressive(r["at_most"], c):
            return True
        if "exactly" in r and dict(c) == dict(r["exactly"]):
            return True
        if "slower" in r and _same_precision(c, r["slower"]) and at_least_as_aggressive(r["slower"], c):
            return True
    return False


def plan_for_compress(target, budgets, *, shape, num_labels: int, preset, excluded: list, task,
                      max_drop: float | None = None, objective: str = "latency", measure: int = 1,
                      measured: list[dict] | None = None, exit_stats=None, trimmed_vocab_size: int | None = None) -> dict:
    """Run the planner for this model and preset; a JSON document with the chosen and every considered candidate.

    The accuracy prior counts only rows measured at the budgets the preset
    spends on each pruning method, with a built-in task's own drops where it
    measured them (the mean over tasks otherwise); a method is offered at its measured
    sparsities only, and not at all without rows (``not_offered``). ``why``
    says why the chosen candidate won on ``objective``. ``shortlist`` holds
    the ``measure`` best fitting candidates, the chosen one first.
    ``measured`` rows (``{"candidate", "drop", "source"}``: candidates an
    earlier run built and measured for this model and task) replace the
    prior's drop for those candidates. With ``exit_stats``
    (:class:`~edgenlp.targets.costmodel.ExitStats` measured for this model),
    every candidate is offered with early exits too. ``trimmed_vocab_size``:
    the word-table rows a trimmed vocabulary keeps for this task (what the
    quantize step will keep; without it the planner's prior share). Static fp32 / int8
    candidates are also offered block-sparse at each fraction of zero blocks
    the prior measured at the preset's ``sparsify`` budget, where the cost
    model can price the sparse kernels on ``target``.
    """
    from edgenlp.targets.planner import SPARSE_PRECISIONS, default_space, plan, structured_key
    from edgenlp.targets.prior import AccuracyModel

    # a built-in task is the data the prior's rows measured: its own rows predict it (not the mean over tasks)
    acc = AccuracyModel(budgets=preset.prune_budget_map(), task=task.name if getattr(task, "builtin", False) else None)
    if measured:
        acc = acc.with_measured_candidates(measured)
    methods = [m for m in preset.prune_methods if acc.sparsities(m)]
    unmeasured = [m for m in preset.prune_methods if m not in methods]
    space = [c for c in default_space(prune_methods=(), schemes=preset.schemes, sparsities=(0.0,))]
    for m in methods:
        space += [c for c in default_space(prune_methods=(m,), schemes=preset.schemes, sparsities=acc.sparsities(m))
                  if c.prune_method == m]  # fmt: skip
    blocks = acc.block_sparsities()  # block sparsity at the preset's sparsify budget, where the prior has rows
    if exit_stats is not None:
        space += [dataclasses.replace(c, exits=True) for c in space]
    space += [dataclasses.replace(c, block_sparsity=b) for b in blocks for c in space
              if not c.exits and c.bits in SPARSE_PRECISIONS]  # fmt: skip
    space = [c for c in space if not is_excluded(_cand(c), excluded)]
    if not space:
        from edgenlp.errors import EdgeNLPError

        raise EdgeNLPError("every candidate of the search space was ruled out by earlier attempts")
    built = built_shapes(measured or [])
    result = plan(target, budgets, shape=shape, num_labels=num_labels, space=space, max_drop=max_drop, task=task.name,
                  accuracy_model=acc, objective=objective, exit_stats=exit_stats,
                  trimmed_vocab_size=trimmed_vocab_size, built_shapes=built)  # fmt: skip
    def doc(point) -> dict:
        cand, pred, drop, fits = point
        shape = "unpruned" if not cand.prune_method else \
            "as built" if structured_key(cand.prune_method, cand.sparsity) in built else "nominal"
        return {"candidate": _cand(cand), "shape": shape, "predicted_latency_ms": pred.latency_ms,
                "predicted_memory_mb": pred.peak_memory_mb, "predicted_size_mb": pred.size_mb,
                "predicted_drop": drop, "fits": bool(fits), "estimated": bool(pred.estimated),
                "prior": point.prior.to_dict() if point.prior else None}  # fmt: skip

    considered = [doc(point) for point in result.considered]
    chosen = _cand(result.chosen)
    point = next((c for c in considered if c["candidate"] == chosen), None)
    return {"chosen": chosen, "chosen_prediction": point, "chosen_point": point, "considered": considered,
            "shortlist": [doc(p) for p in result.shortlist(measure)], "measured_rows_used": len(measured or []),
            "estimated": bool(getattr(result, "estimated", True)), "excluded": excluded,
            "why": result.choice.to_dict() if result.choice else None,
            "prior": {"budgets": preset.prune_budget_map(), "methods_offered": methods,
                      "methods_without_rows": unmeasured, "block_sparsities_offered": list(blocks),
                      "tolerance_points": round(acc.tolerance(max_drop), 4),
                      "task": acc.task, "task_rows": acc.task_rows()},
            "not_offered": len(result.not_offered), "latency_stat": budgets.latency_stat,
            "trimmed_vocab_size": trimmed_vocab_size,
            "exit_stats": exit_stats.to_dict() if exit_stats is not None else None}


def built_shapes(measured) -> dict[tuple[str, float], tuple[tuple[int, ...], tuple[int, ...]]]:
    """``{structured_key: (heads, ffn)}`` from measured rows that recorded the pruned shape they were built with (the
    latest row wins)."""
    from edgenlp.targets.planner import structured_key

    out = {}
    for r in measured:
        c = r.get("candidate") or {}
        if c.get("prune_method") and isinstance(r.get("heads"), list) and isinstance(r.get("ffn"), list):
            out[structured_key(c["prune_method"], c.get("sparsity", 0.0))] = (tuple(r["heads"]), tuple(r["ffn"]))
    return out


def trimmed_vocab_size(info, task) -> int:
    """How many word-table rows trimming keeps for ``task``: every token of its training texts plus the specials.

    The quantize step keeps exactly these (:func:`edgenlp.models.vocab.kept_token_ids`
    on the same texts), so a trimmed candidate's size is priced on its real table.
    """
    from edgenlp.models.tokenizer import build_tokenizer
    from edgenlp.models.vocab import kept_token_ids

    return len(kept_token_ids(build_tokenizer(info.vocab_file, info.tokenizer), task.train.texts))


def _cand(c) -> dict:
    d = c.to_dict() if hasattr(c, "to_dict") else dict(c)
    d.pop("type", None)
    d.pop("version", None)
    return d


def predict_bundle(target, bundle, *, seq_len: int, threads: int) -> dict:
    """The cost model's prediction for a built bundle (its real shape and precision) on ``target``."""
    from edgenlp.targets import cost_model_for

    model = cost_model_for(target)
    pred = model.predict_bundle(bundle, seq_len=seq_len, threads=threads)
    return {"latency_ms": round(pred.latency_ms, 3), "peak_memory_mb": round(pred.peak_memory_mb, 2),
            "size_mb": round(pred.size_mb, 3), "estimated": bool(pred.estimated)}
