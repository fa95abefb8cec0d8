"""Lowering a dynamic model: the static program plus its segments, weights stored once.

A model is dynamic when it has ``segments()`` and ``embedding_segment()``
(:class:`edgenlp.dynamic.model.DynamicModel`). Its bundle is a complete
static bundle (``forward_<S>`` methods, ``model.onnx``) plus:

- ExecuTorch: ``embed_<S>`` and ``seg<k>_<S>`` methods for every bucket, in
  the same program as ``forward_<S>`` (one ``to_edge_transform_and_lower``
  call over every method, so XNNPACK's named data stores each weight once).
  Each segment lowers to one XNNPACK delegate call: the attention bias comes
  in as float, the importance is a head mean plus one batched matmul;
- ONNX: one file per segment (``model.embed.onnx``, ``model.seg<k>.onnx``),
  batch 1, dynamic ``seq`` axis, quantized per linear like ``model.onnx``;
- the manifest's ``dynamic`` section (:mod:`edgenlp.bundle`).

:func:`check_segment_parity` is export's check of the segments: with exits
and token pruning off, every exit's logits and every layer's importance
through each runtime against the eager segments, at the static parity
tolerance or, for a quantized model, at the exit logits' and the
importance's own activation-rounding bounds where those are larger; the
free-running decisions against the eager reference are reported (the same
exit and tokens on how many sentences), not gated.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

import numpy as np
import torch

from edgenlp.export.executorch import PteResult, _method_report, delegated_linears, is_quantized
from edgenlp.export.lowering import Lowering
from edgenlp.dynamic.manifest import onnx_output_names
from edgenlp.export.graph import example_inputs, prepare

log = logging.getLogger(__name__)

EMBED_ONNX = "model.embed.onnx"


def segment_onnx_name(k: int) -> str:
    return f"model.seg{k}.onnx"


def is_dynamic(model) -> bool:
    return callable(getattr(model, "segments", None)) and callable(getattr(model, "embedding_segment", None))


def as_dynamic(model, info, steps):
    """``model`` itself, or, when the recipe has a ``dynamic`` step, the dynamic model of ``info.source`` on this base.

    A later step that calibrated the exit threshold again on this base (``quantize``: its result's ``exits``)
    sets the threshold (:func:`edgenlp.dynamic.api.exit_threshold_of`).
    """
    if is_dynamic(model) or not any(s.type == "dynamic" for s in steps):
        return model
    from dataclasses import replace

    from edgenlp.dynamic.api import exit_threshold_of, is_dynamic_dir, load_dynamic
    from edgenlp.errors import EdgeNLPError

    if not info.source or not is_dynamic_dir(info.source):
        raise EdgeNLPError(f"the recipe has a dynamic step but {info.source} has no dynamic.json (exit heads and thresholds)")
    dyn = load_dynamic(info.source, base=model)
    threshold = exit_threshold_of(steps)
    return dyn if threshold is None else dyn.with_spec(replace(dyn.spec, threshold=threshold))


def quantizes_exits(model, quant) -> bool:
    """Whether ``model`` is a dynamic model with early-exit heads on a base quantized with ``exit_heads="int8"``."""
    return (quant is not None and is_dynamic(model) and len(model.exit_heads) > 0
            and getattr(quant.config, "exit_heads", "fp32") == "int8")


def with_quantized_exits(model, quant):
    """``model`` with its early-exit heads int8 (:func:`edgenlp.quantize.schemes.quantize_exit_heads`) when
    :func:`quantizes_exits`; ``model`` itself otherwise.

    Running in segments costs more than the static program mostly through the exit heads
    (``tools/bench/results/segment-overhead.md``): an fp32 pooler reads its whole 384 x 384 matrix for one row.
    """
    if not quantizes_exits(model, quant):
        return model
    from edgenlp.quantize.schemes import quantize_exit_heads

    return model.with_heads(quantize_exit_heads(model.exit_heads))


def exit_head_bits(model, quant) -> dict[str, int]:
    """``{linear name inside a segment: bits}`` of the exit heads :func:`with_quantized_exits` quantizes (what the
    ONNX segments quantize by name); empty when they stay fp32."""
    return {"exit_head.pooler": 8, "exit_head.classifier": 8} if quantizes_exits(model, quant) else {}


def default_buckets(model, max_seq_len: int) -> tuple[int, ...]:
    """The ExecuTorch buckets ``export`` uses for ``model`` when none are given.

    Powers of two (:func:`edgenlp.export.executorch.default_buckets`), and for
    a dynamic model that prunes tokens also every ``max_seq_len / 8`` tokens
    (at least 16) from 64 up: a review pruned from 128 to 102 tokens would
    otherwise run in the 128 bucket. Measured on IMDB at 128 tokens
    (``tools/bench/results/dynamic.md``, imdb128-ltp-buckets against imdb128-ltp,
    the same model): 1.26x against 1.17x the static bundle's speed. The
    weights are stored once, so the extra methods add graph, not weights.
    """
    from edgenlp.export.executorch import default_buckets as powers_of_two

    base = powers_of_two(max_seq_len)
    if not is_dynamic(model) or model.spec.tokens == "none":
        return base
    step = max(16, max_seq_len // 8)
    finer = range(64 + step, max_seq_len, step)
    return tuple(sorted(set(base) | set(finer)))


def segment_inputs(seq: int, hidden: int, *, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Example hidden states ``[1, seq, hidden]`` and a bias with trailing padding, as a runtime passes them."""
    from edgenlp.models.encoder import MASK_BIAS

    g = torch.Generator().manual_seed(seed)
    x = torch.randn(1, seq, hidden, generator=g)
    _, mask = example_inputs(seq)
    return x, (1.0 - mask.float()) * MASK_BIAS


@dataclass
class DynamicPte:
    static: PteResult  # the forward_<S> methods, as for a static bundle
    segment_methods: list = field(default_factory=list)  # MethodReport of embed_/seg methods
    names: dict = field(default_factory=dict)  # "embedding" -> {seq: name}; k -> {seq: name}


def to_pte_dynamic(model, *, buckets: tuple[int, ...], processes: int | None = None) -> DynamicPte:
    """One ExecuTorch program: ``forward_<S>`` of the base model plus the embedding and segment methods,
    lowered in ``processes`` processes (:class:`edgenlp.export.lowering.Lowering`)."""
    from executorch.exir import ExecutorchBackendConfig

    start = time.perf_counter()
    m = prepare(model)
    quantized = is_quantized(m)
    vocab, hidden = m.shape.vocab_size, m.shape.hidden
    embedding, segments = m.embedding_segment(), m.segments()
    programs, seq_of = {}, {}
    names: dict = {"embedding": {}}

    def add(name, module, args, seq):
        programs[name] = torch.export.export(module, args, strict=False)
        seq_of[name] = seq

    with Lowering(len(buckets) * (2 + len(segments)), processes) as lowering:  # helpers start importing now
        with torch.no_grad():
            for seq in buckets:
                ids, mask = example_inputs(seq, vocab_size=vocab)
                add(f"forward_{seq}", m.base, (ids, mask), seq)
                add(f"embed_{seq}", embedding, (ids,), seq)
                names["embedding"][seq] = f"embed_{seq}"
                x, bias = segment_inputs(seq, hidden)
                for k, seg in enumerate(segments):
                    add(f"seg{k}_{seq}", seg, (x, bias), seq)
                    names.setdefault(k, {})[seq] = f"seg{k}_{seq}"
        edge, stages = lowering.lower(programs)
    linears = {name: delegated_linears(edge.exported_program(name).graph_module) for name in programs}
    delegated = {}
    for name in programs:
        try:
            from executorch.devtools.backend_debug import get_delegation_info

            delegated[name] = get_delegation_info(edge.exported_program(name).graph_module).num_delegated_nodes
        except Exception:  # pragma: no cover - devtools API drift
            delegated[name] = -1
    et = edge.to_executorch(ExecutorchBackendConfig(do_quant_fusion_and_const_prop=quantized))
    reports = {name: _method_report(name, seq_of[name], et.exported_program(name).graph_module,
                                    delegated=delegated[name], linears=linears[name]) for name in programs}
    seconds = time.perf_counter() - start
    static = [reports[f"forward_{s}"] for s in buckets]
    others = [r for n, r in reports.items() if not n.startswith("forward_")]
    for r in others:
        log.info("%s: %d delegate call(s), outside XNNPACK: %s", r.name, r.delegate_calls, r.non_delegated or "none")
    return DynamicPte(PteResult(et.buffer, static, seconds, stages=stages, lowering_processes=lowering.processes), others, names)


def to_onnx_segments(model, *, max_seq_len: int, quant=None) -> tuple[dict[str, bytes], dict]:
    """``{file: bytes}`` for the embedding and every segment, and their input/output description."""
    from edgenlp.export.onnx import OPSET, check_onnx, gemm_to_matmul

    m = prepare(model, decompose_norms=False)
    hidden = m.shape.hidden
    seq = torch.export.Dim("seq", min=2, max=max_seq_len)
    n = min(16, max_seq_len)
    files, desc = {}, {}

    def export(module, args, inputs, outputs, shapes):
        with torch.no_grad():
            prog = torch.onnx.export(module, args, input_names=inputs, output_names=outputs, dynamic_shapes=shapes,
                                     opset_version=OPSET, dynamo=True, external_data=False, optimize=True, verbose=False)
        proto = gemm_to_matmul(prog.model_proto)
        check_onnx(proto)
        return proto.SerializeToString()

    head_bits = exit_head_bits(model, quant)
    ids, _ = example_inputs(n, vocab_size=m.shape.vocab_size)
    files[EMBED_ONNX] = export(m.embedding_segment(), (ids,), ["input_ids"], ["hidden"], {"input_ids": {1: seq}})
    desc[EMBED_ONNX] = {"inputs": ["input_ids"], "outputs": ["hidden"]}
    x, bias = segment_inputs(n, hidden)
    for k, s in enumerate(m.segments()):
        name = segment_onnx_name(k)
        data = export(s, (x, bias), ["hidden", "bias"], onnx_output_names(s.outputs), {"hidden": {1: seq}, "bias": {1: seq}})
        if quant is not None:
            from edgenlp.export.onnx_quant import quantize_onnx

            mine = {n_: b for n_, b in quant.bits.items()
                    if (n_.startswith("layers.") and int(n_.split(".")[1]) in s.layer_indices)
                    or (s.final and n_ in ("pooler", "classifier"))}
            if s.has_exit and not s.final:
                mine.update(head_bits)
            data = quantize_onnx(data, mine, group_size=quant.config.group_size)
        files[name] = data
        desc[name] = {"inputs": ["hidden", "bias"], "outputs": onnx_output_names(s.outputs)}
    return files, {"opset": OPSET, "dynamic_axes": {"seq": "every input's axis 1"}, "files": desc}


def manifest_entry(model, *, buckets: tuple[int, ...], pte: DynamicPte | None, onnx: dict | None) -> dict:
    """The manifest's ``dynamic`` section (documented in :mod:`edgenlp.bundle`)."""
    from edgenlp.dynamic.rules import threshold_range
    from edgenlp.models.encoder import MASK_BIAS

    spec = model.spec
    segs = []
    for k, s in enumerate(model.segments()):
        entry = {"index": k, "layers": [s.layer_indices[0] + 1, s.layer_indices[-1] + 1], "exit": s.has_exit,
                 "tokens": s.importance, "outputs": list(s.outputs)}
        if pte is not None:
            entry["pte"] = {str(q): name for q, name in pte.names[k].items()}
        if onnx is not None:
            entry["onnx"] = segment_onnx_name(k)
        segs.append(entry)
    embedding = {}
    if pte is not None:
        embedding["pte"] = {str(q): name for q, name in pte.names["embedding"].items()}
    if onnx is not None:
        embedding["onnx"] = EMBED_ONNX
    lo, hi = threshold_range(spec.rule, len(spec.exits))
    stops = {"maxprob": "max probability >= threshold", "entropy": "entropy / log(num_labels) <= threshold",
             "patience": "the last threshold exits agree on the label"}[spec.rule]
    out = {
        "version": 1,
        "num_layers": spec.num_layers,
        "hidden": model.shape.hidden,
        "num_labels": model.num_labels,
        "mask_bias": MASK_BIAS,
        "buckets": list(buckets),
        "embedding": embedding,
        "segments": segs,
        "spec": spec.to_dict(),
        "rule": {"name": spec.rule, "threshold": spec.threshold, "range": [lo, hi], "stops_when": stops},
        "tokens": {"mode": spec.tokens, "layers": list(spec.token_layers), "thresholds": list(spec.token_thresholds),
                   "keep_ratio": spec.keep_ratio, "always_keep": ["first", "last"]},
    }
    if pte is not None:
        out["pte"] = {"methods": [r.to_dict() for r in pte.segment_methods],
                      "delegate_calls_per_segment": max(r.delegate_calls for r in pte.segment_methods
                                                        if r.name.startswith("seg"))}
    if onnx is not None:
        out["onnx"] = onnx
    return out


def static_runner(path, *, runtime, threads=None):
    """The runner export's static parity check uses on a dynamic bundle: its ``forward_<S>`` methods / ``model.onnx``."""
    from edgenlp.run.base import get_runner

    return get_runner(path, runtime=runtime, threads=threads, static=True)


# --------------------------------------------------------------------------- parity


def _chain_reference(model, token_ids) -> list:
    """Eager segments with exits and pruning off, traced (the values each runtime's segments must reproduce)."""
    from edgenlp.run.dynamic import eager_runner, resolve_settings, run_sentence, segment_entries
    from edgenlp.models.encoder import MASK_BIAS

    runner = eager_runner(model)
    settings = resolve_settings(model.spec, exits=False, keep=1.0) if model.spec.token_layers else resolve_settings(
        model.spec, exits=False)
    segs = segment_entries(model)
    return [run_sentence(runner.backend, segs, ids, settings, mask_bias=MASK_BIAS, num_layers=model.spec.num_layers,
                         trace=True) for ids in token_ids]


def _rms_diff(a: list, b: list, what: str = "exit_logits") -> float:
    """RMS over sentences, layers and entries of ``what`` (``exit_logits`` or ``importance``) between two traced chains."""
    d = [np.asarray(getattr(r, what)[k]) - np.asarray(getattr(g, what)[k]) for r, g in zip(a, b) for k in getattr(r, what)]
    return float(np.sqrt(np.mean(np.concatenate([x.ravel() for x in d]) ** 2))) if d else 0.0


def _max_diff(a: dict, b: dict) -> float:
    return max((float(np.abs(np.asarray(a[k]) - np.asarray(b[k])).max()) for k in a), default=0.0)


def _max_abs(chains: list, what: str) -> float:
    return max((float(np.abs(np.asarray(v)).max()) for r in chains for v in getattr(r, what).values()), default=1.0)


def _rounding_bound(policy, ref: list, unrounded: list, what: str):
    """``runtime -> policy.bound`` of ``what`` (``exit_logits`` or ``importance``), from the reference's own
    activation-rounding error on these sentences (None when the chains carry no ``what``)."""
    if not any(getattr(r, what) for r in ref):
        return None
    err = max(_max_diff(getattr(r, what), getattr(u, what)) for r, u in zip(ref, unrounded))
    scale, rms = _max_abs(ref, what), _rms_diff(ref, unrounded, what)
    return lambda runtime: policy.bound(runtime, reference_scale=scale, rounding_error=err, rounding_rms=rms)


def check_segment_parity(bundle_dir, model, *, formats, texts, tokenizer, max_len: int, tolerances: dict,
                         id_map=None, policy=None, rounding_model=None) -> dict:
    """Per runtime: the segments' outputs against the eager segments (gated), and the decisions (reported).

    ``tolerances`` maps runtime -> the max |diff| allowed (the static parity's).
    For a quantized model, ``rounding_model`` (``policy.rounding_reference``
    of it: activations left unrounded) gives the exit logits' and the token
    importance's own activation-rounding errors, and ``policy.bound`` turns
    each into its own limits (max and RMS), as it does for the final logits:
    an exit head sharper than the final classifier carries a larger rounding
    error, and so does the importance (attention summed over up to ``seq``
    queries; a sharp softmax moves with its logits' rounding), which a correct
    kernel reproduces. Each output's gate is the larger of its own bound and
    the static limit; a systematic defect (a wrong head mean, a moved exit
    bias) still breaks the RMS limit.
    """
    from edgenlp.bundle import FORMAT_RUNTIME
    from edgenlp.models.tokenizer import token_ids as tokenize
    from edgenlp.run.dynamic import bundle_runner, eager_runner, resolve_settings

    ids = [id_map.apply(x) if id_map is not None else x for x in tokenize(tokenizer, texts, max_len=max_len)]
    ref = _chain_reference(model, ids)
    exit_bound = imp_bound = None
    if policy is not None and rounding_model is not None:
        unrounded = _chain_reference(rounding_model, ids)
        exit_bound = _rounding_bound(policy, ref, unrounded, "exit_logits")
        imp_bound = _rounding_bound(policy, ref, unrounded, "importance")
    free = eager_runner(model).backend
    out = {}
    for fmt in formats:
        runtime = FORMAT_RUNTIME[fmt]
        with bundle_runner(bundle_dir, runtime=runtime) as runner:
            from edgenlp.run.dynamic import run_sentence

            chain = resolve_settings(runner.spec, exits=False, keep=1.0 if runner.spec.token_layers else None)
            got = [run_sentence(runner.backend, runner.segments, x, chain, mask_bias=runner.mask_bias,
                                pad_id=runner.pad_id, num_layers=runner.spec.num_layers, trace=True) for x in ids]
            logit_diff = max(_max_diff(r.exit_logits, g.exit_logits) for r, g in zip(ref, got))
            imp_diff = max(_max_diff(r.importance, g.importance) for r, g in zip(ref, got))
            same = 0
            for x in ids:
                a = run_sentence(runner.backend, runner.segments, x, runner.settings, mask_bias=runner.mask_bias,
                                 pad_id=runner.pad_id, num_layers=runner.spec.num_layers)
                b = run_sentence(free, runner.segments, x, runner.settings, mask_bias=runner.mask_bias,
                                 num_layers=runner.spec.num_layers)
                same += a.exit_layer == b.exit_layer and a.tokens == b.tokens
        tol = tolerances[runtime]
        bound = exit_bound(runtime) if exit_bound is not None else None
        ibound = imp_bound(runtime) if imp_bound is not None else None
        out[runtime] = {"exit_logits_max_abs_diff": logit_diff, "importance_max_abs_diff": imp_diff,
                        "tolerance": max(tol, bound["tolerance"]) if bound else tol,
                        "importance_tolerance": max(tol, 1e-4, ibound["tolerance"] if ibound else 0.0),
                        "samples": len(ids), "same_decisions": same}
        passed = logit_diff <= out[runtime]["tolerance"] and imp_diff <= out[runtime]["importance_tolerance"]
        for name, b, what in (("exit", bound, "exit_logits"), ("importance", ibound, "importance")):
            if not b:
                continue
            out[runtime][f"{name}_bound"] = b
            if "rms_limit" in b:  # a systematic defect moves every sentence's outputs
                out[runtime][f"{what}_rms_diff"] = _rms_diff(ref, got, what)
                passed = passed and out[runtime][f"{what}_rms_diff"] <= b["rms_limit"]
        out[runtime]["passed"] = passed
        log.info("segment parity %s: exit logits %.2e, importance %.2e; same decisions on %d/%d", runtime, logit_diff,
                 imp_diff, same, len(ids))
    return out
