"""The cost model: coefficients for (runtime, precision, threads) from a table, transferred to a target, and predictions.

See :mod:`edgenlp.targets.costmodel` for the model (features, fit, transfer, precisions).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from typing import Any

from edgenlp.errors import EdgeNLPError
from edgenlp.models.encoder import EncoderShape
from edgenlp.targets.costmodel.features import (FEATURE_KIND, INT4_GROUP, LINEAR_COMPONENTS, MINILM_L6, Bits, bundle_precision,
                                                features, peak_memory_bytes, size_bytes)  # fmt: skip
from edgenlp.targets.costmodel.tables import CostTable, device_table_file, load_host_table, load_reference_table
from edgenlp.targets.target import PRECISIONS, Target

log = logging.getLogger(__name__)

PEAK_EFFICIENCY = 0.6  # sustained / spec-sheet peak for XNNPACK GEMMs on Arm cores (assumption; a measured table replaces it)
DEFAULT_TOLERANCE = 0.10  # relative latency error assumed when a table cannot cross-validate its fits (fewer than 3 shapes)
DEFAULT_PARALLEL = {"compute": 0.9, "vector": 0.7, "memory": 0.5, "call": 0.0}  # Amdahl fraction when only 1 thread was measured


@dataclass(frozen=True)
class Prediction:
    """Predicted cost of one candidate on one target. ``estimated`` marks transferred or assumed numbers.

    ``size_mb`` is the model file's weights in MB of 10^6 bytes (what a size budget and a bundle's files are measured
    in); ``peak_memory_mb`` is resident memory in MiB.
    """

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


def _model_cost(fit: dict, precision: str, *, seq_len: int) -> float:
    """Predicted ms of all of :data:`MINILM_L6` at ``precision`` under one fit's coefficients."""
    return sum(sum(fit[comp][f] * v for f, v in row.items()) for (comp, _), row in
               features(MINILM_L6, seq_len=seq_len, bits=precision).items())  # fmt: skip


def measured_ratios(notes: dict, name: str, *, runtime: str) -> dict[str, float]:
    """``{"seq/threads": ratio}`` of one end-to-end ratio a table's notes carry (``notes["measured_ratios"]``, written by
    ``tools/targets/reference_ratios.py``) for ``runtime``; empty when it has none."""
    doc = notes.get("measured_ratios") or {}
    if doc.get("runtime", "executorch") != runtime:
        return {}
    return {k: float(v) for k, v in (doc.get(name) or {}).items()}


def end_to_end_ratio(notes: dict, name: str, *, runtime: str, seq_len: int, threads: int = 1) -> float | None:
    """One of :func:`measured_ratios` at ``seq_len`` (linear between the measured sequence lengths, clamped), ``threads``."""
    pts = sorted((int(k.split("/")[0]), v) for k, v in measured_ratios(notes, name, runtime=runtime).items()
                 if int(k.split("/")[1]) == threads)  # fmt: skip
    if not pts:
        return None
    if seq_len <= pts[0][0]:
        return pts[0][1]
    for (s0, r0), (s1, r1) in zip(pts, pts[1:]):
        if seq_len <= s1:
            return r0 + (r1 - r0) * (seq_len - s0) / (s1 - s0)
    return pts[-1][1]


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
        """The cost model for ``target``.

        A device: the table measured on it if one exists, else the shipped
        reference table transferred with the reference host's rates
        (``targets/host.toml`` as written). This machine's calibration never
        prices a device, so the plan for a device is the same on every host.
        The ``host`` target: this machine's calibration, else (with a warning,
        labelled estimated) the reference table.
        """
        from edgenlp.targets.target import reference_host

        device_table = None
        p = device_table_file(target)
        if p is not None:
            device_table = CostTable.load(p)
            log.info("using the table measured on %s: %s", target.name, p)
        if target.name == "host":
            return cls(target, table if table is not None else load_host_table(fallback=True), host=target, runtime=runtime)
        if table is None:
            table = device_table if device_table is not None else load_reference_table()
        return cls(target, table, host=reference_host(), device_table=device_table, runtime=runtime)

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
        src = "the reference table's" if self.table.notes.get("shipped_reference") else "the host table's"
        basis = f"{src} fp32 fit transferred to {self.target.name} by throughput/bandwidth ratios"
        penalty = self.kernel_penalty(precision)
        if penalty > 1.0:
            scaled = {comp: ({f: c * penalty for f, c in cs.items()} if comp in LINEAR_COMPONENTS else cs) for comp, cs in scaled.items()}
            wider = PRECISIONS[PRECISIONS.index(precision) - 1]
            how = (f"the table's measured {precision} : {wider} ratio" if self._kernel_penalty(precision)[1] == "grid" else
                   f"the measured {precision} : {wider} ratio ({self.table.notes['measured_ratios']['source']}, end to end, "
                   f"on the linears)")  # fmt: skip
            basis += f"; linears x{penalty:.2f}, {how}"
        return scaled, True, basis

    def kernel_penalty(self, precision: str, *, seq_len: int = 128) -> float:
        """How much slower the host measured ``precision``'s linears than the next wider precision's (1.0: not slower).

        A device without its own table gets int4 from int8's throughput, which
        cannot see kernel overheads: XNNPACK's group-wise int4 kernels apply a
        scale per group of 32 inputs and ran MiniLM-L6's linears 1.75x slower
        than int8 on an AVX-512 host. Where the host table measured both, the
        ratio carries over to the device estimate (still labelled estimated).
        """
        return self._kernel_penalty(precision, seq_len=seq_len)[0]

    def _kernel_penalty(self, precision: str, *, seq_len: int = 128) -> tuple[float, str]:
        """(:meth:`kernel_penalty`, where it comes from: ``"grid"``, the table's end-to-end ``"ratio"``, or ``""``: none)."""
        i = PRECISIONS.index(precision)
        if i < 2:
            return 1.0, ""
        wider = PRECISIONS[i - 1]
        narrow, _ = self._fit(self.table, precision, 1)
        wide, _ = self._fit(self.table, wider, 1)
        runtime = self._table_runtime(self.table)[0]
        measured = {p.split("/")[1] for p in self.table.notes.get("measured", []) if p.startswith(f"{runtime}/")}
        if narrow is not None and wide is not None and {precision, wider} <= measured:
            w = _linear_cost(wide, wider, seq_len=seq_len)[1]
            return (max(1.0, _linear_cost(narrow, precision, seq_len=seq_len)[1] / w) if w > 0 else 1.0), "grid"
        # no grid of the narrow precision: the end-to-end ratio measured on the table's machine, all of it put on the linears
        ratio = end_to_end_ratio(self.table.notes, f"{precision}_vs_{wider}", runtime=runtime, seq_len=seq_len)
        if ratio is None or wide is None or wider not in measured:
            return 1.0, ""
        total = _model_cost(wide, wider, seq_len=seq_len)
        linear = _linear_cost(wide, wider, seq_len=seq_len)[1]
        return (max(1.0, 1.0 + (ratio - 1.0) * total / linear) if linear > 0 else 1.0), "ratio"

    def ranking_tolerance(self, precisions: tuple[str, ...] = PRECISIONS, *, threads: int = 1) -> float:
        """The pricing table's own error: the largest leave-one-shape-out error of its fits for these precisions.

        Latencies that differ by less than this fraction are not told apart by
        the model (the planner calls them a tie). A precision the table did
        not measure at ``threads`` falls back to its 1-thread fit; without any,
        :data:`DEFAULT_TOLERANCE`. For a device without its own table the
        transfer adds error of its own, which no measurement bounds yet.
        """
        table = self.device_table if self.device_table is not None else self.table
        runtime, _ = self._table_runtime(table)
        cv = table.cv_error
        errs = [cv.get((runtime, p, threads), cv.get((runtime, p, 1))) for p in precisions]
        errs = [e for e in errs if e is not None]
        return max(errs) if errs else DEFAULT_TOLERANCE

    def embedding_ratio(self, scheme: str) -> tuple[float, str]:
        """(embedding latency with the word table at ``scheme`` / with it fp32, basis) from the pricing table's measured pairs.

        A scheme the table did not measure keeps the fp32 table's cost, and the basis says so.
        """
        table = self.device_table if self.device_table is not None else self.table
        runtime, _ = self._table_runtime(table)
        ratio = table.embedding_ratios.get((runtime, scheme))
        if ratio is None:
            points = measured_ratios(table.notes, f"emb_{scheme}", runtime=runtime)
            if points:
                src = table.notes["measured_ratios"]["source"]
                seen = ", ".join(f"x{v:.2f} at {k}" for k, v in points.items())
                return 1.0, (f"{scheme} word table: end to end {seen} seq/threads against the fp32 table (measured, {src}): "
                             f"the gather too small to tell apart, priced as the fp32 table's")  # fmt: skip
            return 1.0, f"{scheme} word table: not measured, priced as the fp32 table"
        return ratio, f"{scheme} word table: x{ratio:.2f} the fp32 table's gather (measured)"

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

    def sparse_factor(self, precision: str, block_sparsity: float, *, block: str = "1x4") -> tuple[float | None, str]:
        """(factor on the cost of linears at ``precision`` with ``block_sparsity`` of their blocks zero, why).

        The factor is None where it is not known: int4 (no sparse kernel),
        ONNX Runtime (it runs the linears dense: only the accuracy would
        change), a target other than this machine, or a machine, block or
        sparsity that ``targets/sparse-ratios.json`` did not measure (no
        extrapolation). Below the sparsity at which export keeps the dense
        GEMM (:data:`edgenlp.sparse.convert.MIN_SPARSITY`) the factor is 1.
        """
        if block_sparsity <= 0:
            return 1.0, ""
        key = (precision, float(block_sparsity), block)
        cache = self.__dict__.setdefault("_sparse_factors", {})  # the planner asks once per candidate: read the file once
        if key not in cache:
            cache[key] = self._sparse_factor(precision, block_sparsity, block=block)
        return cache[key]

    def _sparse_factor(self, precision: str, block_sparsity: float, *, block: str) -> tuple[float | None, str]:
        from edgenlp.sparse.convert import MIN_SPARSITY
        from edgenlp.targets.costmodel.features import sparse_runs
        from edgenlp.targets.costmodel.sparse import linear_factor, load_sparse_ratios, same_machine, sparse_ratio
        from edgenlp.targets.costmodel.tables import cpu_key

        if precision not in MIN_SPARSITY:
            return None, f"{precision} linears have no block-sparse kernel"
        if self.runtime != "executorch":
            return None, f"{self.runtime} runs block-sparse linears dense"
        if not sparse_runs(precision, block_sparsity):
            return 1.0, f"{precision} linears at {block_sparsity:.0%} block sparsity stay dense (the dense GEMM is faster)"
        doc = load_sparse_ratios()
        if doc is None or doc.get("block") != block:
            return None, f"no measured {block} sparse : dense ratios"
        machine = f"{doc['machine'].get('cpu')} ({' '.join(doc['machine'].get('isa', []))})"
        if not self.is_host or not same_machine(doc, cpu_key()):
            return None, f"block-sparse kernels timed on {machine} only, not on {self.target.name}"
        ratio = sparse_ratio(doc, precision, block_sparsity)
        if ratio is None:
            return None, f"{precision} at {block_sparsity:.0%} block sparsity: outside the measured sparsities"
        fit = self._monotone_coefficients(precision, int(doc.get("threads", 1)))[0]
        total = _model_cost(fit, precision, seq_len=int(doc["seq_len"]))
        factor = linear_factor(ratio, total, _linear_cost(fit, precision, seq_len=int(doc["seq_len"]))[1])
        return factor, (f"block-sparse {precision} linears at {block_sparsity:.0%}: x{factor:.2f} their dense cost "
                        f"(x{ratio:.2f} the dense bundle end to end on {machine}, {doc['source']})")

    def predict(self, shape: EncoderShape, *, bits: Bits = "fp32", embeddings: str | None = None, seq_len: int = 128,
                threads: int = 1, num_labels: int = 2, group_size: int = INT4_GROUP,
                block_sparsity: float = 0.0) -> Prediction:  # fmt: skip
        """Latency (ms), peak memory (MB) and model size (MB) of ``shape`` stored at ``bits`` on the target.

        ``group_size`` is the int4 weights' in-features per scale (what their
        stored bytes count; the fitted coefficients are those of the calibration).
        ``block_sparsity`` is the fraction of 1x4 blocks zero in every encoder
        linear: their cost takes :meth:`sparse_factor` (an error where it is
        not known), their bytes the packed arrays'.
        """
        if embeddings not in (None, "fp32", "int8", "int4"):
            raise ValueError(f"embeddings must be None, 'int8' or 'int4', got {embeddings!r}")
        if threads < 1 or threads > self.target.cores:
            raise EdgeNLPError(f"{self.target.name} has {self.target.cores} cores; --threads {threads} is out of range")
        if seq_len > shape.max_positions:
            raise ValueError(f"seq_len {seq_len} exceeds the model's {shape.max_positions} positions")
        feats = features(shape, seq_len=seq_len, bits=bits, num_labels=num_labels, group_size=group_size)
        coef_cache: dict[str, tuple[dict, bool, str]] = {}
        sparse: dict[str, tuple[float | None, str]] = {}
        comps: dict[str, float] = {}
        estimated, bases = False, []
        for (comp, prec), row in feats.items():
            if prec not in coef_cache:
                coef_cache[prec] = self._monotone_coefficients(prec, threads)
                estimated |= coef_cache[prec][1]
                bases.append(f"{prec}: {coef_cache[prec][2]}")
            coefs = coef_cache[prec][0][comp]
            ms = sum(coefs[f] * v for f, v in row.items())
            if block_sparsity > 0 and comp in LINEAR_COMPONENTS:
                if prec not in sparse:
                    sparse[prec] = self.sparse_factor(prec, block_sparsity)
                    if sparse[prec][0] is None:
                        raise EdgeNLPError(f"cannot price block sparsity on {self.target.name}: {sparse[prec][1]}")
                    bases.append(sparse[prec][1])
                ms *= sparse[prec][0]
            comps[comp] = comps.get(comp, 0.0) + ms
        if embeddings in ("int8", "int4") and "embedding" in comps:
            ratio, basis = self.embedding_ratio(embeddings)
            comps["embedding"] *= ratio
            bases.append(basis)
        size = size_bytes(shape, bits=bits, embeddings=embeddings, num_labels=num_labels, group_size=group_size,
                          block_sparsity=block_sparsity)
        mem = peak_memory_bytes(shape, bits=bits, embeddings=embeddings, seq_len=seq_len, runtime=self.runtime,
                                base_mb=self.target.base_memory_mb, num_labels=num_labels, group_size=group_size,
                                block_sparsity=block_sparsity)  # fmt: skip
        runtime, borrowed = self._table_runtime(self.device_table or self.table)
        if borrowed:
            bases.append(f"no {self.runtime} rows in the table: {runtime} rows stand in")
        reference = bool(self.table.notes.get("shipped_reference")) and self.device_table is None
        if reference and self.is_host:
            bases.append("reference table measured on another host")
        estimated = estimated or reference or (not self.is_host and self.device_table is None)
        # size in MB of 10^6 bytes, as files, size budgets and the quantizer's --size-mb are measured; memory in MiB
        return Prediction(sum(comps.values()), mem / 2**20, size / 1e6, estimated, comps, "; ".join(bases))

    def predict_bundle(self, bundle, *, seq_len: int, threads: int = 1) -> Prediction:
        """The prediction for a built bundle: its manifest's shape and the precision its recipe's quantize step records."""
        from edgenlp.bundle import Bundle

        b = bundle if isinstance(bundle, Bundle) else Bundle.open(bundle, verify=False)
        try:
            shape = EncoderShape.from_dict(b.manifest["model"]["shape"])
        except (KeyError, TypeError, ValueError) as exc:
            raise EdgeNLPError(f"{b.path}/manifest.json: model.shape is missing or invalid ({exc})") from None
        bits, embeddings = bundle_precision(b.recipe, shape.num_layers)
        kw = dict(bits=bits, embeddings=embeddings, seq_len=seq_len, threads=threads, num_labels=len(b.labels))
        blocks = 0.0
        for step in b.recipe or ():  # a sparsify step: block-sparse linears (the last one counts)
            if getattr(step, "type", None) == "sparsify":
                c = step.config.to_dict() if hasattr(step.config, "to_dict") else dict(step.config)
                blocks = float(c.get("sparsity") or 0.0)
        if blocks:
            try:
                return self.predict(shape, block_sparsity=blocks, **kw)
            except EdgeNLPError as exc:  # kernels not timed here: the dense price, saying so
                pred = self.predict(shape, **kw)
                return replace(pred, estimated=True, basis=f"{pred.basis}; block-sparse linears priced dense ({exc})")
        return self.predict(shape, **kw)
