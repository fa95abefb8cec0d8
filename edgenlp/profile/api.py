"""``profile()``: analytic counts plus measured latency per component, as JSON-ready documents.

See :mod:`edgenlp.profile` for the document schema.
"""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Iterator

import numpy as np

from edgenlp.config import knob
from edgenlp.errors import EdgeNLPError
from edgenlp.profile.analytic import AnalyticProfile, Counts, analyze
from edgenlp.profile.components import COMPONENTS, LinearPlan
from edgenlp.profile.measure import EagerMeasurer, Measurement, Measurer, MeasureSpec, ProfileTarget, median, p90

log = logging.getLogger(__name__)

SCHEMA = "edgenlp.profile/1"
OVERHEAD_ROW = "runtime_overhead"


def _executorch() -> Measurer:
    from edgenlp.profile.executorch import ExecuTorchMeasurer

    return ExecuTorchMeasurer()


def _onnx() -> Measurer:
    from edgenlp.profile.onnx import OnnxRuntimeMeasurer

    return OnnxRuntimeMeasurer()


def _native() -> Measurer:
    from edgenlp.profile.native import NativeMeasurer

    return NativeMeasurer()


MEASURERS: dict[str, Callable[[], Measurer]] = {"eager": EagerMeasurer, "executorch": _executorch, "onnx": _onnx, "native": _native}


def register_measurer(runtime: str, factory: Callable[[], Measurer]) -> None:
    """Plug a measurer in (a native runner, a remote board). ``factory()`` returns a :class:`Measurer`."""
    MEASURERS[runtime] = factory


def unregister_measurer(runtime: str) -> None:
    """Remove a measurer plugged in with :func:`register_measurer` (no error if absent)."""
    MEASURERS.pop(runtime, None)


@dataclass(frozen=True)
class ProfileConfig:
    """What to profile: lengths, batch, runtimes, thread counts, runs per measurement, per-layer rows."""

    seq_lens: tuple[int, ...] = knob((128,), help="Sequence lengths, comma-separated (e.g. 32,128,512).")
    batch: int = knob(1, help="Batch size.")
    runtimes: tuple[str, ...] = knob(("eager",), help="Runtimes, comma-separated: eager, executorch, onnx, native.")
    threads: tuple[int, ...] = knob((1,), help="Thread counts, comma-separated (e.g. 1,2).")
    runs: int = knob(30, help="Timed runs per measurement (median and p90 over these).")
    warmup: int = knob(3, help="Untimed warm-up runs per measurement.")
    per_layer: bool = knob(False, help="Also show and record rows per encoder layer.")

    def __post_init__(self) -> None:
        object.__setattr__(self, "seq_lens", tuple(int(s) for s in self.seq_lens))
        object.__setattr__(self, "threads", tuple(int(t) for t in self.threads))
        object.__setattr__(self, "runtimes", tuple(self.runtimes))
        if not self.seq_lens or any(s < 1 for s in self.seq_lens):
            raise ValueError(f"seq_lens must be positive integers, got {self.seq_lens}")
        if not self.threads or any(t < 1 for t in self.threads):
            raise ValueError(f"threads must be positive integers, got {self.threads}")
        if self.batch < 1:
            raise ValueError(f"batch must be >= 1, got {self.batch}")
        unknown = [r for r in self.runtimes if r not in MEASURERS]
        if unknown:
            raise ValueError(f"unknown runtime(s) {unknown}; choose from {sorted(MEASURERS)}")
        if len(set(self.runtimes)) != len(self.runtimes):
            raise ValueError(f"runtimes repeat: {self.runtimes}")
        if self.runs < 1 or self.warmup < 0:
            raise ValueError(f"runs must be >= 1 and warmup >= 0, got {self.runs}, {self.warmup}")

    def to_dict(self) -> dict:
        d = asdict(self)
        return {k: list(v) if isinstance(v, tuple) else v for k, v in d.items()}


# --------------------------------------------------------------------------- targets


def _bundle_model(bundle):
    """An :class:`EncoderClassifier` of the bundle's shape (for shapes and the plan; weights are not needed)."""
    import torch

    from edgenlp.models.encoder import EncoderClassifier, EncoderShape

    try:
        shape = EncoderShape.from_dict(bundle.manifest["model"]["shape"])
    except (KeyError, TypeError, ValueError) as exc:
        raise EdgeNLPError(f"{bundle.path}/manifest.json: model.shape is missing or invalid ({exc})") from exc
    with torch.device("meta"):
        model = EncoderClassifier(shape, len(bundle.labels), labels=bundle.labels)
    apply_weight_storage(model, bundle.recipe)
    apply_sparse_ops(model, bundle.manifest.get("sparse"))
    return model.eval()


def apply_sparse_ops(model, sparse: dict | None) -> None:
    """Count the linears that run edgenlp's block-sparse ops as the ops run them (the manifest's ``sparse`` key).

    Such a linear multiplies its kept blocks only (``flop_density``, read by
    :func:`edgenlp.profile.analytic.analyze`) and stores them packed: its
    parameters are the kept weights plus the bias, its bytes the packed
    arrays' (``packed_bytes``), its format ``sparse-<precision>``.
    """
    from edgenlp.profile.storage import WeightStorage

    modules = dict(model.named_modules())
    for name, rec in ((sparse or {}).get("linears") or {}).items():
        module = modules.get(name)
        if module is None or not rec.get("op"):
            continue
        density = 1.0 - float(rec["sparsity"])
        bias = module.bias.numel() if module.bias is not None else 0
        storage = WeightStorage(f"sparse-{rec['precision']}", round(module.weight.numel() * density) + bias,
                                int(rec["packed_bytes"]))
        module.flop_density = density
        module.weight_storage = lambda st=storage: st


def apply_weight_storage(model, recipe) -> None:
    """Mark how ``model``'s linears ship, from the recipe steps that define ``weight_storage()``.

    A step returns ``{module name: StorageMarker}``; ``"*"`` stands for every
    linear (encoder layers, pooler, classifier) and a named module overrides it.
    """
    from torch import nn

    from edgenlp.profile.storage import mark_storage
    from edgenlp.recipe import weight_storage

    markers = weight_storage(recipe)
    if not markers:
        return
    modules = dict(model.named_modules())
    unknown = sorted(set(markers) - set(modules) - {"*"})
    if unknown:
        raise EdgeNLPError(f"recipe marks weight storage of {unknown[0]!r}, which the model does not have")
    for name, module in modules.items():
        marker = markers.get(name, markers.get("*")) if isinstance(module, nn.Linear) else markers.get(name)
        if marker is not None:
            mark_storage(module, marker)


@contextlib.contextmanager
def open_target(spec: str | Path, *, labels: tuple[str, ...] | None = None, seq_lens: tuple[int, ...] = (),
                workdir: str | Path | None = None) -> Iterator[ProfileTarget]:
    """A :class:`ProfileTarget` for a model name/directory or a bundle directory.

    Lowered artifacts for a model go to ``workdir`` (a temporary directory,
    removed afterwards, when None).
    """
    path = Path(str(spec))
    with contextlib.ExitStack() as stack:
        if workdir is None:
            workdir = stack.enter_context(tempfile.TemporaryDirectory(prefix="edgenlp-profile-"))
        workdir = Path(workdir)
        workdir.mkdir(parents=True, exist_ok=True)
        if path.is_dir() and (path / "manifest.json").is_file():
            from edgenlp.bundle import Bundle

            bundle = Bundle.open(path)
            model = _bundle_model(bundle)
            target = ProfileTarget(
                name=str(bundle.manifest.get("model", {}).get("name", path.name)),
                plan=LinearPlan.from_model(model),
                vocab_size=model.shape.vocab_size,
                model=None,
                analysis_model=model,
                pte=bundle.artifact("pte") if "pte" in bundle.formats else None,
                onnx=bundle.artifact("onnx") if "onnx" in bundle.formats else None,
                workdir=workdir,
                seq_lens=tuple(seq_lens),
                pte_methods={m.seq_len: m.name for m in bundle.pte_methods},
                info={"source": str(path), "kind": "bundle", "applied": bundle.manifest.get("applied", []),
                      "max_seq_len": bundle.max_seq_len,
                      "artifact_bytes": {k: v for k, v in bundle.manifest.get("sizes", {}).items() if k.startswith("model.")}},
            )
            yield target
            return
        from edgenlp.models.registry import load_model

        model, info = load_model(spec, labels=labels)
        target = ProfileTarget(
            name=info.name, plan=LinearPlan.from_model(model), vocab_size=model.shape.vocab_size, model=model, analysis_model=model,
            workdir=workdir, seq_lens=tuple(seq_lens), info={"source": info.source, "kind": "model", "pretrained": info.pretrained},
        )  # fmt: skip
        yield target


# --------------------------------------------------------------------------- documents


def _share(part: float, whole: float) -> float:
    return round(100.0 * part / whole, 2) if whole else 0.0


def _counts_row(c: Counts, total: Counts) -> dict:
    d = c.to_dict()
    d["share_pct"] = {k: _share(d[k], getattr(total, k)) for k in ("params", "flops", "weight_bytes", "activation_bytes")}
    return d


def build_document(target: ProfileTarget, analytic: AnalyticProfile, measurements: dict[str, Measurement],
                   config: ProfileConfig, threads: int) -> dict:
    """One profile document for one (sequence length, threads); see :mod:`edgenlp.profile` for the schema."""
    from edgenlp.utils import environment

    total = analytic.total
    e2e = {rt: median(m.end_to_end_ms) for rt, m in measurements.items()}
    comp_runs = {rt: m.component_runs() for rt, m in measurements.items()}
    comp_lat = {rt: m.component_latency() for rt, m in measurements.items()}
    rows = []
    for name in COMPONENTS:
        row = {"name": name, **_counts_row(analytic.components[name], total)}
        row["latency_ms"] = {rt: round(comp_lat[rt][name], 4) for rt in measurements}
        row["latency_median_ms"] = {rt: round(median(comp_runs[rt][name]), 4) for rt in measurements}
        row["latency_p90_ms"] = {rt: round(p90(comp_runs[rt][name]), 4) for rt in measurements}
        row["share_pct"]["latency"] = {rt: _share(row["latency_ms"][rt], e2e[rt]) for rt in measurements}
        rows.append(row)
    comp_sum = {rt: sum(r["latency_ms"][rt] for r in rows) for rt in measurements}
    tot = total.to_dict()
    tot.update(
        latency_ms={rt: round(e2e[rt], 4) for rt in measurements},
        latency_p90_ms={rt: round(p90(m.end_to_end_ms), 4) for rt, m in measurements.items()},
        latency_min_ms={rt: round(min(m.end_to_end_ms), 4) for rt, m in measurements.items()},  # least disturbed run
        components_sum_ms={rt: round(v, 4) for rt, v in comp_sum.items()},
        unattributed_ms={rt: round(e2e[rt] - comp_sum[rt], 4) for rt in measurements},
        # over the same middle-half runs that the components average (component_latency): the same statistic on
        # the same runs, so one disturbed run out of three cannot split the two apart
        profiled_total_ms={rt: round(float(np.mean(np.asarray(m.profiled_total_ms, dtype=float)[m.central_runs()])), 4)
                           for rt, m in measurements.items()},
    )
    doc = {
        "schema": SCHEMA,
        "model": target.name,
        "source": target.info.get("source"),
        "kind": target.info.get("kind"),
        "seq_len": analytic.seq_len,
        "batch": analytic.batch,
        "threads": threads,
        "runs": config.runs,
        "warmup": config.warmup,
        "runtimes": list(measurements),
        "shape": _shape_summary(target.analysis_model),
        "methods": {rt: m.method for rt, m in measurements.items()},
        "definitions": DEFINITIONS,
        "components": rows,
        "total": tot,
    }
    if "artifact_bytes" in target.info:
        doc["artifact_bytes"] = target.info["artifact_bytes"]
    devices = {rt: m.device for rt, m in measurements.items() if m.device is not None}
    if len(devices) == 1:
        doc["device"] = {"runtime": next(iter(devices)), **next(iter(devices.values()))}
    elif devices:
        doc["devices"] = [{"runtime": rt, **d} for rt, d in devices.items()]
    if config.per_layer:
        doc["layers"] = _layer_rows(analytic, measurements)
        doc["head"] = analytic.head.to_dict()
    env = environment()
    with contextlib.suppress(OSError):  # other processes' load makes timings noisy; record it with them
        env["load_avg_1_5_15"] = [round(x, 2) for x in os.getloadavg()]
    doc["environment"] = env
    return doc


def _shape_summary(model) -> dict:
    return {
        "hidden": int(model.embeddings.word.embedding_dim),
        "heads": [int(layer.num_heads) for layer in model.layers],
        "head_dim": int(model.layers[0].head_dim) if len(model.layers) else None,
        "ffn": [int(layer.ffn_in.out_features) for layer in model.layers],
        "num_labels": int(model.classifier.out_features),
    }


DEFINITIONS = {
    "flops": "matrix-multiply FLOPs (multiply-add = 2), as torch.utils.flop_counter counts them; gathers, norms, softmax, activations count 0; "
    "a linear that runs edgenlp's block-sparse op counts its kept blocks only",
    "weight_bytes": "bytes of the weights at their stored precision (storage hook of edgenlp.profile.storage)",
    "activation_bytes": "bytes of each component's outputs summed over layers (attention core: probabilities + context)",
    "latency_ms": "component: its summed operator time averaged over the middle half of the profiled runs (ranked by run total), "
    "so components add up to a typical run; latency_median_ms / latency_p90_ms: per-component median and p90 over all runs; "
    "total: median (and p90) of separate plain end-to-end runs",
    "other": "per-layer residual adds and layer norms, pooler and classifier head (the classifier, H*L+L params, is the only row content the classic BERT table lacks)",
    "unattributed_ms": "end-to-end minus the sum of components: runtime dispatch, delegate entry, Python bindings, profiling hooks",
}


def _layer_rows(analytic: AnalyticProfile, measurements: dict[str, Measurement]) -> list[dict]:
    per_rt = {rt: m.layer_component_runs() for rt, m in measurements.items()}
    out = []
    for i, row in enumerate(analytic.layers):
        comps = []
        for name, counts in row.items():
            d = {"name": name, **counts.to_dict()}
            d["latency_ms"] = {rt: round(median(per_rt[rt][(i, name)]), 4) if (i, name) in per_rt[rt] else 0.0 for rt in measurements}
            comps.append(d)
        out.append({"index": i, "components": comps})
    return out


def profile(spec: str | Path, config: ProfileConfig, *, labels: tuple[str, ...] | None = None,
            workdir: str | Path | None = None, dynamic=None, data_dir: str | Path | None = None) -> list[dict]:
    """Profile a model name/directory or a bundle; one document per (seq_len, threads), in that order.

    ``dynamic`` (a :class:`edgenlp.profile.dynamic.DynamicProfileConfig` with
    ``data``) also profiles a dynamic bundle over that data and adds the
    ``dynamic`` key to each document (one data pass per thread count;
    ``data_dir`` finds built-in tasks).

    Raises :class:`EdgeNLPError` for an unknown model, a runtime the target
    cannot run (eager on a bundle, a format the bundle lacks), events that
    cannot be attributed, or ``dynamic`` data for a model or a static bundle
    (before anything is measured).
    """
    docs = []
    if dynamic is not None and dynamic.active:
        from edgenlp.profile.dynamic import check_dynamic

        check_dynamic(spec, dynamic, config.runtimes)
    with open_target(spec, labels=labels, seq_lens=config.seq_lens, workdir=workdir) as target:
        shape_model = target.analysis_model
        _check_runtimes(target, config)
        measurers = {rt: MEASURERS[rt]() for rt in config.runtimes}
        for seq in config.seq_lens:
            if seq > shape_model.shape.max_positions:
                raise EdgeNLPError(f"--seq-len {seq} exceeds the model's {shape_model.shape.max_positions} positions")
            if seq > target.info.get("max_seq_len", seq):
                raise EdgeNLPError(f"--seq-len {seq} exceeds the bundle's max_seq_len {target.info['max_seq_len']}")
            analytic = analyze(shape_model, seq_len=seq, batch=config.batch)
            for threads in config.threads:
                spec_ = MeasureSpec(seq_len=seq, batch=config.batch, threads=threads, runs=config.runs, warmup=config.warmup)
                measured = {}
                for rt, measurer in measurers.items():
                    log.info("measuring %s on %s: seq %d, %d thread(s), %d runs", target.name, rt, seq, threads, config.runs)
                    measured[rt] = measurer.measure(target, spec_)
                docs.append(build_document(target, analytic, measured, config, threads))
        if dynamic is not None and dynamic.active:
            from edgenlp.profile.dynamic import dynamic_section

            for threads in config.threads:
                section = dynamic_section(spec, dynamic, config.runtimes, target=target, measurers=measurers, threads=threads,
                                          runs=config.runs, warmup=config.warmup, data_dir=data_dir)
                for doc in docs:
                    if doc["threads"] == threads:
                        doc["dynamic"] = section
    return docs


def _check_runtimes(target: ProfileTarget, config: ProfileConfig) -> None:
    if target.model is None and "eager" in config.runtimes:
        raise EdgeNLPError(f"{target.info.get('source')}: a bundle has no eager model; use --runtime executorch,onnx")
    if target.model is None:
        if "executorch" in config.runtimes and target.pte is None:
            raise EdgeNLPError(f"{target.info.get('source')}: bundle has no model.pte; drop executorch from --runtime")
        if "onnx" in config.runtimes and target.onnx is None:
            raise EdgeNLPError(f"{target.info.get('source')}: bundle has no model.onnx; drop onnx from --runtime")


def default_runtimes(spec: str | Path) -> tuple[str, ...]:
    """``eager`` for a model; the formats a bundle carries for a bundle."""
    path = Path(str(spec))
    if path.is_dir() and (path / "manifest.json").is_file():
        from edgenlp.bundle import Bundle

        fmts = Bundle.open(path, verify=False).formats
        return tuple(rt for fmt, rt in (("pte", "executorch"), ("onnx", "onnx")) if fmt in fmts)
    return ("eager",)
