"""Profile a dynamic bundle over a dataset: per-sentence latency, exits, tokens, weighted components, the exit curve.

``edgenlp profile BUNDLE --data TASK_OR_TSV`` (or :func:`edgenlp.profile.api.profile`
with a :class:`DynamicProfileConfig`) runs every sentence of the data through
the bundle's segments (:mod:`edgenlp.run.dynamic`) on each requested runtime
that runs segments, at the sentence's real length, and adds to each profile
document a ``dynamic`` section (schema in :mod:`edgenlp.profile`):

- per sentence: latency (``mean``, ``p50``, ``p90``, ``max``), the exit layer
  (histogram) and the tokens each layer processed (mean per layer);
- per segment: the share of sentences that run it (``reach``) and the tokens
  it runs on (``mean_tokens``, ``p90_tokens``, and ``length``, the length the
  runtime pads them to: the smallest bucket for ExecuTorch and native, the
  rounded mean for ONNX Runtime);
- the per-component table weighted by how often each segment runs: a segment
  reached by a fraction ``p`` of the sentences contributes ``p`` times its
  cost at ``length``. Its cost is the static profile's per-layer attribution
  (analytic FLOPs and activation bytes, measured per-layer component latency)
  of the layers it covers, measured on the static program at that length,
  plus one classifier head (in ``other``) where it ends at an exit; the
  embedding always runs, at the first segment's length. The token-importance
  outputs and the host-side gathers between segments are not counted;
- a latency-accuracy curve: the data evaluated at a handful of exit
  thresholds in the rule's range (the runners' per-call ``exit_threshold``),
  with the profiled threshold (the bundle's, or ``exit_threshold``) and the
  static program as reference points.
"""

from __future__ import annotations

import logging
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from edgenlp.config import knob
from edgenlp.errors import EdgeNLPError
from edgenlp.profile.analytic import analyze
from edgenlp.profile.components import COMPONENTS
from edgenlp.profile.measure import MeasureSpec, Measurement, ProfileTarget

log = logging.getLogger(__name__)

SPLITS = ("dev", "train")
DYNAMIC_RUNTIMES = ("executorch", "onnx", "native")  # runtimes that run a bundle's segments
CURVE_POINTS = 5  # thresholds spread over the rule's range when none are given


@dataclass(frozen=True)
class DynamicProfileConfig:
    """The data a dynamic bundle is profiled over and the exit thresholds of its latency-accuracy curve."""

    data: str | None = knob(None, help="Dynamic bundles: profile over this data (a task name or folder, whose --split "
                                       "is read, or a TSV file): latency per sentence, exits, tokens kept, weighted "
                                       "components, latency-accuracy curve.")
    split: str = knob("dev", choices=SPLITS, help="With --data TASK: the split to read.")
    limit: int | None = knob(None, help="With --data: only the first N rows.")
    thresholds: tuple[float, ...] = knob((), help="With --data: exit thresholds of the latency-accuracy curve, "
                                                  "comma-separated (default: 5 across the rule's range, plus the profiled one).")
    exit_threshold: float | None = knob(None, help="With --data: profile at this exit threshold instead of the bundle's.")

    def __post_init__(self) -> None:
        object.__setattr__(self, "thresholds", tuple(float(t) for t in self.thresholds))
        if self.data is not None and not str(self.data).strip():
            raise ValueError("data must name a task, a task folder or a TSV file, got an empty string")
        if self.split not in SPLITS:
            raise ValueError(f"split must be one of {', '.join(SPLITS)}, got {self.split!r}")
        if self.limit is not None and self.limit < 1:
            raise ValueError(f"limit must be >= 1, got {self.limit}")
        if any(math.isnan(t) for t in self.thresholds):
            raise ValueError(f"thresholds must be numbers, got {self.thresholds}")
        if self.exit_threshold is not None and math.isnan(self.exit_threshold):
            raise ValueError("exit_threshold must be a number, got nan")
        if self.data is None and (self.limit is not None or self.thresholds or self.split != "dev"
                                  or self.exit_threshold is not None):
            raise ValueError("limit, thresholds, split and exit_threshold apply to --data; give --data TASK_OR_TSV")

    @property
    def active(self) -> bool:
        return self.data is not None

    def to_dict(self) -> dict:
        d = asdict(self)
        d["thresholds"] = list(self.thresholds)
        return d


def load_data(config: DynamicProfileConfig, *, data_dir=None):
    """The :class:`edgenlp.data.tasks.Split` that ``config.data`` names: a TSV file, or the split of a task."""
    from edgenlp.data.tasks import load_task, read_tsv

    path = Path(str(config.data))
    split = read_tsv(path) if path.is_file() else getattr(load_task(str(config.data), data_dir=data_dir), config.split)
    return split.head(config.limit)


def check_dynamic(bundle_path, config: DynamicProfileConfig, runtimes: Sequence[str]) -> None:
    """Raise :class:`EdgeNLPError` (before anything is measured) when ``config`` cannot apply to this bundle."""
    if not config.active:
        return
    path = Path(str(bundle_path))
    if not (path / "manifest.json").is_file():
        raise EdgeNLPError(f"{bundle_path}: --data profiles a dynamic bundle; this is a model, not a bundle "
                           "(export it with edgenlp export first)")
    from edgenlp.bundle import Bundle

    bundle = Bundle.open(path, verify=False)
    if not bundle.is_dynamic:
        raise EdgeNLPError(f"{bundle_path}: --data profiles a dynamic bundle, and this one has no segments "
                           "(make the model with edgenlp dynamic, then export it)")
    if config.exit_threshold is not None:
        from edgenlp.run.dynamic import resolve_settings

        resolve_settings(bundle.dynamic.spec, exit_threshold=config.exit_threshold)  # the rule's range, one error line
    usable = [rt for rt in runtimes if rt in DYNAMIC_RUNTIMES]
    if not usable:
        raise EdgeNLPError(f"--data: none of the runtimes {list(runtimes)} runs a dynamic bundle's segments; "
                           f"use --runtime {','.join(DYNAMIC_RUNTIMES)}")


def curve_thresholds(rule: str, *, num_exits: int, num_labels: int, own: float, given: Sequence[float] = ()) -> list:
    """The exit thresholds of the curve: ``given`` (checked against the rule's range) or ``CURVE_POINTS`` across the
    range where the rule can fire (maxprob from 1/labels), and the bundle's ``own`` threshold; sorted, distinct."""
    from edgenlp.dynamic.rules import check_threshold, threshold_range

    if given:
        try:
            values = [check_threshold(rule, t, num_exits=num_exits, name="--thresholds") for t in given]
        except ValueError as exc:
            raise EdgeNLPError(str(exc)) from None
    elif rule == "patience":
        values = sorted({int(round(x)) for x in np.linspace(1, num_exits, min(CURVE_POINTS, num_exits))})
    else:
        lo, hi = threshold_range(rule, num_exits)
        if rule == "maxprob":
            lo = 1.0 / num_labels
        values = [round(float(x), 4) for x in np.linspace(lo, hi, CURVE_POINTS)]
    return sorted(set(values) | {own})


def segment_statistics(details, segments) -> list[dict]:
    """Per segment: ``reach`` (share of sentences that ran it), ``mean_tokens`` and ``p90_tokens`` (tokens at its
    first layer over the sentences that ran it; null when none did)."""
    n = len(details)
    out = []
    for seg in segments:
        first, last = seg.layers
        tokens = [d.tokens[first - 1] for d in details if len(d.tokens) >= last]
        out.append({
            "index": seg.index, "layers": [first, last], "exit": bool(seg.exit), "tokens": bool(seg.tokens),
            "reach": round(len(tokens) / n, 6) if n else 0.0,
            "mean_tokens": round(float(np.mean(tokens)), 4) if tokens else None,
            "p90_tokens": round(float(np.percentile(tokens, 90)), 4) if tokens else None,
        })
    return out


def _bucket(buckets, n: int) -> int:
    for b in buckets:
        if b >= n:
            return b
    return buckets[-1]


def segment_length(runtime: str, mean_tokens: float, buckets) -> int:
    """The length a runtime runs ``mean_tokens`` (rounded, at least 2) at: its bucket, or itself for ONNX Runtime."""
    n = max(2, int(round(mean_tokens)))
    return n if runtime == "onnx" else _bucket(buckets, n)


def _latency(values) -> dict:
    lat = np.asarray(values, dtype=float)
    return {"mean": round(float(lat.mean()), 4), "p50": round(float(np.percentile(lat, 50)), 4),
            "p90": round(float(np.percentile(lat, 90)), 4), "max": round(float(lat.max()), 4)}


def _accuracy(details, gold) -> float:
    pred = np.array([int(np.argmax(d.logits)) for d in details])
    return round(100.0 * float((pred == np.asarray(gold)).mean()), 4)


# --------------------------------------------------------------------------- the weighted component table


class _Costs:
    """Static measurements and analytic counts of one runtime per length, made once each."""

    def __init__(self, target: ProfileTarget, measurer, *, threads: int, runs: int, warmup: int) -> None:
        self.target, self.measurer = target, measurer
        self.threads, self.runs, self.warmup = threads, runs, warmup
        self._cache: dict[int, tuple] = {}

    def at(self, length: int) -> tuple:
        """(analytic profile, {(layer, component): ms}, head ms, embedding ms) at ``length``."""
        if length not in self._cache:
            spec = MeasureSpec(seq_len=length, threads=self.threads, runs=self.runs, warmup=self.warmup)
            log.info("measuring segment costs on %s at length %d", self.measurer.runtime, length)
            m: Measurement = self.measurer.measure(self.target, spec)
            idx = m.central_runs()
            layer_ms = {k: float(np.mean(v[idx])) for k, v in m.layer_component_runs().items()}
            comp_ms = m.component_latency()
            layer_other = sum(v for (_, c), v in layer_ms.items() if c == "other")
            head_ms = max(0.0, comp_ms["other"] - layer_other)
            analytic = analyze(self.target.analysis_model, seq_len=length)
            self._cache[length] = (analytic, layer_ms, head_ms, comp_ms["embedding"])
        return self._cache[length]


def weighted_components(costs: _Costs, segments: list[dict]) -> tuple[list[dict], dict]:
    """Rows per component: FLOPs, activation bytes and latency of each segment at its length, times its reach."""
    rows = {c: {"name": c, "flops": 0.0, "activation_bytes": 0.0, "latency_ms": 0.0} for c in COMPONENTS}
    first = next((s for s in segments if s["length"] is not None), None)
    if first is not None:  # the embedding runs for every sentence, at the length the first segment runs at
        analytic, _, _, emb_ms = costs.at(first["length"])
        emb = analytic.components["embedding"]
        rows["embedding"].update(flops=float(emb.flops), activation_bytes=float(emb.activation_bytes), latency_ms=emb_ms)
    for seg in segments:
        if not seg["reach"] or seg["length"] is None:
            seg["cost"] = None
            continue
        analytic, layer_ms, head_ms, _ = costs.at(seg["length"])
        cost = {c: {"flops": 0.0, "activation_bytes": 0.0, "latency_ms": 0.0} for c in COMPONENTS if c != "embedding"}
        for layer in range(seg["layers"][0] - 1, seg["layers"][1]):
            for c, counts in analytic.layers[layer].items():
                cost[c]["flops"] += counts.flops
                cost[c]["activation_bytes"] += counts.activation_bytes
                cost[c]["latency_ms"] += layer_ms.get((layer, c), 0.0)
        if seg["exit"]:  # the exit's pooler + classifier: the static program's head
            cost["other"]["flops"] += analytic.head.flops
            cost["other"]["activation_bytes"] += analytic.head.activation_bytes
            cost["other"]["latency_ms"] += head_ms
        seg["cost"] = {"flops": int(sum(v["flops"] for v in cost.values())),
                       "latency_ms": round(sum(v["latency_ms"] for v in cost.values()), 4)}
        for c, v in cost.items():
            for key in ("flops", "activation_bytes", "latency_ms"):
                rows[c][key] += seg["reach"] * v[key]
    total = {"flops": sum(r["flops"] for r in rows.values()), "activation_bytes": sum(r["activation_bytes"] for r in rows.values()),
             "latency_ms": sum(r["latency_ms"] for r in rows.values())}
    out = []
    for r in rows.values():
        out.append({"name": r["name"], "flops": int(round(r["flops"])), "activation_bytes": int(round(r["activation_bytes"])),
                    "latency_ms": round(r["latency_ms"], 4),
                    "share_pct": {k: round(100.0 * r[k] / total[k], 2) if total[k] else 0.0
                                  for k in ("flops", "latency_ms")}})
    return out, {"flops": int(round(total["flops"])), "activation_bytes": int(round(total["activation_bytes"])),
                 "latency_ms": round(total["latency_ms"], 4)}


# --------------------------------------------------------------------------- one runtime


def profile_runtime(bundle_path, runtime: str, split, *, target: ProfileTarget, measurer, threads: int, runs: int,
                    warmup: int, thresholds: Sequence[float] = (), exit_threshold: float | None = None) -> dict:
    """The dynamic section of one runtime: the data at the bundle's settings, the weighted table and the curve."""
    from edgenlp.run.dynamic import bundle_runner

    runner = bundle_runner(bundle_path, runtime=runtime, threads=threads, exit_threshold=exit_threshold)
    try:
        spec = runner.spec
        own = runner.settings.threshold
        gold = split.label_ids(runner.labels)
        segs = runner.segments
        details = runner.predict_details(split.texts)
        exits = np.array([d.exit_layer for d in details])
        reached = np.zeros(spec.num_layers)
        tokens = np.zeros(spec.num_layers)
        for d in details:
            reached[: len(d.tokens)] += 1
            tokens[: len(d.tokens)] += d.tokens
        segments = segment_statistics(details, segs)
        buckets = tuple(runner_buckets(bundle_path))
        for s in segments:
            s["length"] = segment_length(runtime, s["mean_tokens"], buckets) if s["mean_tokens"] is not None else None
        costs = _Costs(target, measurer, threads=threads, runs=runs, warmup=warmup)
        components, total = weighted_components(costs, segments)
        out = {
            "accuracy": _accuracy(details, gold),
            "latency_ms": _latency([d.latency_ms for d in details]),
            "exit_layers": {str(l): int((exits == l).sum()) for l in spec.exits},
            "mean_exit_layer": round(float(exits.mean()), 4),
            "tokens_kept": [round(float(t / r), 3) if r else None for t, r in zip(tokens, reached)],
            "segments": segments,
            "components": components,
            "total": total,
        }
        static = runner.predict_details(split.texts, static=True)
        out["static"] = {"accuracy": _accuracy(static, gold), "latency_ms": _latency([d.latency_ms for d in static])}
        curve = []
        if len(spec.exits) >= 2:
            for t in curve_thresholds(spec.rule, num_exits=len(spec.exits), num_labels=len(runner.labels),
                                      own=own, given=thresholds):
                ds = runner.predict_details(split.texts, exit_threshold=t)
                curve.append({"threshold": t, "accuracy": _accuracy(ds, gold),
                              "latency_ms": _latency([d.latency_ms for d in ds]),
                              "mean_exit_layer": round(float(np.mean([d.exit_layer for d in ds])), 4)})
        out["curve"] = curve
        return out
    finally:
        runner.close()


def runner_buckets(bundle_path) -> tuple[int, ...]:
    from edgenlp.bundle import Bundle

    return Bundle.open(bundle_path, verify=False).dynamic.buckets


def dynamic_section(bundle_path, config: DynamicProfileConfig, runtimes: Sequence[str], *, target: ProfileTarget,
                    measurers: dict, threads: int, runs: int, warmup: int, data_dir=None) -> dict:
    """The ``dynamic`` key of the documents of one thread count (see :mod:`edgenlp.profile`)."""
    from edgenlp.bundle import Bundle

    split = load_data(config, data_dir=data_dir)
    if not len(split):
        raise EdgeNLPError(f"--data {config.data}: no rows to profile")
    spec = Bundle.open(bundle_path, verify=False).dynamic.spec
    own = spec.threshold
    if config.exit_threshold is not None:
        from edgenlp.run.dynamic import resolve_settings

        own = resolve_settings(spec, exit_threshold=config.exit_threshold).threshold  # checked against the rule's range
    section = {
        "data": str(split.path or config.data), "split": None if Path(str(config.data)).is_file() else config.split,
        "n": len(split), "rule": spec.rule, "threshold": own, "bundle_threshold": spec.threshold, "exits": list(spec.exits),
        "token_layers": list(spec.token_layers), "num_layers": spec.num_layers, "runtimes": {},
    }
    for rt in runtimes:
        if rt not in DYNAMIC_RUNTIMES:
            log.info("dynamic profile: %s does not run segments; skipped", rt)
            continue
        log.info("dynamic profile on %s over %d sentences", rt, len(split))
        section["runtimes"][rt] = profile_runtime(bundle_path, rt, split, target=target, measurer=measurers[rt], threads=threads,
                                                  runs=runs, warmup=warmup, thresholds=config.thresholds,
                                                  exit_threshold=config.exit_threshold)
    return section
