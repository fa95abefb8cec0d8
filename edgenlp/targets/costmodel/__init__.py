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

**Transfer.** On a device without a measured table, the fp32 coefficients of
the shipped reference table (``targets/host.costs.json``, measured on the
machine ``targets/host.toml`` describes, whose rates the transfer uses) are
scaled term by term: compute terms (FLOPs, activations, calls) by the
reference's sustained fp32 rate ÷ the device's sustained rate for the
candidate's precision on the cores the threads run on, weight-byte terms by
reference ÷ device bandwidth. Spec-sheet peaks are derated by
:data:`PEAK_EFFICIENCY`. Such predictions are ``estimated=True``. This
machine's own calibration never prices a device, so a device's plan is the
same on every host. A table measured on the device
(``targets/NAME.measured.json`` or the cache, written by ``edgenlp targets
calibrate NAME --on URI``) replaces the transfer.

**Precisions.** The table is keyed by precision: ``int8``/``int4`` rows are
used where they were measured (``estimated=False``); otherwise the fp32 fit is
transferred to the precision by the same rate ratio (``estimated=True``).
A device's int4 is int8's throughput with half the weight bytes, times the
int4 : int8 kernel penalty the table measured on its linears
(:meth:`CostModel.kernel_penalty`). The word table's int8/int4 schemes scale
the embedding gather by the ratio the table measured
(:meth:`CostModel.embedding_ratio`).

**Tolerance.** :meth:`CostModel.ranking_tolerance` is the pricing table's own
leave-one-shape-out error: latencies closer than that are not told apart
(the planner's ties).

**Memory and size** are analytic, from :mod:`edgenlp.models.arithmetic` (the
formulas the profiler applies too): size is the model file (weights at
their stored precision, per-channel fp32 scales, per-group for int4);
peak memory is the runtime's resident base + the weights as read from the
file + the copy the backend packs for its kernels (XNNPACK / ONNX Runtime
prepack) + the largest layer's activations (+ the whole embedding table for
ONNX Runtime, which reads the model into memory rather than mapping it).

**Layout.** This package's modules, each importable on its own; every public
name is re-exported here, so ``from edgenlp.targets.costmodel import X`` is
the way to import them:

``features``  per-layer precisions, the latency features, file size and peak memory of a shape
``fitting``   :class:`Observation` and the non-negative least-squares fit
``tables``    :class:`CostTable` (``targets/*.costs.json``, ``*.measured.json``, the cache) and which table prices a target
``predict``   :class:`CostModel`: coefficients per precision and thread count, transfer to a device, :class:`Prediction`
``dynamic``   :func:`expected_latency` of a dynamic model (early exits, token pruning) from per-segment statistics
``sparse``    the measured block-sparse : dense ratios (``targets/sparse-ratios.json``) that price block-sparse linears
              (:meth:`CostModel.sparse_factor`) on the machine kind they were timed on, and nowhere else
"""

from __future__ import annotations

from edgenlp.targets.costmodel.dynamic import (STATISTICS, ExitStats, SegmentStats, exit_latency, expected_latency,
                                              segment_stats_from_profile)
from edgenlp.targets.costmodel.features import (COMPONENT_FEATURES, FEATURE_KIND, INT4_GROUP, LINEAR_COMPONENTS, MINILM_L6, MIXED, Bits,
                                                bundle_precision, dominant, features, layer_bits, peak_memory_bytes, resolve_mixed,
                                                size_bytes, weight_bytes)  # fmt: skip
from edgenlp.targets.costmodel.fitting import Observation, cross_validated_error, embedding_ratios, fit_coefficients
from edgenlp.targets.costmodel.predict import DEFAULT_PARALLEL, DEFAULT_TOLERANCE, PEAK_EFFICIENCY, CostModel, Prediction
from edgenlp.targets.costmodel.sparse import SPARSE_RATIOS_SCHEMA, linear_factor, load_sparse_ratios, sparse_ratio
from edgenlp.targets.costmodel.tables import (TABLE_SCHEMA, CostTable, cache_dir, cost_table_sources, cpu_key, device_table_cache_path,
                                              device_table_file, host_table_file, host_table_path, key_digest, load_host_table,
                                              load_reference_table, reference_table_path)  # fmt: skip

__all__ = [
    "COMPONENT_FEATURES", "DEFAULT_PARALLEL", "DEFAULT_TOLERANCE", "FEATURE_KIND", "INT4_GROUP", "LINEAR_COMPONENTS", "MINILM_L6", "MIXED", "PEAK_EFFICIENCY",
    "TABLE_SCHEMA", "Bits", "CostModel", "CostTable", "Observation", "Prediction", "bundle_precision", "cache_dir", "cost_table_sources",
    "cpu_key", "cross_validated_error", "device_table_cache_path", "device_table_file", "dominant", "embedding_ratios",
    "features", "fit_coefficients", "host_table_file",
    "host_table_path", "key_digest", "layer_bits", "load_host_table", "load_reference_table", "peak_memory_bytes", "reference_table_path", "resolve_mixed",
    "size_bytes", "weight_bytes", "STATISTICS", "SegmentStats", "expected_latency", "segment_stats_from_profile",
    "ExitStats", "exit_latency", "SPARSE_RATIOS_SCHEMA", "linear_factor", "load_sparse_ratios", "sparse_ratio",
]  # fmt: skip
