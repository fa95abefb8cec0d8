"""``QuantizeConfig``: how a model's linears and word embeddings ship, recorded per layer.

>>> QuantizeConfig(scheme="int8", embeddings="int8")                       # doctest: +SKIP
>>> QuantizeConfig(scheme="mixed", size_mb=20.0, max_drop=1.0, trim_vocab=True)  # doctest: +SKIP

``layer_bits`` lists ``(module name, bits)`` with bits 32 (left fp32), 8 or 4;
names are :func:`edgenlp.quantize.schemes.linear_names` (``layers.0.query``,
``pooler``, ``classifier``). Empty means "every linear at the scheme's width";
the config recorded in a bundle's recipe always lists every linear, so the
manifest says exactly what shipped.
"""

from __future__ import annotations

from dataclasses import dataclass

from edgenlp.config import Config, check_bool, check_choice, check_positive, check_range, knob
from edgenlp.recipe import ParityPolicy

SCHEMES = ("int8", "int4", "mixed")
EMBEDDINGS = ("int8", "int4")
BITS = (32, 8, 4)
# The exit threshold of a dynamic model (edgenlp dynamic) once quantized: calibrated again on the quantized
# model, or the fp32 model's kept as it was.
EXIT_CALIBRATIONS = ("quantized", "fp32")
# What a dynamic model's early-exit heads (pooler + classifier) ship as: int8 like the layers they sit on, or fp32.
# Profiled (tools/bench/results/segment-overhead.md): in fp32 each head's pooler streams a 590 KB matrix for one row,
# the largest part of what running in segments costs over the static program.
EXIT_HEAD_BITS = ("int8", "fp32")

# The parity gate of a quantized program (ParityPolicy.bound), against the reference
# (the quantized eager model) and its copy with fp32 activations
# (edgenlp.quantize.rounding.without_activation_rounding), whose distance to the
# reference is the reference's own activation-rounding error on the sentences checked:
#  - max |diff| <= the larger of LOWERING_FLOOR x the reference's largest |logit| (the
#    kernels' fp32 arithmetic) and ROUNDING_FACTOR x the max activation-rounding error;
#  - RMS |diff| (all sentences, all classes) <= RMS_FACTOR x its RMS.
# Why: XNNPACK's QD8 kernels quantize each token's activations with the reference's
# formula on paper but not bit for bit, and the fp32 ops between the linears (softmax,
# GELU, the decomposed layer norms) differ in the last bits per ISA, so some activations
# land on the neighbouring int8 step. Each kernel family (AVX2, AVX-512 VNNI, NEON
# dot-product) draws its own such rounding: its distance to the reference is that of two
# independent roundings, ~sqrt(2) x the rounding error (RMS), whatever the ISA, and not
# the size of the logits or of the whole quantization error (for int4 mostly the
# weights', which every kernel shares bit for bit). Measured on a tiny 2-layer model
# with every activation re-rounded at random (with_kernel_rounding, jitter 0.25-0.5,
# standing in for any ISA; tests/export/test_parity_gate.py): RMS ratio 1.1-1.8, max
# ratio up to 2.7. Lowering defects (scale x2, rows swapped, weight transposed in one
# linear, biases dropped, int4 scales read per twice the group): RMS ratio 3.9-78.
# A program that left linears fp32 is caught from the lowered graph instead
# (export.api.check_lowered_linears). KERNEL_ROUNDING holds the ratios measured on real
# lowered programs per kernel family (tools/bench/export_time.py re-measures them).
#
# The previous bound (max of 1e-2 x the largest logit and 0.75 x the reference's
# distance to fp32) was fitted on an AVX-512 VNNI host: lowering error / distance to
# fp32 of 0.28 (Learner SST-2) and 0.56 (full fine-tuning SST-2). On an AVX2-only host
# a fully fine-tuned MiniLM sat at 0.7 and int8 linears + int8 word table failed
# (1.5e-1 > 1e-1) although the program was correct.
LOWERING_FLOOR = 1e-3
ROUNDING_FACTOR = 4.0
RMS_FACTOR = 2.5
KERNEL_ROUNDING: dict[str, dict] = {
    "x86-avx2": {"note": "MiniLM-L6 int8 + int8 word table (AMD EPYC, AVX2 only), 35 sentences over 4 buckets: "
                         "max ratio 1.02 (4.5e-3 vs 4.5e-3); fine-tuned Banking77 MiniLM-L6 (full, 67.5% dev), "
                         "seq 64, 32 sentences: max ratio 0.85 (7.8e-2 vs 9.2e-2), RMS ratio 0.70"},
    "x86-avx512vnni": {"note": "fine-tuned SST-2 MiniLM-L6 (Learners, 84.75% dev) int8 + int8 word table (AMD EPYC, "
                               "AVX-512 VNNI), seq 64, 32 sentences: max ratio 0.41 (3.1e-2 vs 7.5e-2), RMS ratio "
                               "0.43; 4 buckets to 128: max ratio 0.41, RMS ratio 0.45"},
}
# ONNX Runtime quantizes the linears its own way (per-tensor uint8 activations for
# MatMulInteger, fp32 activations for MatMulNBits, its own weight rounding; the word
# table is ours, edgenlp.export.onnx_quant.quantize_word_table): its distance to our
# reference includes a second quantization error, so it is bounded by a multiple of the
# reference's whole distance to fp32, with a floor relative to the reference's largest
# |logit| (ONNX_TOLERANCE) for the case where ONNX Runtime's per-tensor activations are
# noisier than the reference's per-token ones. Measured (fine-tuned MiniLM-L6 SST-2, seq
# 64, 32 sentences, AMD EPYC AVX-512 VNNI): lowering error / largest |logit| 0.10 (int8),
# 0.08 (int8 + int8 table), 0.16 (int4), 0.16 (int4 + int4 table), 0.12 (int8 + int4
# table); the int8 error is 3.3x the reference's distance to fp32, so the floor and not
# the multiple holds it. A tiny model's int4 table with its nibbles swapped lands at 1.4x
# its largest |logit| and fails. The earlier floor (1x / 2x the largest |logit|) passed it.
ONNX_QUANT_ERROR_FACTOR = 3.0
ONNX_TOLERANCE = {8: 0.3, 4: 0.3}
# On an x86 host without VNNI, ONNX Runtime's u8 x s8 MatMulInteger kernel adds pairs of products in saturating 16-bit
# lanes, so its 8-bit linears drift further from the reference: measured on an AMD EPYC with AVX2 only, tiny models of
# the test suite, int8 + int8 table: lowering error / largest |logit| 0.47 and 0.53 (both above the 0.3 floor). The
# 8-bit floor there is 0.8; a nibble-swapped int4 table (1.4x) and the 4-bit linears (MatMulNBits, fp32 activations)
# keep the 0.3 floor.
ONNX_TOLERANCE_X86_NO_VNNI = {8: 0.8, 4: 0.3}
X86_VNNI_FLAGS = ("avx512_vnni", "avx512vnni", "avx_vnni")


def onnx_tolerance(bits: int) -> float:
    """ONNX Runtime's parity floor for ``bits``-bit linears on this host (relative to the reference's largest |logit|)."""
    from edgenlp.utils import cpu_info

    info = cpu_info()
    x86 = info.get("machine") in ("x86_64", "AMD64", "i686")
    if x86 and not any(f in info.get("isa", ()) for f in X86_VNNI_FLAGS):
        return ONNX_TOLERANCE_X86_NO_VNNI[bits]
    return ONNX_TOLERANCE[bits]
# The earlier per-bits absolute bounds, kept for callers that read them.
LOWERING_TOLERANCE = {8: 1e-2, 4: 2e-2}


@dataclass(frozen=True)
class QuantizeConfig(Config):
    """Low-bit weights: a scheme, optional per-layer bits, embeddings, vocabulary trimming, budgets.

    Version 2 added ``exit_calibration``; a version-1 step kept the fp32 exit threshold, and reads back so.
    Version 3 added ``exit_heads``; a version-2 step shipped them fp32, and reads back so.
    """

    VERSION = 3

    scheme: str = knob("int8", choices=SCHEMES, help="int8 / int4 (groupwise) linears with int8 dynamic activations, "
                                                     "or mixed per layer.")
    group_size: int = knob(32, help="int4 group size (in-features per scale).")
    embeddings: str | None = knob(None, choices=EMBEDDINGS, help="Quantize the word-embedding table per row "
                                                                 "(default: fp32).")
    trim_vocab: bool = knob(False, help="Keep only the tokens of the task's training data (+ specials); "
                                        "others read as [UNK].")
    layer_bits: tuple[tuple[str, int], ...] = knob((), help="(module name, bits) per linear, bits 32, 8 or 4 "
                                                            "(default: every linear at the scheme's width).")
    size_mb: float | None = knob(None, help="Weight budget in MB (mixed: bits per layer chosen to meet it).")
    max_drop: float | None = knob(None, help="Accuracy guard: max dev-accuracy drop vs fp32 in points (e.g. 1.0).")
    exit_calibration: str = knob("quantized", choices=EXIT_CALIBRATIONS, help=(
        "A model with early exits (edgenlp dynamic): calibrate the exit threshold again on the quantized model "
        "(the same validation rows and maximum drop), or keep the fp32 model's."))
    exit_heads: str = knob("int8", choices=EXIT_HEAD_BITS, help=(
        "A model with early exits: its exit heads' linears as int8 (per-channel weights, int8 dynamic activations, "
        "as the layers') or fp32."))

    @classmethod
    def upgrade(cls, d: dict) -> dict:
        if d.get("version", cls.VERSION) < 2:
            d = {**d, "version": 2, "exit_calibration": "fp32"}  # version 1 reused the fp32 threshold
        if d.get("version", cls.VERSION) < 3:
            d = {**d, "version": 3, "exit_heads": "fp32"}  # version 2 shipped the exit heads fp32
        return d

    def __post_init__(self) -> None:
        check_choice("scheme", self.scheme, SCHEMES)
        if not isinstance(self.group_size, int) or self.group_size < 8 or self.group_size % 8:
            raise ValueError(f"group_size must be a positive multiple of 8, got {self.group_size!r}")
        check_choice("embeddings", self.embeddings, EMBEDDINGS, allow_none=True)
        check_bool("trim_vocab", self.trim_vocab)
        bits = []
        for item in self.layer_bits:
            if not (isinstance(item, (tuple, list)) and len(item) == 2 and isinstance(item[0], str)):
                raise ValueError(f"layer_bits entries must be (name, bits), got {item!r}")
            if item[1] not in BITS or isinstance(item[1], bool):
                raise ValueError(f"layer_bits[{item[0]!r}] must be one of {BITS}, got {item[1]!r}")
            bits.append((item[0], int(item[1])))
        names = [n for n, _ in bits]
        if len(set(names)) != len(names):
            raise ValueError("layer_bits names a layer twice")
        object.__setattr__(self, "layer_bits", tuple(bits))
        check_positive("size_mb", self.size_mb, allow_none=True)
        check_range("max_drop", self.max_drop, 0.0, allow_none=True)
        check_choice("exit_calibration", self.exit_calibration, EXIT_CALIBRATIONS)
        check_choice("exit_heads", self.exit_heads, EXIT_HEAD_BITS)
        if self.scheme == "mixed" and self.size_mb is None and not self.layer_bits:
            raise ValueError("scheme 'mixed' needs size_mb (or explicit layer_bits)")

    @property
    def default_bits(self) -> int:
        return 4 if self.scheme == "int4" else 8

    def bits_of(self, name: str) -> int:
        return dict(self.layer_bits).get(name, self.default_bits)

    @property
    def lowest_bits(self) -> int:
        used = [b for _, b in self.layer_bits] or [self.default_bits]
        if self.embeddings:
            used.append(int(self.embeddings[3:]))
        return min(used)

    # ------------------------------------------------------------------ recipe hooks

    def parity_policy(self) -> ParityPolicy:
        """Lowered program vs the quantized eager model (lowering error), fp32 reported alongside.

        The model being lowered is :func:`edgenlp.quantize.api.quantize_model`'s
        output: it runs eagerly as the reference, ``model.quantization.source``
        is the fp32 model it came from, and its copy with fp32 activations
        measures the activation-rounding error the bound scales with (see
        :data:`ROUNDING_FACTOR`).
        """
        from edgenlp.quantize.rounding import without_activation_rounding

        measured = ", ".join(f"{fam}: {v['note']}" for fam, v in KERNEL_ROUNDING.items())
        return ParityPolicy(
            name=f"quantized-{self.scheme}" + (f"+emb-{self.embeddings}" if self.embeddings else ""),
            tolerance=LOWERING_FLOOR,
            compare_fp32=True,
            fp32_reference=lambda model: model.quantization.source,
            relative=True,
            rounding_reference=without_activation_rounding,
            rounding_factor=ROUNDING_FACTOR,
            rms_factor=RMS_FACTOR,
            rounding_note=f"measured lowering error / activation-rounding error, {measured}" if measured else "",
            runtime_quant_error_factor=(("onnx", ONNX_QUANT_ERROR_FACTOR),),
            # ONNX Runtime's floor, relative to the largest |logit| (see ONNX_TOLERANCE)
            runtime_tolerance=(("onnx", onnx_tolerance(8 if self.lowest_bits >= 8 else 4)),),
        )

    def weight_storage(self) -> dict:
        """``{module name: StorageMarker}`` for every quantized linear and the word embeddings."""
        from edgenlp.models.arithmetic import StorageMarker

        out: dict = {}
        if not self.layer_bits:
            out["*"] = StorageMarker(self.default_bits, self.group_size if self.default_bits == 4 else None)
        for name, bits in self.layer_bits:
            if bits < 32:
                out[name] = StorageMarker(bits, self.group_size if bits == 4 else None)
        if self.embeddings:
            out["embeddings.word"] = StorageMarker(int(self.embeddings[3:]))
        return out

