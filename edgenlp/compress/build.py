"""Build a planned candidate: prune and recover (:func:`prune_candidate`), quantize and lower (:func:`export_candidate`).

Both are executor tasks (:mod:`edgenlp.executor`): paths and plain data in, a
folder written atomically and a JSON-able result out.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Mapping

log = logging.getLogger(__name__)


def quantize_config(candidate: Mapping[str, Any], *, num_layers: int):
    """The ``QuantizeConfig`` of a planned candidate, or ``None`` when it stays fp32 everywhere.

    ``int8``/``int4`` map to those schemes; ``mixed``, per-layer bits, or fp32
    linears with quantized embeddings / a trimmed vocabulary become explicit
    per-linear bits (:func:`edgenlp.targets.planner.quantize_layer_bits`).
    """
    bits = candidate.get("bits", "fp32")
    emb = candidate.get("embeddings")
    trim = bool(candidate.get("trim_vocab", False))
    if bits == "fp32" and emb is None and not trim:
        return None
    from edgenlp.quantize.config import QuantizeConfig
    from edgenlp.targets.planner import quantize_layer_bits

    if bits in ("int8", "int4"):
        return QuantizeConfig(scheme=bits, embeddings=emb, trim_vocab=trim)
    layer_bits = quantize_layer_bits({k: candidate[k] for k in ("prune_method", "sparsity", "bits", "embeddings", "trim_vocab")
                                      if k in candidate}, num_layers)
    return QuantizeConfig(scheme="mixed", layer_bits=layer_bits, embeddings=emb, trim_vocab=trim)


def build_bundle(model, info, out: Path, *, candidate: Mapping[str, Any], task, max_seq_len: int,
                 annotations: Mapping[str, Any] | None = None, progress: bool = False):
    """Quantize ``model`` as ``candidate`` says and export a verified bundle (both formats) to ``out``."""
    from edgenlp.export.api import ExportConfig, export_bundle

    config = ExportConfig(max_seq_len=max_seq_len)
    qcfg = quantize_config(candidate, num_layers=model.shape.num_layers)
    if qcfg is None:
        return export_bundle(model, info, out, config=config, task=task, annotations=dict(annotations or {}))
    from edgenlp.compress.guard import quantize_bundle

    return quantize_bundle(model, info, out, qcfg, task=task, export_config=config, progress=progress,
                    annotations=dict(annotations or {})).bundle


def export_candidate(model_dir: str, out: str, *, candidate: Mapping[str, Any], labels, task, max_seq_len: int,
                     annotations: Mapping[str, Any] | None = None, progress: bool = False) -> dict:
    """One candidate build as an executor task: load the model at ``model_dir``, build its bundle at ``out``.

    Arguments are paths and plain data, so the task runs in this process, in a
    pool worker or on a Ray node alike (:mod:`edgenlp.executor`). The bundle is
    written atomically; a worker that died in an earlier attempt left only a
    hidden ``.NAME.tmp-*`` beside ``out``, removed here before building again.
    Returns ``{"sizes", "parity", "pid"}`` (``pid``: the process that built it).
    """
    import os

    from edgenlp.models.registry import load_model

    dest = Path(out)
    _clear_stale(dest)
    model, info = load_model(model_dir, labels=list(labels))
    bundle = build_bundle(model, info, dest, candidate=candidate, task=task,
                          max_seq_len=min(max_seq_len, model.shape.max_positions), annotations=annotations,
                          progress=progress)
    return {"sizes": bundle.manifest.get("sizes", {}), "parity": bundle.manifest.get("parity", {}), "pid": os.getpid()}


def _clear_stale(dest: Path) -> None:
    """Remove what a worker that died building ``dest`` left beside it (hidden ``.NAME.tmp-*`` folders)."""
    import shutil

    if dest.parent.is_dir():
        for stale in dest.parent.glob(f".{dest.name}.tmp-*"):
            shutil.rmtree(stale, ignore_errors=True)


PRUNE_REPORT_KEYS = ("method", "target_sparsity", "achieved", "dev_before", "dev_after", "dev_pruned", "seconds", "shape")


def prune_candidate(model_dir: str, out: str, *, candidate: Mapping[str, Any], labels, task, prune_kwargs: Mapping[str, Any],
                    seq_len: int, seed: int, recovery: Mapping[str, Any] | None, dev_before: Mapping[str, Any] | None = None,
                    device: str = "cpu", progress: bool = False, sparsify: Mapping[str, Any] | None = None) -> dict:
    """One candidate's pruning (and recovery distillation) as an executor task: the pruned model directory at ``out``.

    ``prune_kwargs`` are the prune config knobs of the measured budget;
    ``recovery`` a :class:`~edgenlp.prune.config.DistillConfig` as a dict
    (``None``: the method distils by itself, or the plan does not prune).
    ``task`` is the tuning split (its dev is the validation split), so the
    report's ``dev_*`` are validation accuracies. ``sparsify`` (a
    :class:`~edgenlp.prune.config.SparsifyConfig` as a dict) then zeroes the
    candidate's ``block_sparsity`` of every encoder linear's blocks, distilling
    from the model at ``model_dir`` (an unpruned candidate starts from it as
    is). Returns the report's :data:`PRUNE_REPORT_KEYS` that it has (and
    ``sparsify``: the block pattern and its validation accuracy). Early exits
    go on afterwards, on the saved model (:func:`exits_candidate`), so a
    candidate and its twin with exits share one pruning.
    """
    from edgenlp.models.registry import load_model

    dest = Path(out)
    _clear_stale(dest)
    model, info = load_model(model_dir, labels=list(labels))
    method = candidate.get("prune_method")
    out: dict[str, Any] = {}
    res = None
    if method is not None:
        from edgenlp.prune import prune, prune_config

        pcfg = prune_config(method, target_sparsity=float(candidate["sparsity"]), seq_len=seq_len, seed=seed,
                            **dict(prune_kwargs))  # fmt: skip
        res = prune(model, info, task, pcfg, device=device, progress=progress, dev_before=dict(dev_before) if dev_before else None)
        if recovery is not None:
            from edgenlp.prune.config import DistillConfig
            from edgenlp.prune.recovery import recover

            res = recover(res, model, info, task, DistillConfig.from_dict(dict(recovery)), device=device, progress=progress)
        out = {k: res.report[k] for k in PRUNE_REPORT_KEYS if k in res.report}
    if sparsify is not None:
        from edgenlp.prune.config import SparsifyConfig
        from edgenlp.prune.sparsity import sparsify as run_sparsify

        student, student_info = (res.model, res.info) if res is not None else (model, info)
        res = run_sparsify(student, student_info, task, SparsifyConfig.from_dict(dict(sparsify)), teacher=model,
                           teacher_info=info, device=device, progress=progress)
        d = res.report["distill"]
        out["sparsify"] = {"block": res.report["block"], "mean_sparsity": res.report["mean_sparsity"],
                           "dev_before": d["dev_before"], "dev_after": d["dev_after"], "seconds": res.report["wall_s"]}
    if res is None:
        raise ValueError(f"candidate {dict(candidate)} neither prunes nor sparsifies")
    res.save(dest)
    return out


def exits_candidate(model_dir: str, out: str, *, labels, task, exits: Mapping[str, Any], device: str = "cpu",
                    progress: bool = False) -> dict:
    """Early exits on a built (pruned) candidate as an executor task: the dynamic model directory at ``out``.

    ``exits`` (a :class:`~edgenlp.dynamic.config.DynamicConfig` as a dict)
    trains and calibrates the exits as the exits stage did for the unpruned
    model; ``task`` is the tuning split. The backbone at ``model_dir`` is the
    static candidate's own, so the twin with exits costs only its exits'
    training. Returns ``{"exits": {threshold, validation_drop, mean_exit_layer,
    reach}}``.
    """
    from edgenlp.dynamic.api import make_dynamic
    from edgenlp.dynamic.config import DynamicConfig
    from edgenlp.models.registry import load_model

    dest = Path(out)
    _clear_stale(dest)
    model, info = load_model(model_dir, labels=list(labels))
    dyn = make_dynamic(model, info, task, DynamicConfig.from_dict(dict(exits)), device=device)
    dyn.save(dest)
    chosen = dyn.report["validation"]["chosen"]
    return {"exits": {"threshold": dyn.model.spec.threshold, "validation_drop": chosen["drop"],
                      "mean_exit_layer": chosen["mean_exit_layer"], "reach": chosen["reach"]}}
