"""Predict a candidate's latency, peak memory and size on a target without building it.

**Latency.** Each profiler component (:mod:`edgenlp.profile.components`) plus
the runtime's own overhead gets a compact analytic form, linear in features
computed from the encoder shape and sequence length::

    attn_qkv, attn_out   a·FLOPs + b·weight bytes + c·linear calls
    ffn                  a·FLOPs + b·weight bytes + d·(s·F activations) + c·linear calls
    attn_core            a·FLOPs + e·(h·s² probabilities) + c·layers with heads
    embedding            d·(s·H activations) + c
    other                d·(norm activations) + a·head FLOPs + c·layers
    runtime_overhead     c + c'·layers

The coefficients are fitted (non-negative least squares, weighted by
1/latency so small and large models count alike) per (runtime, precision,
threads) on observations: per-component latencies that the profiler measured
for a grid of shapes through the real runtime (:mod:`edgenlp.targets.calibrate`).
Non-negative coefficients on features that only shrink when heads, FFN
width, layers or bits shrink make every prediction monotone in them.

A thread count that was not measured follows Amdahl's law per coefficient,
with the parallel fraction read from the host's 1- and 2-thread fits.

**Transfer.** On a device without a measured table, the host's fp32
coefficients are scaled term by term: compute terms (FLOPs, activations,
calls) by host sustained fp32 rate ÷ the device's sustained rate for the
candidate's precision on the cores the threads run on, weight-byte terms by
host ÷ device bandwidth. Spec-sheet peaks are derated by
:data:`PEAK_EFFICIENCY`. Such predictions are ``estimated=True``. A table
measured on the device (``targets/NAME.measured.json`` or the cache, written by
``edgenlp targets calibrate NAME --on URI``) replaces the transfer.

**Precisions.** The table is keyed by precision: ``int8``/``int4`` rows are
used where they were measured (``estimated=False``); otherwise the fp32 fit is
transferred to the precision by the same rate ratio (``estimated=True``).
int4 uses the int8 compute rate (weights are unpacked to int8 for the
multiply) with half the weight bytes — an assumption until int4 bundles are
measured.

**Memory and size** are analytic (the same counts as
:func:`edgenlp.profile.analytic.analyze`): size is the model file (weights at
their stored precision, per-channel fp32 scales, per-group for int4);
peak memory is the runtime's resident base + the weights as read from the
file + the copy the backend packs for its kernels (XNNPACK / ONNX Runtime
prepack) + the largest layer's activations (+ the whole embedding table for
ONNX Runtime, which reads the model into memory rather than mapping it).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

from edgenlp.errors import EdgeNLPError
from edgenlp.models.encoder import EncoderShape
from edgenlp.targets.target import PRECISIONS, Target, measured_table_path

log = logging.getLogger(__name__)

TABLE_SCHEMA = "edgenlp.costtable/1"
COMPONENT_FEATURES: dict[str, tuple[str, ...]] = {
    "embedding": ("act", "one"),
    "attn_qkv": ("flops", "wbytes", "calls"),
    "attn_core": ("flops", "probs", "calls"),
    "attn_out": ("flops", "wbytes", "calls"),
    "ffn": ("flops", "wbytes", "act", "calls"),
    "other": ("act", "flops", "calls"),
    "runtime_overhead": ("one", "calls"),
}
LINEAR_COMPONENTS = ("attn_qkv", "attn_out", "ffn")
FEATURE_KIND = {"flops": "compute", "act": "vector", "probs": "vector", "calls": "call", "one": "call", "wbytes": "memory"}
PEAK_EFFICIENCY = 0.6  # sustained / spec-sheet peak for XNNPACK GEMMs on Arm cores (assumption; a measured table replaces it)
DEFAULT_PARALLEL = {"compute": 0.9, "vector": 0.7, "memory": 0.5, "call": 0.0}  # Amdahl fraction when only 1 thread was measured
INT4_GROUP = 32
# the reference encoder for rates derived from a fit (and the planner's default shape)
MINILM_L6 = EncoderShape(family="bert", vocab_size=30522, hidden=384, heads=(12,) * 6, head_dim=32, ffn=(1536,) * 6)
Bits = str | tuple[str, ...]


@dataclass(frozen=True)
class Prediction:
    """Predicted cost of one candidate on one target. ``estimated`` marks transferred or assumed numbers."""

    latency_ms: float
    peak_memory_mb: float
    size_mb: float
    estimated: bool
    components_ms: dict[str, float] = field(default_factory=dict, compare=False)
    basis: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"latency_ms": round(self.latency_ms, 3), "peak_memory_mb": round(self.peak_memory_mb, 2),
                "size_mb": round(self.size_mb, 3), "estimated": self.estimated,
                "components_ms": {k: round(v, 3) for k, v in self.components_ms.items()}, "basis": self.basis}  # fmt: skip


# --------------------------------------------------------------------------- features


MIXED = "mixed"


def resolve_mixed(bits: Bits, num_layers: int) -> Bits:
    """``"mixed"`` -> int8 in the first and last layer, int4 in between; anything else unchanged."""
    if bits != MIXED:
        return bits
    if num_layers <= 2:
        return ("int8",) * num_layers
    return ("int8",) + ("int4",) * (num_layers - 2) + ("int8",)


def layer_bits(shape: EncoderShape, bits: Bits) -> tuple[str, ...]:
    """Per-layer precision from ``"fp32"|"int8"|"int4"|"mixed"`` or a per-layer tuple."""
    bits = resolve_mixed(bits, shape.num_layers)
    per = (bits,) * shape.num_layers if isinstance(bits, str) else tuple(bits)
    if len(per) != shape.num_layers:
        raise ValueError(f"bits has {len(per)} entries for {shape.num_layers} layers")
    bad = [b for b in per if b not in PRECISIONS]
    if bad:
        raise ValueError(f"bits must be among {PRECISIONS}, got {bad[0]!r}")
    return per


def dominant(per: Sequence[str]) -> str:
    """The most common precision (ties: the narrower one)."""
    if not per:
        return "fp32"
    order = {p: i for i, p in enumerate(PRECISIONS)}
    return max(set(per), key=lambda p: (per.count(p), order[p]))


def weight_bytes(fin: int, fout: int, precision: str) -> float:
    """Stored bytes of one linear's weight (+ per-channel or per-group fp32 scales) and its fp32 bias."""
    n = fin * fout
    if n == 0:
        return 0.0
    if precision == "fp32":
        w = 4.0 * n
    elif precision == "int8":
        w = n + 4.0 * fout
    else:
        w = n / 2 + 4.0 * fout * math.ceil(fin / INT4_GROUP)
    return w + 4.0 * fout


def features(shape: EncoderShape, *, seq_len: int, bits: Bits, num_labels: int = 2) -> dict[tuple[str, str], dict[str, float]]:
    """``{(component, precision): {feature: value}}`` for one sequence of ``seq_len`` tokens (batch 1).

    Linear components are split by the precision of their layer; the other
    components use the model's dominant precision.
    """
    s, H, d = seq_len, shape.hidden, shape.head_dim
    per = layer_bits(shape, bits)
    dom = dominant(per)
    out: dict[tuple[str, str], dict[str, float]] = {}

    def add(comp: str, prec: str, **vals: float) -> None:
        row = out.setdefault((comp, prec), {f: 0.0 for f in COMPONENT_FEATURES[comp]})
        for k, v in vals.items():
            row[k] += v

    add("embedding", dom, act=s * H, one=1)
    for h, F, prec in zip(shape.heads, shape.ffn, per):
        A = h * d
        if A:
            add("attn_qkv", prec, flops=3 * 2 * s * H * A, wbytes=3 * weight_bytes(H, A, prec), calls=3)
            add("attn_out", prec, flops=2 * s * A * H, wbytes=weight_bytes(A, H, prec), calls=1)
            add("attn_core", dom, flops=4 * h * s * s * d, probs=h * s * s, calls=1)
        if F:
            add("ffn", prec, flops=2 * 2 * s * H * F, wbytes=weight_bytes(H, F, prec) + weight_bytes(F, H, prec), act=s * F, calls=2)
        add("other", dom, act=2 * s * H, calls=1)
    add("other", dom, flops=2 * H * H + 2 * H * num_labels)
    add("runtime_overhead", dom, one=1, calls=shape.num_layers)
    return out


def size_bytes(shape: EncoderShape, *, bits: Bits, embeddings: str | None, num_labels: int = 2) -> float:
    """The model file's weight bytes (what dominates a bundle's size)."""
    H = shape.hidden
    per = layer_bits(shape, bits)
    emb = embeddings or "fp32"
    word = shape.vocab_size * H
    total = {"fp32": 4.0 * word, "int8": word + 4.0 * shape.vocab_size, "int4": word / 2 + 4.0 * shape.vocab_size * math.ceil(H / INT4_GROUP)}[emb]
    total += 4.0 * (shape.max_positions + shape.type_vocab_size) * H + 4.0 * 2 * H
    for h, F, prec in zip(shape.heads, shape.ffn, per):
        A = h * shape.head_dim
        total += 3 * weight_bytes(H, A, prec) + weight_bytes(A, H, prec) + 4.0 * H * (A == 0)  # a removed block keeps its output bias
        total += weight_bytes(H, F, prec) + weight_bytes(F, H, prec) + 4.0 * H * (F == 0)
        total += 4.0 * 4 * H  # two layer norms
    dom = dominant(per)
    total += weight_bytes(H, H, dom) + weight_bytes(H, num_labels, dom)
    return total


def peak_memory_bytes(shape: EncoderShape, *, bits: Bits, embeddings: str | None, seq_len: int, runtime: str,
                      base_mb: float, num_labels: int = 2) -> float:
    """Resident peak: runtime base + file weights + packed copy of the linears + largest layer's activations."""
    H, s = shape.hidden, seq_len
    per = layer_bits(shape, bits)
    linear = 0.0
    for h, F, prec in zip(shape.heads, shape.ffn, per):
        A = h * shape.head_dim
        linear += 3 * weight_bytes(H, A, prec) + weight_bytes(A, H, prec)
        linear += weight_bytes(H, F, prec) + weight_bytes(F, H, prec)
    act_layer = max((4.0 * max(s * F, h * s * s + 3 * s * h * shape.head_dim) for h, F in zip(shape.heads, shape.ffn)), default=0.0)
    act = act_layer + 4.0 * 3 * s * H
    emb_rows = 4.0 * s * H
    if runtime == "onnx":  # the whole model is read into memory, then linears are prepacked
        file_bytes = size_bytes(shape, bits=bits, embeddings=embeddings, num_labels=num_labels)
        return base_mb * 2**20 + file_bytes + linear + act
    return base_mb * 2**20 + 2 * linear + emb_rows + act


# --------------------------------------------------------------------------- observations and fits


@dataclass(frozen=True)
class Observation:
    """One profiled (model, seq_len, threads) run: per-component and total latency, ms."""

    runtime: str
    precision: str
    threads: int
    seq_len: int
    shape: dict
    components: dict[str, float]  # component -> ms, including runtime_overhead
    total_ms: float
    num_labels: int = 2

    def to_dict(self) -> dict:
        return {"runtime": self.runtime, "precision": self.precision, "threads": self.threads, "seq_len": self.seq_len,
                "shape": self.shape, "components": self.components, "total_ms": self.total_ms, "num_labels": self.num_labels}  # fmt: skip

    @classmethod
    def from_dict(cls, d: dict) -> "Observation":
        return cls(str(d["runtime"]), str(d["precision"]), int(d["threads"]), int(d["seq_len"]), dict(d["shape"]),
                   {k: float(v) for k, v in d["components"].items()}, float(d["total_ms"]), int(d.get("num_labels", 2)))  # fmt: skip

    def encoder_shape(self) -> EncoderShape:
        return EncoderShape.from_dict(self.shape)

    @classmethod
    def from_profile(cls, doc: dict, *, runtime_key: str, runtime: str, precision: str, model_shape: EncoderShape,
                     statistic: str = "min") -> "Observation":  # fmt: skip
        """From a profile document (:func:`edgenlp.profile.api.build_document`); ``runtime_key`` is its runtime column.

        ``statistic="min"`` (default) takes the fastest plain end-to-end run as
        the total — on a shared machine the least disturbed one — and scales the
        components (and the unattributed overhead) to add up to it;
        ``"median"`` keeps the median end-to-end run.
        """
        comps = {c["name"]: float(c["latency_ms"][runtime_key]) for c in doc["components"]}
        comps["runtime_overhead"] = max(0.0, float(doc["total"]["unattributed_ms"][runtime_key]))
        if statistic == "min":
            total = float(doc["total"]["latency_min_ms"][runtime_key])
            parts = sum(comps.values())
            comps = {k: v * total / parts for k, v in comps.items()} if parts > 0 else comps
        elif statistic == "median":
            total = float(doc["total"]["latency_ms"][runtime_key])
        else:
            raise ValueError(f"statistic must be 'min' or 'median', got {statistic!r}")
        return cls(runtime, precision, int(doc["threads"]), int(doc["seq_len"]), model_shape.to_dict(), comps, total,
                   int(doc["shape"].get("num_labels", 2)))  # fmt: skip


def _nnls(X: np.ndarray, y: np.ndarray) -> np.ndarray:
    from scipy.optimize import nnls

    scale = np.maximum(np.abs(X).max(axis=0), 1e-30)
    coef, _ = nnls(X / scale, y, maxiter=50 * X.shape[1])
    return coef / scale


def fit_coefficients(observations: Iterable[Observation]) -> dict[tuple[str, str, int], dict[str, dict[str, float]]]:
    """``{(runtime, precision, threads): {component: {feature: coefficient (ms per unit)}}}``.

    Rows are weighted by 1/total latency so every model's relative error counts alike.
    """
    groups: dict[tuple[str, str, int], list[Observation]] = {}
    for ob in observations:
        groups.setdefault((ob.runtime, ob.precision, ob.threads), []).append(ob)
    fits = {}
    for key, obs in groups.items():
        _, precision, _ = key
        comp_fit: dict[str, dict[str, float]] = {}
        for comp, names in COMPONENT_FEATURES.items():
            X, y = [], []
            for ob in obs:
                feats = features(ob.encoder_shape(), seq_len=ob.seq_len, bits=precision, num_labels=ob.num_labels)
                row = feats.get((comp, precision), {f: 0.0 for f in names})
                w = 1.0 / max(ob.total_ms, 1e-6)
                X.append([row[f] * w for f in names])
                y.append(ob.components.get(comp, 0.0) * w)
            coef = _nnls(np.asarray(X, dtype=float), np.asarray(y, dtype=float)) if X else np.zeros(len(names))
            comp_fit[comp] = {f: float(c) for f, c in zip(names, coef)}
        fits[key] = comp_fit
    return fits


def cpu_key() -> dict:
    from edgenlp.utils import cpu_info, library_versions

    info = cpu_info()
    v = library_versions()
    return {"cpu": info.get("model", ""), "machine": info.get("machine", ""), "isa": info.get("isa", []), "cores": info.get("cpu_count"),
            "versions": {k: v.get(k) for k in ("torch", "executorch", "onnxruntime")}}  # fmt: skip


def key_digest(key: dict) -> str:
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]


def cache_dir() -> Path:
    """``$EDGENLP_CACHE_DIR``, else ``$XDG_CACHE_HOME/edgenlp``, else ``~/.cache/edgenlp``."""
    env = os.environ.get("EDGENLP_CACHE_DIR")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "edgenlp"


def host_table_path(key: dict | None = None) -> Path:
    """The host calibration for this CPU and these runtime versions: ``<cache>/costmodel/host-<digest>.json``."""
    return cache_dir() / "costmodel" / f"host-{key_digest(key or cpu_key())}.json"


def device_table_cache_path(target_name: str) -> Path:
    return cache_dir() / "costmodel" / f"{target_name}.measured.json"


@dataclass
class CostTable:
    """Observations measured on one machine (the host or a device), with their fits."""

    observations: list[Observation]
    key: dict = field(default_factory=dict)  # CPU + runtime versions (host) or the device probe
    device: str = "host"
    notes: dict = field(default_factory=dict)
    _fits: dict | None = field(default=None, repr=False)

    @property
    def fits(self) -> dict:
        if self._fits is None:
            self._fits = fit_coefficients(self.observations)
        return self._fits

    def keys(self) -> list[tuple[str, str, int]]:
        return sorted(self.fits)

    def to_dict(self) -> dict:
        return {
            "schema": TABLE_SCHEMA, "device": self.device, "key": self.key, "notes": self.notes,
            "fits": [{"runtime": r, "precision": p, "threads": t, "coefficients": c} for (r, p, t), c in sorted(self.fits.items())],
            "observations": [o.to_dict() for o in self.observations],
        }  # fmt: skip

    @classmethod
    def from_dict(cls, d: dict, *, source: str = "cost table") -> "CostTable":
        if not isinstance(d, dict) or d.get("schema") != TABLE_SCHEMA:
            raise EdgeNLPError(f"{source}: not an edgenlp cost table (schema {TABLE_SCHEMA!r} expected)")
        try:
            obs = [Observation.from_dict(o) for o in d["observations"]]
        except (KeyError, TypeError, ValueError) as exc:
            raise EdgeNLPError(f"{source}: malformed observation ({exc})") from None
        return cls(obs, d.get("key", {}), d.get("device", "host"), d.get("notes", {}))

    @classmethod
    def load(cls, path: str | Path) -> "CostTable":
        path = Path(path)
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise EdgeNLPError(f"{path}: cannot read cost table ({exc})") from None
        return cls.from_dict(data, source=str(path))

    def save(self, path: str | Path) -> Path:
        from edgenlp.utils import atomic_write_json

        return atomic_write_json(path, self.to_dict())

    def merged(self, other: "CostTable") -> "CostTable":
        """This table with ``other``'s observations added (same machine), replacing rows of the same key."""
        keys = {(o.runtime, o.precision, o.threads) for o in other.observations}
        kept = [o for o in self.observations if (o.runtime, o.precision, o.threads) not in keys]
        return CostTable(kept + list(other.observations), other.key or self.key, self.device, {**self.notes, **other.notes})


# --------------------------------------------------------------------------- the model


def _amdahl(c1: float, c2: float | None, kind: str, threads: int) -> float:
    """Coefficient at ``threads`` from the 1-thread value and (if measured) the 2-thread value."""
    if threads == 1:
        return c1
    if c2 is not None and c1 > 0:
        p = min(1.0, max(0.0, 2.0 * (1.0 - c2 / c1)))
    else:
        p = DEFAULT_PARALLEL[kind]
    return c1 * ((1.0 - p) + p / threads)


def _linear_cost(fit: dict, precision: str, *, seq_len: int) -> tuple[float, float]:
    """(FLOPs, predicted ms) of :data:`MINILM_L6`'s linear layers at ``precision`` under one fit's coefficients."""
    flops = ms = 0.0
    for (comp, _), row in features(MINILM_L6, seq_len=seq_len, bits=precision).items():
        if comp in LINEAR_COMPONENTS:
            flops += row["flops"]
            ms += sum(fit[comp][f] * v for f, v in row.items())
    return flops, ms


class CostModel:
    """Latency, peak memory and size of a candidate shape on a target.

    ``table`` is the host calibration (:func:`load_host_table`); ``device_table``
    a table measured on the target itself (found next to the target file or in
    the cache by :meth:`for_target`). ``runtime`` defaults to the target's
    preferred runtime.

    Example::

        cm = CostModel.for_target(load_target("pixel-7"))
        cm.predict(shape, bits="int8", embeddings="int8", seq_len=128, threads=2)
    """

    def __init__(self, target: Target, table: CostTable, *, host: Target | None = None, device_table: CostTable | None = None,
                 runtime: str | None = None) -> None:  # fmt: skip
        self.target = target
        self.table = table
        self.device_table = device_table
        self.runtime = runtime or target.runtime
        if self.runtime == "native":  # the native runtime runs the same .pte through the same XNNPACK delegate
            self.runtime = "executorch"
        self.host = host
        self._runtime_gflops: float | None = None
        self.is_host = target.name == "host" or (host is not None and target.source == host.source)
        if not self.is_host and device_table is None and host is None:
            raise ValueError("transferring to a device needs the host target (load_target('host'))")

    @classmethod
    def for_target(cls, target: Target, *, table: CostTable | None = None, runtime: str | None = None) -> "CostModel":
        """The cost model for ``target``: its measured table if one exists, else the host calibration transferred."""
        from edgenlp.targets.target import load_target

        device_table = None
        p = device_table_file(target)
        if p is not None:
            device_table = CostTable.load(p)
            log.info("using the table measured on %s: %s", target.name, p)
        if table is None:
            table = device_table if device_table is not None else load_host_table(fallback=True)
        host = load_target("host") if target.name != "host" else target
        return cls(target, table, host=host, device_table=device_table, runtime=runtime)

    # ---- coefficients

    def _table_runtime(self, table: CostTable) -> tuple[str, bool]:
        """The runtime whose rows stand for ``self.runtime`` in ``table`` (another one, estimated, when it has none)."""
        have = {r for r, _, _ in table.fits}
        if self.runtime in have or not have:
            return self.runtime, False
        return sorted(have)[0], True

    def _fit(self, table: CostTable, precision: str, threads: int) -> tuple[dict | None, bool]:
        """Coefficients for (runtime, precision, threads) from ``table``; the bool says whether interpolated or borrowed."""
        fits = table.fits
        runtime, borrowed = self._table_runtime(table)
        exact = fits.get((runtime, precision, threads))
        if exact is not None:
            return exact, borrowed
        ones = fits.get((runtime, precision, 1))
        if ones is None:
            return None, False
        twos = fits.get((runtime, precision, 2))
        out = {}
        for comp, coefs in ones.items():
            out[comp] = {f: _amdahl(c, twos[comp][f] if twos else None, FEATURE_KIND[f], threads) for f, c in coefs.items()}
        return out, True

    def _rates(self, precision: str, threads: int, *, on_host: bool) -> dict[str, float]:
        """Multipliers per feature kind that move host fp32 coefficients to (device, precision, threads)."""
        host = self.host if self.host is not None else self.target
        dev = host if on_host else self.target

        def sustained(t: Target, prec: str, n: int) -> float:
            n = min(n, t.cores)
            r = t.throughput(precision=prec, threads=n)
            return r * (PEAK_EFFICIENCY if t.throughput_kind == "peak" else 1.0)

        # the table machine's speed when it was measured: the one-thread GEMM rate recorded with the table (a shared
        # machine runs slower than its file says); the host file's sustained rate otherwise
        hf = float(self.table.notes.get("fp32_gemm_gflops") or sustained(host, "fp32", 1))
        if on_host:
            return {"compute": sustained(host, "fp32", 1) / sustained(host, precision, 1), "vector": 1.0, "call": 1.0, "memory": 1.0}
        # compute moves by the rate the runtime itself reached on the table machine, not by a library GEMM's: torch.mm
        # ran at 0.5x XNNPACK's rate on one host and 1.4x on another, which made every device estimate host-dependent
        eff = self.runtime_gflops() or hf
        return {
            "compute": eff / sustained(dev, precision, 1),
            "vector": eff / sustained(dev, "fp32", 1),
            "call": eff / sustained(dev, "fp32", 1),
            "memory": host.bandwidth_gbps * (hf / sustained(host, "fp32", 1)) / dev.bandwidth_gbps,
        }

    def runtime_gflops(self, *, seq_len: int = 128) -> float | None:
        """fp32 GFLOP/s the runtime reached on the linear layers of MiniLM-L6 at ``seq_len``, 1 thread, per the host table.

        This is what device transfers divide by: a device's sustained rate
        (:data:`PEAK_EFFICIENCY` of its peak) is the same runtime's expected rate there.
        """
        if self._runtime_gflops is None:
            fit, _ = self._fit(self.table, "fp32", 1)
            if fit is None:
                return None
            flops, ms = _linear_cost(fit, "fp32", seq_len=seq_len)
            self._runtime_gflops = flops / (ms * 1e6) if ms > 0 else 0.0
        return self._runtime_gflops or None

    def _coefficients(self, precision: str, threads: int) -> tuple[dict, bool, str]:
        """(coefficients, estimated, basis) for one precision."""
        if self.device_table is not None:
            fit, interp = self._fit(self.device_table, precision, threads)
            if fit is not None:
                return fit, interp, f"measured on {self.target.name}" + (" (threads interpolated)" if interp else "")
            if precision == "int4":
                fit, _ = self._fit(self.device_table, "int8", threads)
                if fit is not None:
                    return fit, True, f"{self.target.name} int8 table with int4 weight bytes"
            fp, interp = self._fit(self.device_table, "fp32", threads)
            if fp is not None:
                return self._scale(fp, precision, 1, on_host=True), True, f"{self.target.name} fp32 table, {precision} by rate ratio"
        if self.is_host:
            fit, interp = self._fit(self.table, precision, threads)
            if fit is not None:
                return fit, interp, "host calibration" + (" (threads interpolated)" if interp else "")
            if precision == "int4":  # int4 runs int8 kernels on unpacked weights: the int8 fit with half the weight bytes
                fit, _ = self._fit(self.table, "int8", threads)
                if fit is not None:
                    return fit, True, "host int8 calibration with int4 weight bytes"
            fp, _ = self._fit(self.table, "fp32", threads)
            if fp is None:
                raise EdgeNLPError(f"the host cost table has no {self.runtime} rows; run `edgenlp targets calibrate host`")
            return self._scale(fp, precision, 1, on_host=True), True, f"host fp32 calibration, {precision} by rate ratio"
        fp, _ = self._fit(self.table, "fp32", 1)
        if fp is None:
            raise EdgeNLPError(f"the host cost table has no {self.runtime} rows; run `edgenlp targets calibrate host`")
        fp2, _ = self._fit(self.table, "fp32", 2)
        scaled = self._scale(fp, precision, threads, on_host=False, two=fp2)
        basis = f"host fp32 calibration transferred to {self.target.name} by throughput/bandwidth ratios"
        penalty = self.kernel_penalty(precision)
        if penalty > 1.0:
            scaled = {comp: ({f: c * penalty for f, c in cs.items()} if comp in LINEAR_COMPONENTS else cs) for comp, cs in scaled.items()}
            basis += f"; linears x{penalty:.2f}, the host's measured {precision} : {PRECISIONS[PRECISIONS.index(precision) - 1]} ratio"
        return scaled, True, basis

    def kernel_penalty(self, precision: str, *, seq_len: int = 128) -> float:
        """How much slower the host measured ``precision``'s linears than the next wider precision's (1.0: not slower).

        A device without its own table gets int4 from int8's throughput, which
        cannot see kernel overheads: XNNPACK's group-wise int4 kernels apply a
        scale per group of 32 inputs and ran MiniLM-L6's linears 1.75x slower
        than int8 on an AVX-512 host. Where the host table measured both, the
        ratio carries over to the device estimate (still labelled estimated).
        """
        i = PRECISIONS.index(precision)
        if i < 2:
            return 1.0
        narrow, _ = self._fit(self.table, precision, 1)
        wide, _ = self._fit(self.table, PRECISIONS[i - 1], 1)
        measured = {p.split("/")[1] for p in self.table.notes.get("measured", []) if p.startswith(f"{self._table_runtime(self.table)[0]}/")}
        if narrow is None or wide is None or not {precision, PRECISIONS[i - 1]} <= measured:
            return 1.0
        w = _linear_cost(wide, PRECISIONS[i - 1], seq_len=seq_len)[1]
        return max(1.0, _linear_cost(narrow, precision, seq_len=seq_len)[1] / w) if w > 0 else 1.0

    def _monotone_coefficients(self, precision: str, threads: int) -> tuple[dict, bool, str]:
        """Coefficients for ``precision``; derived ones are capped by the next wider precision's.

        Weight bytes per parameter already shrink with the precision; capping
        the per-unit costs of a precision that was not measured (derived by
        rate ratios) makes fewer bits never predict slower. A precision
        measured on this machine keeps its measured costs, even where the
        narrower kernels are slower (ONNX Runtime int8 on an AVX2-only CPU):
        the planner should know.
        """
        coefs, est, basis = self._coefficients(precision, threads)
        i = PRECISIONS.index(precision)
        if i == 0 or basis.startswith(("host calibration", "measured on")) or "measured" in basis.split(";")[-1]:
            return coefs, est, basis
        wider, _, _ = self._monotone_coefficients(PRECISIONS[i - 1], threads)
        capped = {comp: {f: min(c, wider[comp][f]) for f, c in cs.items()} for comp, cs in coefs.items()}
        return capped, est, basis

    def _scale(self, fp: dict, precision: str, threads: int, *, on_host: bool, two: dict | None = None) -> dict:
        rates = self._rates(precision, threads, on_host=on_host)
        out = {}
        for comp, coefs in fp.items():
            out[comp] = {}
            for f, c in coefs.items():
                kind = FEATURE_KIND[f]
                # FLOPs outside the linears (QKᵀ/AV, the head) stay fp32 at every weight precision
                rate = rates["vector"] if kind == "compute" and comp not in LINEAR_COMPONENTS else rates[kind]
                c2 = two[comp][f] if two else None
                out[comp][f] = _amdahl(c, c2, kind, threads) * rate
        return out

    # ---- prediction

    def predict(self, shape: EncoderShape, *, bits: Bits = "fp32", embeddings: str | None = None, seq_len: int = 128,
                threads: int = 1, num_labels: int = 2) -> Prediction:  # fmt: skip
        """Latency (ms), peak memory (MB) and model size (MB) of ``shape`` stored at ``bits`` on the target."""
        if embeddings not in (None, "fp32", "int8", "int4"):
            raise ValueError(f"embeddings must be None, 'int8' or 'int4', got {embeddings!r}")
        if threads < 1 or threads > self.target.cores:
            raise EdgeNLPError(f"{self.target.name} has {self.target.cores} cores; --threads {threads} is out of range")
        if seq_len > shape.max_positions:
            raise ValueError(f"seq_len {seq_len} exceeds the model's {shape.max_positions} positions")
        feats = features(shape, seq_len=seq_len, bits=bits, num_labels=num_labels)
        coef_cache: dict[str, tuple[dict, bool, str]] = {}
        comps: dict[str, float] = {}
        estimated, bases = False, []
        for (comp, prec), row in feats.items():
            if prec not in coef_cache:
                coef_cache[prec] = self._monotone_coefficients(prec, threads)
                estimated |= coef_cache[prec][1]
                bases.append(f"{prec}: {coef_cache[prec][2]}")
            coefs = coef_cache[prec][0][comp]
            comps[comp] = comps.get(comp, 0.0) + sum(coefs[f] * v for f, v in row.items())
        size = size_bytes(shape, bits=bits, embeddings=embeddings, num_labels=num_labels)
        mem = peak_memory_bytes(shape, bits=bits, embeddings=embeddings, seq_len=seq_len, runtime=self.runtime,
                                base_mb=self.target.base_memory_mb, num_labels=num_labels)  # fmt: skip
        runtime, borrowed = self._table_runtime(self.device_table or self.table)
        if borrowed:
            bases.append(f"no {self.runtime} rows in the table: {runtime} rows stand in")
        reference = bool(self.table.notes.get("shipped_reference")) and self.device_table is None
        if reference:
            bases.append("reference table measured on another host")
        estimated = estimated or reference or (not self.is_host and self.device_table is None)
        return Prediction(sum(comps.values()), mem / 2**20, size / 2**20, estimated, comps, "; ".join(bases))

    def predict_bundle(self, bundle, *, seq_len: int, threads: int = 1) -> Prediction:
        """The prediction for a built bundle: its manifest's shape and the precision its recipe's quantize step records."""
        from edgenlp.bundle import Bundle

        b = bundle if isinstance(bundle, Bundle) else Bundle.open(bundle, verify=False)
        try:
            shape = EncoderShape.from_dict(b.manifest["model"]["shape"])
        except (KeyError, TypeError, ValueError) as exc:
            raise EdgeNLPError(f"{b.path}/manifest.json: model.shape is missing or invalid ({exc})") from None
        bits, embeddings = bundle_precision(b.recipe, shape.num_layers)
        return self.predict(shape, bits=bits, embeddings=embeddings, seq_len=seq_len, threads=threads, num_labels=len(b.labels))


def bundle_precision(recipe, num_layers: int) -> tuple[Bits, str | None]:
    """(per-layer bits, embedding scheme) from a recipe's ``quantize`` step (fp32 without one).

    Reads the step's config as a dict (``scheme``, ``layer_bits`` of
    ``(module, 32|8|4)``, ``embeddings``) so it does not depend on the
    quantization package being importable.
    """
    from edgenlp.models.families import LAYER_LINEARS

    cfg = None
    for step in recipe or ():
        if getattr(step, "type", None) == "quantize":
            c = step.config
            cfg = c.to_dict() if hasattr(c, "to_dict") else dict(c)
    if not cfg:
        return "fp32", None
    name = {32: "fp32", 8: "int8", 4: "int4"}
    default = {"int8": "int8", "int4": "int4"}.get(cfg.get("scheme"), "int8")
    explicit = {str(n): int(b) for n, b in cfg.get("layer_bits") or ()}
    per = []
    for i in range(num_layers):
        widths = [name.get(explicit[f"layers.{i}.{p}"], default) if f"layers.{i}.{p}" in explicit else default for p in LAYER_LINEARS]
        per.append(dominant(widths))
    return tuple(per), cfg.get("embeddings")


def reference_table_path() -> Path:
    """The calibration shipped with edgenlp (measured on the machine ``targets/host.toml`` describes)."""
    from edgenlp.targets.target import targets_dir

    return targets_dir() / "host.costs.json"


def cost_table_sources(target: Target) -> list[Path]:
    """The table files :meth:`CostModel.for_target` reads for ``target`` as things stand, for stage fingerprints.

    A device-measured table for a non-host target (beside its file or in the
    cache), then the host calibration of this machine, or the shipped
    reference table while there is none: recalibrating changes this list's
    content, so a plan made from the old table is not reused.
    """
    return [p for p in (device_table_file(target), host_table_file()) if p is not None]


def device_table_file(target: Target) -> Path | None:
    """The table measured on ``target`` (beside its file, else in the cache); None for the host or when unmeasured."""
    if target.name == "host":
        return None
    return next((p for p in (measured_table_path(target), device_table_cache_path(target.name)) if p.is_file()), None)


def host_table_file() -> Path | None:
    """This machine's calibration, else the shipped reference table; None when neither exists."""
    return next((p for p in (host_table_path(), reference_table_path()) if p.is_file()), None)


def load_host_table(path: str | Path | None = None, *, fallback: bool = False) -> CostTable:
    """The host calibration for this CPU and runtime versions (see :func:`host_table_path`).

    With ``fallback=True`` and no calibration of this machine, the shipped
    reference table is used (its predictions are labelled estimated: another
    machine measured them).
    """
    path = Path(path) if path else host_table_path()
    if path.is_file():
        return CostTable.load(path)
    ref = reference_table_path()
    if fallback and ref.is_file():
        log.warning("no cost calibration for this host at %s; using the shipped reference table (run `edgenlp targets calibrate host`)", path)
        table = CostTable.load(ref)
        table.notes = {**table.notes, "shipped_reference": True}
        return table
    raise EdgeNLPError(f"no host cost calibration at {path}; run `edgenlp targets calibrate host` (10-20 minutes on 2 cores)")
