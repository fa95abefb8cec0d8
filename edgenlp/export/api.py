"""``export``: model -> bundle, with parity checked against eager PyTorch.

>>> from edgenlp.export.api import ExportConfig, export_bundle          # doctest: +SKIP
>>> bundle = export_bundle(model, info, "out/minilm-sst2", task=data,
...                        config=ExportConfig(formats=("pte", "onnx"), max_seq_len=128))
"""

from __future__ import annotations

import datetime as _dt
import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from edgenlp import __version__
from edgenlp.config import Config
from edgenlp.errors import EdgeNLPError, ParityError
from edgenlp.bundle import FORMAT, FORMAT_VERSION, FORMATS, VOCAB_MAP_FILE, Bundle, VocabMap, finalize_manifest
from edgenlp.recipe import Step, parity_policy, recipe_to_list
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

    formats: tuple[str, ...] = FORMATS
    max_seq_len: int = 128
    buckets: tuple[int, ...] | None = None  # ExecuTorch sequence buckets; default powers of two up to max
    parity_tolerance: float | None = None
    parity_samples: int = 32

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

    @property
    def resolved_buckets(self) -> tuple[int, ...]:
        from edgenlp.export.executorch import default_buckets

        return self.buckets or default_buckets(self.max_seq_len)


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
) -> dict:
    """Parity of each lowered format against the policy's eager reference, through real runners.

    Returns ``{runtime: {policy, max_abs_diff, tolerance, samples, argmax_agreement,
    passed[, fp32]}}``: the lowering error against ``policy.reference_model(model)``
    (gated by the tolerance) and, when ``policy.compare_fp32``, the difference to
    the unmodified fp32 model under ``fp32`` (reported, not gated): for a
    quantized model the first is the lowering error, the second the
    quantization error. ``id_map`` remaps token ids of a trimmed vocabulary.
    """
    from edgenlp.bundle import FORMAT_RUNTIME
    from edgenlp.run.base import get_runner

    make_runner = runner_factory or get_runner
    ref = _eager_reference(policy.reference_model(model), tokenizer, texts, max_len, id_map=id_map)
    fp32 = _eager_reference(policy.fp32_model(model), tokenizer, texts, max_len, id_map=id_map) if policy.compare_fp32 else None
    quant_error = float(np.abs(ref - fp32).max()) if fp32 is not None else None
    out = {}
    for fmt in formats:
        runtime = FORMAT_RUNTIME[fmt]
        t0 = time.perf_counter()
        with make_runner(bundle_dir, runtime=runtime) as runner:
            got = runner.predict_logits(texts)
        p = {"policy": policy.name, **_compare(got, ref), "samples": len(texts)}
        if fp32 is not None:
            p["fp32"] = _compare(got, fp32)
        tol = tolerance if tolerance is not None else policy.tolerance_for(
            runtime, reference_scale=np.abs(ref).max(), quant_error=quant_error)
        p["tolerance"] = tol
        if quant_error is not None:
            p["reference_vs_fp32"] = quant_error
        p["passed"] = p["max_abs_diff"] <= tol
        p["seconds"] = round(time.perf_counter() - t0, 3)
        out[runtime] = p
        log.info("parity %s (%s): max |diff| %.2e over %d sentences", runtime, policy.name, p["max_abs_diff"], len(texts))
    return out


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
    fp32_model = quant.source if quant is not None else model
    steps = (*info.recipe, *recipe)
    policy = parity_policy(steps)
    texts = list(sample_texts or (task.dev.texts[: config.parity_samples] if task else FALLBACK_SENTENCES))
    seconds: dict[str, float] = {}
    artifacts: dict[str, dict] = {}
    out_dir = Path(out_dir)
    with atomic_dir(out_dir) as tmp:
        if "pte" in config.formats:
            from edgenlp.export.executorch import to_pte

            log.info("lowering to ExecuTorch (buckets %s)", config.resolved_buckets)
            res = to_pte(model, buckets=config.resolved_buckets)
            (tmp / "model.pte").write_bytes(res.buffer)
            artifacts["pte"] = {"file": "model.pte", **res.manifest_entry()}
            seconds["pte"] = res.seconds
        if "onnx" in config.formats:
            from edgenlp.export.onnx import to_onnx

            log.info("exporting to ONNX")
            res = to_onnx(fp32_model, max_seq_len=config.max_seq_len)
            data = res.data
            if quant is not None:
                from edgenlp.export.onnx_quant import quantize_onnx

                log.info("quantizing the ONNX model with ONNX Runtime's tools")
                data = quantize_onnx(data, quant.bits, group_size=quant.config.group_size)
            (tmp / "model.onnx").write_bytes(data)
            artifacts["onnx"] = {"file": "model.onnx", **res.manifest_entry()}
            seconds["onnx"] = res.seconds
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
            "parity": {},
            "export": {"config": config.to_dict(), "seconds": {k: round(v, 2) for k, v in seconds.items()}, "environment": environment()},
        }
        clash = sorted(set(annotations or {}) & set(manifest))
        if clash:
            raise ValueError(f"annotations may not replace manifest keys {clash}")
        manifest.update(annotations or {})
        finalize_manifest(tmp, manifest)

        # Parity through the real runtimes, on the bundle as written.
        manifest["parity"] = check_parity(tmp, model, policy, formats=config.formats, texts=texts, tokenizer=tokenizer,
                                          max_len=config.max_seq_len, tolerance=config.parity_tolerance,
                                          runner_factory=runner_factory, id_map=vocab_map)
        failures = [f"{rt} max |logit diff| {p['max_abs_diff']:.2e} > {p['tolerance']:.0e} ({p['policy']})"
                    for rt, p in manifest["parity"].items() if not p["passed"]]
        if failures:
            raise ParityError(f"export parity failed ({'; '.join(failures)}); nothing written to {out_dir}")
        finalize_manifest(tmp, manifest)
    return Bundle.open(out_dir)

