"""``export``: model -> bundle, with parity checked against eager PyTorch.

>>> from edgenlp.export.api import ExportConfig, export_bundle          # doctest: +SKIP
>>> bundle = export_bundle(model, info, "out/minilm-sst2", task=data,
...                        config=ExportConfig(formats=("pte", "onnx"), max_seq_len=128))
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from edgenlp import __version__
from edgenlp.config import Config, knob
from edgenlp.errors import EdgeNLPError, ParityError
from edgenlp.bundle import FORMAT, FORMAT_VERSION, FORMATS, VOCAB_MAP_FILE, Bundle, VocabMap, finalize_manifest
from edgenlp.recipe import FP32_PARITY, Step, parity_policy, recipe_to_list
from edgenlp.sparse.convert import sparse_plan, to_sparse_ops
from edgenlp.utils import atomic_dir, environment

log = logging.getLogger(__name__)

MAX_SEQ_LEN = 4096

# Used for the parity check when no task data is given.
FALLBACK_SENTENCES = (
    "a gripping , funny and moving film .",
    "the plot is thin and the acting is worse .",
    "I lost my card yesterday, can you freeze it?",
    "ok",
    "what is the exchange rate for euros to dollars today and is there a fee for converting money in the app",
)


@dataclass(frozen=True)
class ExportConfig(Config):
    """How to lower a model. One config drives the API, the CLI and the manifest.

    ``parity_tolerance`` overrides the tolerance of the model's parity policy
    (:func:`edgenlp.recipe.parity_policy`: fp32 max |logit diff| 1e-4 unless a
    step defines its own reference and tolerance).
    """

    formats: tuple[str, ...] = knob(FORMATS, choices=FORMATS, help="Formats to lower to.")
    max_seq_len: int = knob(128, help="Maximum sequence length the bundle accepts.")
    buckets: tuple[int, ...] | None = knob(None, help="ExecuTorch sequence buckets, e.g. 16,32,64,128 "
                                                      "(default: powers of two up to the maximum length; a dynamic "
                                                      "model that prunes tokens also gets every max/8 from 64).")
    parity_tolerance: float | None = knob(None, help="Max |logit diff| vs the parity reference; export fails above it "
                                                     f"(default: the model's parity policy, {FP32_PARITY.tolerance:g} for fp32).")
    parity_samples: int = knob(32, help="Sentences the parity check compares.")
    lower_processes: int | None = knob(None, help="Processes that lower the ExecuTorch methods at once (default: one per "
                                                  "usable core, at most one per method; 1: this process only).")

    def __post_init__(self) -> None:
        object.__setattr__(self, "formats", tuple(self.formats))
        if not self.formats or any(f not in FORMATS for f in self.formats):
            raise ValueError(f"formats must be a non-empty subset of {FORMATS}, got {self.formats}")
        if not isinstance(self.max_seq_len, int) or not 2 <= self.max_seq_len <= MAX_SEQ_LEN:
            raise ValueError(f"max_seq_len must be in [2, {MAX_SEQ_LEN}], got {self.max_seq_len}")
        if self.buckets is not None:
            b = tuple(sorted(set(int(x) for x in self.buckets)))
            if not b or b[0] < 2 or b[-1] != self.max_seq_len:
                raise ValueError(f"buckets must be >= 2 and end at max_seq_len={self.max_seq_len}, got {self.buckets}")
            object.__setattr__(self, "buckets", b)
        if self.parity_tolerance is not None and not self.parity_tolerance > 0:
            raise ValueError(f"parity_tolerance must be > 0, got {self.parity_tolerance}")
        if self.parity_samples < 1:
            raise ValueError(f"parity_samples must be >= 1, got {self.parity_samples}")
        if self.lower_processes is not None and (not isinstance(self.lower_processes, int) or self.lower_processes < 1):
            raise ValueError(f"lower_processes must be >= 1, got {self.lower_processes}")

    @property
    def resolved_buckets(self) -> tuple[int, ...]:
        """The buckets of a static model: ``buckets``, else powers of two. ``export_bundle`` asks
        :func:`edgenlp.export.segments.default_buckets`, which gives a dynamic model that prunes tokens finer ones."""
        from edgenlp.export.executorch import default_buckets

        return self.buckets or default_buckets(self.max_seq_len)


# Parity sentences: ``parity_samples`` real sentences (the full check, mostly in the short buckets
# real text lands in) plus this many for every bucket method those leave unexercised.
PARITY_PER_BUCKET = 3
PARITY_POOL = 2000  # dev sentences searched for ones of each bucket's length


def _eager_reference(model, tokenizer, texts: Sequence[str], max_len: int, *, id_map=None) -> np.ndarray:
    """Logits of each text run alone (no padding) through eager PyTorch (ids remapped by ``id_map`` when trimmed)."""
    import torch

    from edgenlp.models.tokenizer import token_ids

    out = []
    with torch.no_grad():
        for ids in token_ids(tokenizer, texts, max_len=max_len):
            ids = id_map.apply(ids) if id_map is not None else ids
            x = torch.tensor([ids], dtype=torch.int64)
            out.append(model(x, torch.ones_like(x)).numpy()[0])
    return np.stack(out)


def _compare(got: np.ndarray, ref: np.ndarray) -> dict:
    return {"max_abs_diff": float(np.abs(got - ref).max()), "argmax_agreement": float((got.argmax(-1) == ref.argmax(-1)).mean())}


def _rms(diff: np.ndarray) -> float:
    return float(np.sqrt(np.mean(np.square(diff, dtype=np.float64))))


def _bucket_of(n_tokens: int, buckets: Sequence[int]) -> int:
    return next((b for b in buckets if b >= n_tokens), buckets[-1])


def parity_texts(texts: Sequence[str], tokenizer, *, buckets: Sequence[int], samples: int,
                 per_bucket: int = PARITY_PER_BUCKET) -> list[str]:
    """The sentences a parity check runs: every bucket method gets some.

    The first ``samples`` of ``texts`` (real sentences: the full check), then,
    for each bucket in ``buckets`` that none of them reaches, up to
    ``per_bucket`` sentences of that bucket's length: real ones when ``texts``
    has them, else real sentences joined word by word until they are longer
    than the bucket below. Real text is short (SST-2, Banking77: mostly under
    32 tokens), so without this a broken 128-token method would pass.
    """
    from edgenlp.models.tokenizer import token_ids

    buckets = sorted(buckets)
    texts = [t for t in texts if t.strip()] or list(FALLBACK_SENTENCES)
    lengths = [len(x) for x in token_ids(tokenizer, texts, max_len=buckets[-1] + 2)]
    chosen = list(texts[:samples])
    have = {_bucket_of(n, buckets) for n in lengths[:samples]}
    words = " ".join(texts).split() or ["ok"]
    for i, b in enumerate(buckets):
        if b in have:
            continue
        lo = buckets[i - 1] if i else 0
        real = [t for t, n in zip(texts[samples:], lengths[samples:]) if _bucket_of(n, buckets) == b][:per_bucket]
        chosen += real
        for k in range(per_bucket - len(real)):
            start = (k * 97) % len(words)  # a different stretch of real words for each
            ws = (words[start:] + words[:start]) * (2 + (b + 2) // len(words))
            chosen.append(_join_past(ws, lo, tokenizer, max_len=b + 2))
    return chosen


def _join_past(words: Sequence[str], n_tokens: int, tokenizer, *, max_len: int) -> str:
    """The fewest leading ``words`` whose token ids (with [CLS]/[SEP]) are more than ``n_tokens``."""
    from edgenlp.models.tokenizer import token_ids

    lo, hi = 1, len(words)
    while lo < hi:
        mid = (lo + hi) // 2
        if len(token_ids(tokenizer, [" ".join(words[:mid])], max_len=max_len)[0]) > n_tokens:
            hi = mid
        else:
            lo = mid + 1
    return " ".join(words[:lo])


def check_parity(
    bundle_dir: Path,
    model,
    policy,
    *,
    formats: Sequence[str],
    texts: Sequence[str],
    tokenizer,
    max_len: int,
    tolerance: float | None = None,
    runner_factory: Callable[..., "object"] | None = None,
    id_map=None,
    buckets: Sequence[int] | None = None,
    timings: dict | None = None,
) -> dict:
    """Parity of each lowered format against the policy's eager reference, through real runners.

    Returns ``{runtime: {policy, max_abs_diff, tolerance, bound, samples,
    argmax_agreement, passed[, fp32][, per_bucket]}}``: the lowering error
    against ``policy.reference_model(model)``, gated by the tolerance
    :meth:`edgenlp.recipe.ParityPolicy.bound` gives (``bound`` records which
    term set it and why), and, when ``policy.compare_fp32``, the difference to
    the unmodified fp32 model under ``fp32`` (reported, not gated): for a
    quantized model the first is the lowering error, the second the
    quantization error. With ``policy.rounding_reference`` the reference's own
    activation-rounding error is measured on the same sentences
    (``activation_rounding_error``). ``buckets`` (ExecuTorch) adds the max
    |diff| per bucket method. ``id_map`` remaps token ids of a trimmed
    vocabulary. ``timings`` (a dict) receives the seconds of each part.
    """
    from edgenlp.bundle import FORMAT_RUNTIME
    from edgenlp.models.tokenizer import token_ids
    from edgenlp.run.base import get_runner

    timings = timings if timings is not None else {}
    make_runner = runner_factory or get_runner
    t0 = time.perf_counter()
    ref = _eager_reference(policy.reference_model(model), tokenizer, texts, max_len, id_map=id_map)
    fp32 = _eager_reference(policy.fp32_model(model), tokenizer, texts, max_len, id_map=id_map) if policy.compare_fp32 else None
    rounding = (_eager_reference(policy.rounding_reference(model), tokenizer, texts, max_len, id_map=id_map)
                if policy.rounding_reference is not None else None)
    timings["parity_reference"] = time.perf_counter() - t0
    quant_error = float(np.abs(ref - fp32).max()) if fp32 is not None else None
    rounding_error = float(np.abs(ref - rounding).max()) if rounding is not None else None
    rounding_rms = _rms(ref - rounding) if rounding is not None else None
    lengths = [len(x) for x in token_ids(tokenizer, texts, max_len=max_len)]
    out = {}
    for fmt in formats:
        runtime = FORMAT_RUNTIME[fmt]
        t0 = time.perf_counter()
        with make_runner(bundle_dir, runtime=runtime) as runner:
            got = runner.predict_logits(texts)
        p = {"policy": policy.name, **_compare(got, ref), "samples": len(texts)}
        if fp32 is not None:
            p["fp32"] = _compare(got, fp32)
        if tolerance is not None:
            bound = {"tolerance": float(tolerance), "applied": "user", "why": "--tolerance given", "terms": {}}
        else:
            bound = policy.bound(runtime, reference_scale=np.abs(ref).max(), quant_error=quant_error,
                                 rounding_error=rounding_error, rounding_rms=rounding_rms)
        p["tolerance"] = bound["tolerance"]
        p["bound"] = bound
        if quant_error is not None:
            p["reference_vs_fp32"] = quant_error
        if rounding_error is not None:
            p["activation_rounding_error"] = rounding_error
            p["activation_rounding_rms"] = rounding_rms
        p["rms_diff"] = _rms(got - ref)
        if runtime == "executorch":
            from edgenlp.export.executorch import xnnpack_kernel_family

            p["kernel_family"] = xnnpack_kernel_family()
        if buckets and runtime == "executorch":
            per = {}
            for b in sorted(buckets):
                rows = [i for i, n in enumerate(lengths) if _bucket_of(n, sorted(buckets)) == b]
                if rows:
                    per[str(b)] = {"samples": len(rows), "max_abs_diff": float(np.abs(got[rows] - ref[rows]).max())}
            p["per_bucket"] = per
        p["passed"] = bool(p["max_abs_diff"] <= p["tolerance"]
                           and ("rms_limit" not in bound or p["rms_diff"] <= bound["rms_limit"]))
        p["seconds"] = round(time.perf_counter() - t0, 3)
        timings[f"parity_{runtime}"] = p["seconds"]
        out[runtime] = p
        log.info("parity %s (%s): max |diff| %.2e over %d sentences (tolerance %.2e: %s)", runtime, policy.name,
                 p["max_abs_diff"], len(texts), p["tolerance"], bound["applied"])
    return out


def _segment_failure(runtime: str, p: dict) -> str:
    """One clause of the parity error for a runtime's segments."""
    out = [f"{runtime} segments exit logits max |diff| {p['exit_logits_max_abs_diff']:.2e} (limit {p['tolerance']:.2e})"]
    if "exit_logits_rms_diff" in p:
        out.append(f"exit logits RMS {p['exit_logits_rms_diff']:.2e} (limit {p['exit_bound']['rms_limit']:.2e})")
    if "importance_tolerance" in p:
        out.append(f"importance max |diff| {p['importance_max_abs_diff']:.2e} (limit {p['importance_tolerance']:.2e})")
    if "importance_rms_diff" in p:
        out.append(f"importance RMS {p['importance_rms_diff']:.2e} (limit {p['importance_bound']['rms_limit']:.2e})")
    return ", ".join(out)


def _failure(runtime: str, p: dict) -> str:
    """One clause of the parity error: which limit a runtime's logits broke, and by how much."""
    out = []
    if p["max_abs_diff"] > p["tolerance"]:
        out.append(f"max |logit diff| {p['max_abs_diff']:.3g} > {p['tolerance']:.3g} ({p['bound']['applied']} bound)")
    if "rms_limit" in p["bound"] and p["rms_diff"] > p["bound"]["rms_limit"]:
        out.append(f"RMS |logit diff| {p['rms_diff']:.3g} > {p['bound']['rms_limit']:.3g} (activation-rounding RMS bound)")
    return f"{runtime} {' and '.join(out)} ({p['policy']})"


def check_lowered_linears(methods: Sequence[dict], bits: Mapping[str, int]) -> list[str]:
    """Problems with the linears each lowered method delegates, against the quantization's per-linear bits.

    ``methods`` are the manifest's ``artifacts.pte.methods`` (their
    ``delegated_linears`` count linears by weight precision, read from the
    lowered graph). A linear the quantization made int8 that lowered as fp32
    (or the reverse) is a wrong lowering however close its logits come: an
    fp32 program sits within the quantization error of the reference.
    """
    want: dict[str, int] = {}
    for b in bits.values():
        key = "fp32" if b == 32 else f"int{b}"
        want[key] = want.get(key, 0) + 1
    return [f"{m['name']} delegates linears {m.get('delegated_linears')}, the quantization made {want}"
            for m in methods if m.get("delegated_linears") != want]


def _quantization_entry(quant) -> dict:
    """The manifest's ``quantization`` key for a quantized model: what the runtimes need without parsing the recipe."""
    c = quant.config
    return {
        "scheme": c.scheme,
        "linears": dict(quant.bits),
        "group_size": c.group_size,
        "activations": "int8 dynamic per token (asymmetric)",
        "weights": {"8": "int8 symmetric per output channel", "4": f"int4 symmetric per group of {c.group_size}"},
        "embeddings": c.embeddings,
        "vocab_map": VOCAB_MAP_FILE if quant.remap is not None else None,
        "kept_tokens": len(quant.remap) if quant.remap is not None else None,
        "fallbacks": list(quant.fallbacks),
        "predicted_weight_bytes": quant.weight_bytes,
    }


def _onnx_word_table(data: bytes, model, quant) -> bytes:
    """The ONNX model with the quantized model's own per-row word table (:func:`quantize_word_table`)."""
    from edgenlp.export.onnx_quant import quantize_word_table
    from edgenlp.quantize.schemes import WORD_EMBEDDING

    weight = model.get_submodule(WORD_EMBEDDING).weight
    source = quant.source.get_submodule(WORD_EMBEDDING).weight
    parts = {name: getattr(weight, name, None) for name in ("qdata", "scale", "zero_point")}
    if any(v is None for v in parts.values()):
        raise ParityError(f"export: the quantized word table is a {type(weight).__name__}, not per-row integers")
    return quantize_word_table(data, source.detach().numpy(), parts["qdata"].detach().numpy(),
                               parts["scale"].detach().float().numpy().reshape(-1),
                               parts["zero_point"].detach().float().numpy().reshape(-1),
                               bits=8 if quant.config.embeddings == "int8" else 4)


def _sparse_rounding(policy, ops: Mapping[str, dict]):
    """The parity policy widened for int8 sparse ops whose kernel rounds activations more coarsely than the reference.

    The AVX2 int8 kernel quantizes activations to 7 bits (``qmax`` 127; its
    u8 x s8 pair sums would saturate int16 at 8), a rounding step 255 / 127
    times the reference's. Two independent roundings land sqrt(1 + r^2)
    times the reference's own rounding error apart instead of sqrt(2), so the
    rounding factors of ExecuTorch's bound grow by sqrt(1 + r^2) / sqrt(2)
    (1.58 at 7 bits). Other ISAs round at 8 bits: the policy is unchanged.
    """
    from dataclasses import replace as _replace

    from edgenlp.run.executorch import sparse_act_qmax

    if policy.rounding_factor is None or not any(r.get("op") == "edgenlp::sparse_linear_qd8" for r in ops.values()):
        return policy
    qmax = sparse_act_qmax()
    if qmax is None or qmax >= 255:
        return policy
    r = 255.0 / qmax
    scale = math.sqrt(1.0 + r * r) / math.sqrt(2.0)
    factor = dict(policy.runtime_rounding_factor).get("executorch", policy.rounding_factor) * scale
    note = (f"x{scale:.2f} for the sparse int8 ops' {qmax}-level activations "
            f"(sqrt(1 + {r:.2f}^2) / sqrt(2))")
    return _replace(policy, runtime_rounding_factor=(*[(k, v) for k, v in policy.runtime_rounding_factor
                                                       if k != "executorch"], ("executorch", factor)),
                    rms_factor=None if policy.rms_factor is None else policy.rms_factor * scale,
                    rounding_note="; ".join(filter(None, [policy.rounding_note, note])))


def _sparse_entry(plan, ops: Mapping[str, dict] | None, formats) -> dict:
    """The manifest's ``sparse`` key: the block pattern and which linears run edgenlp's sparse ops in model.pte."""
    ops = dict(ops or {})
    used = sorted({r["op"] for r in ops.values() if r.get("op")})
    return {"block": plan.block, "linears": ops, "ops": used,
            # the runtimes load libedgenlp_ops.so (runtime/ops) for these; libedgenlp links it
            "ops_library": "libedgenlp_ops.so" if used else None,
            **({"onnx": "dense: ONNX Runtime has no block-sparse kernel, model.onnx holds the zeros densely"}
               if "onnx" in formats else {})}


def export_bundle(
    model,
    info,
    out_dir: str | Path,
    *,
    config: ExportConfig = ExportConfig(),
    task=None,
    sample_texts: Sequence[str] | None = None,
    recipe: Sequence[Step] = (),
    runner_factory: Callable[..., "object"] | None = None,
    annotations: Mapping[str, Any] | None = None,
) -> Bundle:
    """Lower ``model`` to the configured formats and write a verified bundle at ``out_dir``.

    The bundle is assembled in a temporary directory, checked for parity on real
    sentences (dev split of ``task`` when given) with the parity policy of the
    model's recipe (``info.recipe`` + ``recipe``; fp32 against eager PyTorch
    unless a step defines another), and renamed into place only when every
    format passes. ``runner_factory(path, runtime=...)`` builds the runners the
    parity check uses (default :func:`edgenlp.run.base.get_runner`).
    ``annotations`` adds top-level manifest keys that describe how the bundle
    was made (``edgenlp compress`` records the target and budgets); they may
    not replace the format's own keys. Raises
    :class:`ParityError` when a format exceeds the tolerance and
    :class:`EdgeNLPError` when the model cannot take ``config.max_seq_len``.
    """
    from edgenlp.models.tokenizer import build_tokenizer

    model = model.eval()
    if model.shape.max_positions < config.max_seq_len:
        raise EdgeNLPError(f"--seq-len {config.max_seq_len} exceeds the model's {model.shape.max_positions} positions")
    tokenizer = build_tokenizer(info.vocab_file, info.tokenizer)
    quant = getattr(model, "quantization", None)  # set by edgenlp.quantize.api.quantize_model
    if any(step.type == "quantize" for step in recipe):
        raise ValueError("export lowers the model it is given: quantize it first (edgenlp.quantize.api.quantize_model), "
                         "not through a recipe step")
    steps = (*info.recipe, *recipe)
    # dynamic models (edgenlp.dynamic): the static program plus segments, see edgenlp.export.segments
    from edgenlp.export import segments as seg

    model = seg.as_dynamic(model, info, steps)
    dynamic, dpte, donnx = seg.is_dynamic(model), None, None
    fp32_model = quant.source if quant is not None else model
    if dynamic and quant is not None:
        fp32_model = model.with_base(quant.source)
        model = seg.with_quantized_exits(model, quant)  # fp32_model keeps the fp32 heads: ONNX quantizes its own
    policy = parity_policy(steps)
    plan = None if dynamic else sparse_plan(steps)
    sparse_ops: dict[str, dict] | None = None
    pool = list(sample_texts or (task.dev.texts[:PARITY_POOL] if task else FALLBACK_SENTENCES))
    pte_buckets = config.buckets or seg.default_buckets(model, config.max_seq_len)
    buckets = pte_buckets if "pte" in config.formats else (config.max_seq_len,)
    texts = parity_texts(pool, tokenizer, buckets=buckets, samples=config.parity_samples)
    seconds: dict[str, float] = {}
    artifacts: dict[str, dict] = {}
    out_dir = Path(out_dir)
    stages: dict[str, float] = {"quantize": quant.seconds} if quant is not None else {}
    cpu0, wall0 = time.process_time(), time.perf_counter()
    with atomic_dir(out_dir) as tmp:
        if "pte" in config.formats:
            from edgenlp.export.executorch import to_pte

            log.info("lowering to ExecuTorch (buckets %s)", pte_buckets)
            if dynamic:
                dpte = seg.to_pte_dynamic(model, buckets=pte_buckets, processes=config.lower_processes)
                res = dpte.static
            else:
                pte_model = model
                if plan is not None:  # block-sparse linears run edgenlp's sparse ops (edgenlp.sparse)
                    pte_model, sparse_ops = to_sparse_ops(model, plan)
                    policy = _sparse_rounding(policy, sparse_ops)
                res = to_pte(pte_model, buckets=pte_buckets, processes=config.lower_processes)
            (tmp / "model.pte").write_bytes(res.buffer)
            artifacts["pte"] = {"file": "model.pte", **res.manifest_entry()}
            seconds["pte"] = res.seconds
            stages.update({f"pte_{k}": v for k, v in res.stages.items()})
            if quant is not None:
                swapped = {n for n, r in (sparse_ops or {}).items() if r.get("op")}
                wrong = check_lowered_linears(artifacts["pte"]["methods"],
                                              {n: b for n, b in quant.bits.items() if n not in swapped})
                if wrong:
                    raise ParityError(f"export: the lowered program does not hold the quantized linears ({wrong[0]}); "
                                      f"nothing written to {out_dir}")
        if "onnx" in config.formats:
            from edgenlp.export.onnx import to_onnx

            log.info("exporting to ONNX")
            # model.onnx is the static program: the base model's graph, so its linears keep their names (the
            # quantizer finds them by name; the segments below carry the exits)
            res = to_onnx(fp32_model.base if dynamic else fp32_model, max_seq_len=config.max_seq_len)
            word_table = quant is not None and quant.config.embeddings is not None  # the quantized model's own table
            data = res.data
            stages["onnx_export"] = res.seconds
            if quant is not None:
                from edgenlp.export.onnx_quant import quantize_onnx

                log.info("quantizing the ONNX model with ONNX Runtime's tools")
                t0 = time.perf_counter()
                data = quantize_onnx(data, quant.bits, group_size=quant.config.group_size)
                if word_table:
                    data = _onnx_word_table(data, model.base if dynamic else model, quant)
                stages["onnx_quantize"] = time.perf_counter() - t0
            artifacts["onnx"] = {"file": "model.onnx", **res.manifest_entry()}
            if dynamic:
                from edgenlp.export.onnx import share_weights

                files, donnx = seg.to_onnx_segments(fp32_model, max_seq_len=config.max_seq_len, quant=quant)
                if word_table:  # the embedding segment's table too
                    files[seg.EMBED_ONNX] = _onnx_word_table(files[seg.EMBED_ONNX], model.base, quant)
                # the static program and the segments hold the same weights: one copy for all of them
                artifacts["onnx"]["shared_weights"] = share_weights(tmp, {"model.onnx": data, **files}).manifest_entry()
            else:
                (tmp / "model.onnx").write_bytes(data)
            seconds["onnx"] = res.seconds + stages.get("onnx_quantize", 0.0)
        (tmp / "vocab.txt").write_bytes(Path(info.vocab_file).read_bytes())
        (tmp / "labels.json").write_text(json.dumps(list(model.labels), ensure_ascii=False) + "\n")
        tok_settings = {**info.tokenizer, "vocab": "vocab.txt", "type": "wordpiece"}
        vocab_map = VocabMap.from_remap(quant.remap) if quant is not None and quant.remap is not None else None
        if vocab_map is not None:
            vocab_map.save(tmp / VOCAB_MAP_FILE)
            tok_settings["id_map"] = VOCAB_MAP_FILE
            tok_settings["vocab_map"] = VOCAB_MAP_FILE  # the key the native runtime reads (same file)
        manifest = {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "edgenlp_version": __version__,
            "model": {**info.to_dict(), "shape": model.shape.to_dict(), "params": sum(p.numel() for p in fp32_model.parameters())},
            "task": task.to_dict() if task is not None else None,
            "labels": list(model.labels),
            "tokenizer": tok_settings,
            "max_seq_len": config.max_seq_len,
            # Per call: ExecuTorch methods take batch 1; ONNX also takes any batch (artifacts.onnx.dynamic_axes).
            "inputs": [
                {"name": "input_ids", "dtype": "int64", "shape": [1, "seq"]},
                {"name": "attention_mask", "dtype": "int64", "shape": [1, "seq"]},
            ],
            "outputs": [{"name": "logits", "dtype": "float32", "shape": [1, model.num_labels]}],
            "artifacts": artifacts,
            "applied": recipe_to_list((*steps, Step("export", config))),
            **({"quantization": _quantization_entry(quant)} if quant is not None else {}),
            **({"dynamic": seg.manifest_entry(model, buckets=pte_buckets, pte=dpte, onnx=donnx)} if dynamic else {}),
            **({"sparse": _sparse_entry(plan, sparse_ops, config.formats)} if plan is not None else {}),
            "parity": {},
            "export": {"config": config.to_dict(), "seconds": {k: round(v, 2) for k, v in seconds.items()},
                       "environment": environment()},
        }
        clash = sorted(set(annotations or {}) & set(manifest))
        if clash:
            raise ValueError(f"annotations may not replace manifest keys {clash}")
        manifest.update(annotations or {})
        finalize_manifest(tmp, manifest)

        # Parity through the real runtimes, on the bundle as written.
        manifest["parity"] = check_parity(tmp, model, policy, formats=config.formats, texts=texts, tokenizer=tokenizer,
                                          max_len=config.max_seq_len, tolerance=config.parity_tolerance,
                                          runner_factory=runner_factory or (seg.static_runner if dynamic else None),
                                          id_map=vocab_map,
                                          buckets=pte_buckets if "pte" in config.formats else None,
                                          timings=stages)
        failures = [_failure(rt, p) for rt, p in manifest["parity"].items() if not p["passed"]]
        if dynamic:
            # a quantized model's exit logits get their own rounding bound, unless --tolerance fixed the limit
            unrounded = (policy.rounding_reference(model)
                         if policy.rounding_reference is not None and config.parity_tolerance is None else None)
            manifest["dynamic"]["parity"] = seg.check_segment_parity(
                tmp, policy.reference_model(model), formats=config.formats, texts=texts, tokenizer=tokenizer,
                max_len=config.max_seq_len, tolerances={rt: p["tolerance"] for rt, p in manifest["parity"].items()},
                id_map=vocab_map, policy=policy, rounding_model=unrounded)
            failures += [_segment_failure(rt, p) for rt, p in manifest["dynamic"]["parity"].items() if not p["passed"]]
        if failures:
            raise ParityError(f"export parity failed ({'; '.join(failures)}); nothing written to {out_dir}")
        stages["total"] = time.perf_counter() - wall0
        manifest["export"]["stages"] = {k: round(v, 3) for k, v in stages.items()}
        manifest["export"]["cpu_seconds"] = round(time.process_time() - cpu0, 2)
        finalize_manifest(tmp, manifest)
    return Bundle.open(out_dir)

