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

from edgenlp.config import Config
from edgenlp.recipe import ParityPolicy, register_step

SCHEMES = ("int8", "int4", "mixed")
EMBEDDINGS = ("int8", "int4")
BITS = (32, 8, 4)

# Lowering error (lowered program vs the fake-quantized eager model), max |logit diff|.
# int8: XNNPACK's QC8W kernels do the reference's integer arithmetic (per-channel weights).
# int4: XNNPACK's blockwise int4 kernels keep the group scales in bf16; the reference
# rounds its scales to bf16 too (fake_quantize), leaving accumulation-order and
# activation-rounding differences. The eager emulation and XNNPACK round some per-token
# activations to neighbouring steps, so the lowering error grows with the quantization
# error: measured on MiniLM-L6 int8, lowering error / (emulated - fp32) = 0.28 (Learner
# SST-2, 2.5e-2 vs 8.8e-2) and 0.56 (full fine-tuning SST-2, 3.7e-2 vs 6.6e-2); a tiny
# random model with mixed 32/8/4 layers up to 8.7e-3 absolute. The bound is the larger of
# the absolute one scaled by the largest |logit| (ParityPolicy.relative) and 0.75 of the
# emulated quantization error (ParityPolicy.quant_error_fraction): a program that stayed
# fp32 sits at 1.0 of it, a broken one far above. Accuracy is what the guard measures.
LOWERING_TOLERANCE = {8: 1e-2, 4: 2e-2}
LOWERING_QUANT_ERROR_FRACTION = 0.75
# ONNX Runtime quantizes its own way (per-tensor uint8 activations for MatMulInteger,
# fp32 activations for MatMulNBits, fp32 word embeddings): its distance to our reference
# is quantization error, so this is only a sanity bound; accuracy is what the guard measures.
ONNX_TOLERANCE = {8: 1.0, 4: 2.0}


@dataclass(frozen=True)
class QuantizeConfig(Config):
    """Low-bit weights: a scheme, optional per-layer bits, embeddings, vocabulary trimming, budgets."""

    scheme: str = "int8"
    group_size: int = 32  # int4 groupwise weights: in-features per scale
    embeddings: str | None = None  # None (fp32), "int8" or "int4" per-row word-embedding table
    trim_vocab: bool = False
    layer_bits: tuple[tuple[str, int], ...] = ()
    size_mb: float | None = None  # mixed: bundle weight budget
    max_drop: float | None = None  # accuracy guard: max dev-accuracy drop in points vs fp32

    def __post_init__(self) -> None:
        if self.scheme not in SCHEMES:
            raise ValueError(f"scheme must be one of {SCHEMES}, got {self.scheme!r}")
        if not isinstance(self.group_size, int) or self.group_size < 8 or self.group_size % 8:
            raise ValueError(f"group_size must be a positive multiple of 8, got {self.group_size!r}")
        if self.embeddings not in (None, *EMBEDDINGS):
            raise ValueError(f"embeddings must be None or one of {EMBEDDINGS}, got {self.embeddings!r}")
        if not isinstance(self.trim_vocab, bool):
            raise ValueError(f"trim_vocab must be a bool, got {self.trim_vocab!r}")
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
        if self.size_mb is not None and not self.size_mb > 0:
            raise ValueError(f"size_mb must be > 0, got {self.size_mb}")
        if self.max_drop is not None and not self.max_drop >= 0:
            raise ValueError(f"max_drop must be >= 0, got {self.max_drop}")
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
        output: it runs eagerly as the reference, and ``model.quantization.source``
        is the fp32 model it came from.
        """
        low = self.lowest_bits
        return ParityPolicy(
            name=f"quantized-{self.scheme}" + (f"+emb-{self.embeddings}" if self.embeddings else ""),
            tolerance=LOWERING_TOLERANCE[8 if low >= 8 else 4],
            compare_fp32=True,
            fp32_reference=lambda model: model.quantization.source,
            runtime_tolerance=(("onnx", ONNX_TOLERANCE[8 if low >= 8 else 4]),),
            relative=True,
            quant_error_fraction=LOWERING_QUANT_ERROR_FRACTION,
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


register_step("quantize", QuantizeConfig)
