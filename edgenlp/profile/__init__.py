"""Per-component profile of an encoder: analytic counts and measured latency on each runtime.

``edgenlp profile MODEL_OR_BUNDLE`` (or :func:`edgenlp.profile.api.profile`)
reports, for the rows of the classic BERT profiling table — ``embedding``,
``attn_qkv`` (linear before attention), ``attn_core`` (QKᵀ, softmax, AV),
``attn_out`` (linear after attention), ``ffn``, ``other`` (residual adds,
layer norms, pooler and classifier head) — parameters, stored weight bytes,
FLOPs, activation bytes and measured latency, each with its share of the total.

Modules:
  components   row names, module -> row mapping, the model's linear plan
  storage      weight bytes at the stored precision (hooks for quantization/sparsity code)
  analytic     params / bytes / FLOPs / activations from module shapes
  attribution  runtime operator events -> rows, by anchoring on the linears
  measure      the Measurer protocol, Measurement, the eager measurer
  executorch   ETDump + Inspector measurer (XNNPACK per-operator events)
  onnx         ONNX Runtime profiler measurer
  api          ProfileConfig, profile(), document building
  report       terminal/markdown tables and the PNG plots
  dynamic      dynamic bundles over a dataset: exits, tokens, weighted components, latency-accuracy curve

Document schema (one per (seq_len, threads); ``--json`` writes a list when
there are several). Keys marked * are always present::

    {
      "schema": "edgenlp.profile/1",
      "model"*: str, "source": str, "kind": "model" | "bundle",
      "seq_len"*: int, "batch": int, "threads"*: int, "runs": int, "warmup": int,
      "runtimes": [str],                       # eager, executorch, onnx, native
      "shape": {"hidden", "heads": [per layer], "head_dim", "ffn": [per layer], "num_labels"},
      "methods": {runtime: str},              # how latency was measured and attributed
      "definitions": {column: str},           # what each column counts
      "components"*: [
        {"name"*: "embedding"|"attn_qkv"|"attn_core"|"attn_out"|"ffn"|"other",
         "params"*: int, "flops"*: int, "weight_bytes"*: int, "activation_bytes"*: int,
         "weight_format": "fp32" | "int8" | ...,
         "latency_ms"*: {runtime: float},      # mean over the middle half of profiled runs
         "latency_median_ms": {runtime: float}, "latency_p90_ms": {runtime: float},
         "share_pct": {"params", "flops", "weight_bytes", "activation_bytes": float,
                       "latency": {runtime: float}}},   # percent of the total
        ...],
      "total"*: {"params", "flops", "weight_bytes", "activation_bytes": int,
                 "latency_ms": {runtime: float},        # median of plain end-to-end runs
                 "latency_p90_ms": {runtime: float},
                 "latency_min_ms": {runtime: float},     # fastest plain run: least disturbed on a shared machine
                 "components_sum_ms": {runtime: float},
                 "unattributed_ms": {runtime: float},    # total - components: dispatch, bindings, hooks
                 "profiled_total_ms": {runtime: float}}, # mean total of the middle-half profiled runs (those the components average)
      "artifact_bytes": {file: int},          # bundles: model.pte / model.onnx sizes
      "layers": [{"index": int, "components": [{name, params, flops, weight_bytes,
                  activation_bytes, weight_format, latency_ms}]}],   # with --per-layer
      "head": {...},                          # with --per-layer: pooler + classifier counts
      "device": {"runtime": str, "uri": str, "transport": "ssh"|"adb"|"qemu", "arch", "cpu_model", "cores",
                 "clusters": [{"cpus", "max_mhz", "core"}], "governors", "kernel", "os", "libc",
                 "mem_total_mb", "mem_available_mb", "tmp_free_mb", "isa", "emulated": str | None,
                 "software": {"edgenlp", "libedgenlp", "executorch", "runner_arch", "runner_sha256", "files"},
                 "cores_requested": "all"|"big"|"little", "cpus_used": [int]},  # with --on (edgenlp.boards)
      "devices": [{same as "device"}],        # instead of "device" when several boards are profiled together
      "environment"*: {"cpu": {...}, "versions": {...}, "platform": str},
      "dynamic": {                            # dynamic bundles with --data (edgenlp.profile.dynamic); shared by the
        "data": str, "split": "dev"|"train"|None, "n": int,   # documents of one thread count
        "rule": str, "threshold": float,      # the exit rule and the threshold profiled (--exit-threshold or the bundle's)
        "bundle_threshold": float, "exits": [int], "token_layers": [int], "num_layers": int,
        "runtimes": {runtime: {               # executorch, onnx, native: the runtimes asked for that run segments
          "accuracy": float,                  # percent, at the profiled threshold
          "latency_ms": {"mean", "p50", "p90", "max": float},   # per sentence at its real length, model only
          "exit_layers": {layer: int},        # sentences that answered at each exit
          "mean_exit_layer": float,
          "tokens_kept": [float | None],      # per layer, mean tokens it processed over the sentences that reached it
          "segments": [{"index", "layers": [first, last], "exit": bool, "tokens": bool,
                        "reach": float,       # share of sentences that ran it
                        "mean_tokens", "p90_tokens": float | None,   # tokens it ran on (null: never reached)
                        "length": int | None, # the length the runtime runs mean_tokens at (bucket; ONNX: itself)
                        "cost": {"flops": int, "latency_ms": float} | None}],   # one run at that length
          "components": [{"name", "flops", "activation_bytes", "latency_ms",   # sum over segments of reach x cost
                          "share_pct": {"flops", "latency_ms"}}],
          "total": {"flops", "activation_bytes", "latency_ms"},   # the expected cost of a sentence
          "static": {"accuracy", "latency_ms": {...}},           # the same data through the static methods
          "curve": [{"threshold", "accuracy", "latency_ms": {...}, "mean_exit_layer"}]}}}  # a few thresholds
    }

Nothing is imported at package import time; import the submodules.
"""
