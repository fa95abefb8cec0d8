"""The accuracy guard: model -> quantized, verified bundle, with mixed precision (``edgenlp quantize``).

>>> from edgenlp.compress.guard import quantize_bundle                          # doctest: +SKIP
>>> res = quantize_bundle(model, info, "out/q", QuantizeConfig(scheme="int8", embeddings="int8", max_drop=1.0), task=data)
>>> res.config.layer_bits[:2], res.report["guard"]["final_drop"]

Quantizing is a model transform (:func:`edgenlp.quantize.api.quantize_model`)
and lowering knows nothing of it (:func:`edgenlp.export.api.export_bundle`);
the guard, which must lower and evaluate, lives above both.

1. ``scheme="mixed"`` without explicit ``layer_bits``: per-linear sensitivity on
   calibration sentences from the training split, then bits per linear
   (fp32 / int8 / int4) meeting ``size_mb`` with the least predicted loss
   (:mod:`edgenlp.quantize.sensitivity`). Even all-int4 over budget: error, nothing written.
2. Quantize (:func:`edgenlp.quantize.api.quantize_model`), then export
   (:func:`edgenlp.export.api.export_bundle`): lowered and parity-checked. A
   model with early exits gets its exit threshold calibrated again on the
   quantized model first (:func:`exits_calibrated`).
3. Accuracy guard (``max_drop``): dev accuracy through the lowered ExecuTorch
   bundle vs the fp32 eager model; above the limit, the most sensitive
   quantized linears move one precision up (1, 2, 4, ... at a time) and the
   bundle is rebuilt, within ``size_mb``. If no move is left: error, nothing written.

The bundle gets ``quantize.json`` (this report) and the final per-layer bits in
its recipe.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from edgenlp.errors import EdgeNLPError
from edgenlp.quantize.config import QuantizeConfig
from edgenlp.quantize.sensitivity import QuantizeError

log = logging.getLogger(__name__)

CALIBRATION_SENTENCES = 64
REPORT = "quantize.json"


@dataclass
class QuantizeResult:
    bundle: object  # edgenlp.bundle.Bundle
    config: QuantizeConfig  # final, every linear listed
    report: dict


def _fp32_accuracy(model, tokenizer, split, *, max_len: int) -> float:
    import numpy as np
    import torch

    from edgenlp.metrics import accuracy
    from edgenlp.models.tokenizer import encode

    preds = []
    with torch.no_grad():
        for i in range(0, len(split), 64):
            ids, mask = encode(tokenizer, split.texts[i : i + 64], max_len=max_len)
            preds.append(model(torch.from_numpy(ids), torch.from_numpy(mask)).argmax(-1).numpy())
    return float(accuracy(np.concatenate(preds).tolist(), split.label_ids(model.labels)))


def _bundle_accuracy(path: Path, split) -> float:
    from edgenlp.compress.measured import bundle_accuracy

    return float(bundle_accuracy(path, split)["accuracy"])


def exits_calibrated(qmodel, qinfo, info, task):
    """``qinfo`` with the exit threshold of a dynamic model calibrated again on ``qmodel`` (its ``quantize`` step's
    ``exits`` result, which export reads), as ``exit_calibration`` asks; ``qinfo`` itself otherwise.

    The fp32 threshold does not carry over: int8 activations move the early exits' logits, so the quantized model
    exits on other sentences (``tools/bench/dynamic_calibration.py`` measures what that costs).
    """
    *rest, step = qinfo.recipe
    if step.type != "quantize" or step.config.exit_calibration != "quantized" or not any(
            s.type == "dynamic" for s in info.recipe):
        return qinfo
    from edgenlp.dynamic.api import recalibrate_exits
    from edgenlp.quantize.schemes import quantize_exit_heads
    from edgenlp.recipe import Step

    remap = qmodel.quantization.remap
    heads = quantize_exit_heads if step.config.exit_heads == "int8" else None  # calibrated on the heads that ship
    _, result = recalibrate_exits(info.source, qmodel, info, task, id_map=remap.apply if remap is not None else None,
                                  heads=heads)
    return dataclasses.replace(qinfo, recipe=(*rest, Step(step.type, step.config, {**step.result, "exits": result})))


def quantize_bundle(model, info, out_dir, config: QuantizeConfig, *, task, export_config=None,
                    guard_limit: int | None = None, progress: bool = True, annotations: dict | None = None) -> QuantizeResult:
    """Quantize ``model`` into a verified bundle at ``out_dir`` (see the module docstring).

    ``guard_limit`` caps the dev sentences the guard evaluates (default: the whole dev split);
    ``annotations`` are extra manifest keys (see :func:`edgenlp.export.api.export_bundle`).
    Raises :class:`QuantizeError` when ``size_mb`` or ``max_drop`` cannot be met; nothing is written then.
    """
    from rich.progress import Progress

    from edgenlp.export.api import ExportConfig, export_bundle
    from edgenlp.models.tokenizer import build_tokenizer
    from edgenlp.bundle import Bundle, finalize_manifest
    from edgenlp.quantize.api import quantize_model, trimmed
    from edgenlp.quantize.schemes import resolve_bits, weight_bytes
    from edgenlp.quantize.sensitivity import STEPS, allocate_bits, calibration_batch, layer_sensitivity

    if task is None:
        raise EdgeNLPError("quantize needs --task (calibration sentences, vocabulary trimming, the accuracy guard)")
    export_config = export_config or ExportConfig()
    model = model.eval()
    tokenizer = build_tokenizer(info.vocab_file, info.tokenizer)
    out_dir = Path(out_dir)
    report: dict = {"config": config.to_dict()}

    # Work on the model the bundle will hold (trimmed when asked) so names, sizes and sensitivity agree.
    work_model, remap = trimmed(model, config, tokenizer=tokenizer, task=task)
    try:
        plan_bits, fallbacks = resolve_bits(work_model, config)
    except ValueError as exc:
        raise EdgeNLPError(str(exc)) from None
    calib = calibration_batch(tokenizer, task.train.sample(CALIBRATION_SENTENCES, seed=0).texts,
                              max_len=export_config.max_seq_len, id_map=remap)
    budget = int(config.size_mb * 1e6) if config.size_mb is not None else None
    sensitivity = None
    needs_sens = (config.scheme == "mixed" and not config.layer_bits) or config.max_drop is not None
    if needs_sens:
        from edgenlp.quantize.schemes import linear_names

        with Progress(disable=not progress, transient=True) as bar:
            t = bar.add_task("sensitivity per linear", total=len(linear_names(work_model)))
            sensitivity = layer_sensitivity(work_model, config, calib, progress=lambda: bar.advance(t))
        report["sensitivity_kl"] = {n: {str(b): v for b, v in s.items()} for n, s in sensitivity.items()}
    if config.scheme == "mixed" and not config.layer_bits:
        bits = allocate_bits(work_model, config, sensitivity, budget_bytes=budget)
    else:
        bits = dict(plan_bits)
    size = weight_bytes(work_model, bits, group_size=config.group_size, embeddings=config.embeddings)
    if budget is not None and size > budget:
        raise QuantizeError(f"--size-mb {config.size_mb} cannot be met: {config.scheme} weights take {size / 1e6:.2f} MB")

    dev = task.dev.head(guard_limit)
    fp32_acc = _fp32_accuracy(model, tokenizer, dev, max_len=export_config.max_seq_len) if config.max_drop is not None else None
    history = []
    work = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.quantize-", dir=out_dir.parent if out_dir.parent.exists() else None))
    try:
        attempt, raise_count = 0, 1
        while True:
            cfg = dataclasses.replace(config, layer_bits=tuple(bits.items()))
            path = work / f"attempt{attempt}"
            qmodel, qinfo = quantize_model(model, info, cfg, task=task, tokenizer=tokenizer)
            qinfo = exits_calibrated(qmodel, qinfo, info, task)
            bundle = export_bundle(qmodel, qinfo, path, config=export_config, task=task, annotations=annotations)
            entry = {"bits": dict(bits), "predicted_weight_bytes": weight_bytes(work_model, bits, group_size=config.group_size,
                                                                                  embeddings=config.embeddings),
                     "pte_bytes": bundle.manifest["sizes"].get("model.pte")}
            if config.max_drop is None:
                history.append(entry)
                break
            acc = _bundle_accuracy(path, dev)
            entry.update(accuracy=acc, drop_points=round(100 * (fp32_acc - acc), 3))
            history.append(entry)
            log.info("guard: attempt %d accuracy %.4f (fp32 %.4f), drop %.2f points", attempt, acc, fp32_acc, entry["drop_points"])
            if entry["drop_points"] <= config.max_drop:
                break
            # Move the most sensitive quantized linears one precision up, within the size budget.
            ranked = sorted((n for n, b in bits.items() if b in STEPS),
                            key=lambda n: -sensitivity[n].get(bits[n], 0.0))
            moved = 0
            for n in ranked:
                up = STEPS[bits[n]]
                trial = {**bits, n: up}
                if budget is not None and weight_bytes(work_model, trial, group_size=config.group_size,
                                                       embeddings=config.embeddings) > budget:
                    continue
                bits = trial
                moved += 1
                if moved >= raise_count:
                    break
            if not moved:
                raise QuantizeError(
                    f"accuracy guard: dev accuracy drops {entry['drop_points']:.2f} points (> --max-drop {config.max_drop}) "
                    f"and no linear can move to a higher precision{' within --size-mb' if budget else ''}; nothing written"
                )
            raise_count *= 2
            attempt += 1
        report.update(fp32_accuracy=fp32_acc, guard={"max_drop": config.max_drop, "attempts": history,
                                                     "final_drop": history[-1].get("drop_points")},
                      final_bits=dict(bits), fallbacks=list(fallbacks))
        # Record the guard in the bundle's recipe step and add quantize.json, then move into place.
        manifest = dict(bundle.manifest)
        for step in manifest["applied"]:
            if step["step"] == "quantize":
                step["result"].update(fp32_accuracy=fp32_acc, accuracy=history[-1].get("accuracy"),
                                      drop_points=history[-1].get("drop_points"), guard_attempts=len(history))
        (path / REPORT).write_text(json.dumps(report, indent=2) + "\n")
        finalize_manifest(path, manifest)
        from edgenlp.utils import atomic_dir

        with atomic_dir(out_dir) as tmp:
            tmp.rmdir()
            shutil.move(str(path), str(tmp))
        final = Bundle.open(out_dir)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return QuantizeResult(final, final.recipe[[s.type for s in final.recipe].index("quantize")].config, report)

