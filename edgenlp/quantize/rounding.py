"""How far a correct int8-activation kernel may land from the eager reference.

A quantized model from :func:`edgenlp.quantize.api.quantize_model` runs
eagerly as the reference of XNNPACK's kernels: per-token asymmetric int8
activations, int8/int4 weights, integer products. The weights a kernel uses
are bit for bit the reference's; the activations are not. Every kernel
family (XNNPACK's QD8 paths on AVX2, AVX-512 VNNI, NEON dot-product, SME)
computes the per-token scale, zero point and rounding its own way, and the
fp32 ops between the linears (softmax, GELU, the layer norms) differ in the
last bits, which moves activations across rounding steps. Each such move is
a sample of the same activation-rounding error the reference itself carries,
so a correct kernel's distance to the reference is bounded by the size of
that error, not by the size of the logits, and not by the whole quantization
error (most of which, for int4, is the weights', which every kernel shares).

- :func:`without_activation_rounding`: the reference with its activations
  left fp32 (weights still quantized). Its distance to the reference is the
  reference's own activation-rounding error, measured per model and per
  sentence: the scale of :meth:`edgenlp.recipe.ParityPolicy.tolerance_for`'s
  rounding bound.
- :func:`with_kernel_rounding`: the reference with every activation jittered
  by up to ``jitter`` of a rounding step before it is rounded, so that a share
  of activations lands on the neighbouring step, as on another kernel family.
  ``jitter=0`` is the reference exactly. Tests use it to stand in for ISAs this
  host cannot run, and ``tools/bench/export_time.py`` calibrates the jitter
  that reproduces each measured ISA's lowering error.
"""

from __future__ import annotations

import copy

import torch
from torch import nn


def _quantized_weight(module: nn.Module):
    """The torchao quantized weight of ``module`` with dynamic int8 activations, else None."""
    w = getattr(module, "weight", None)
    if w is None or type(w) in (torch.Tensor, nn.Parameter):
        return None
    return w if getattr(w, "activation_quantization", None) is not None else None


def quantized_linears(model: nn.Module) -> dict[str, nn.Linear]:
    """Module name -> linear whose weight is quantized with dynamic int8 activations."""
    return {n: m for n, m in model.named_modules() if isinstance(m, nn.Linear) and _quantized_weight(m) is not None}


def _plain_linear(linear: nn.Linear) -> nn.Linear:
    """An fp32 ``nn.Linear`` holding ``linear``'s dequantized weight (and its bias)."""
    w = _quantized_weight(linear)
    out = nn.Linear(linear.in_features, linear.out_features, bias=linear.bias is not None)
    with torch.no_grad():
        out.weight = nn.Parameter(w.dequantize().detach().clone(), requires_grad=False)
        if linear.bias is not None:
            out.bias = nn.Parameter(linear.bias.detach().clone(), requires_grad=False)
    return out.eval()


def _replace(model: nn.Module, make) -> nn.Module:
    out = copy.deepcopy(model).eval()
    for name, linear in quantized_linears(out).items():
        parent_name, _, child = name.rpartition(".")
        parent = out.get_submodule(parent_name) if parent_name else out
        setattr(parent, child, make(linear))
    return out


def without_activation_rounding(model: nn.Module) -> nn.Module:
    """A copy of quantized ``model`` whose linears take fp32 activations (weights as quantized).

    ``model`` itself is not changed; non-quantized modules (fp32 linears, a
    quantized word table) are copied as they are.
    """
    return _replace(model, _plain_linear)


class KernelRoundingLinear(nn.Linear):
    """A linear (dequantized weight) whose per-token int8 activations are jittered by up to ``jitter`` steps before rounding.

    Same formula as torchao's eager reference (asymmetric per token, scale
    ``(max(x, 0) - min(x, 0)) / 255``, ``round(x * (1 / scale)) + zero_point``,
    clamped to int8); ``jitter=0`` reproduces it exactly.
    """

    @classmethod
    def like(cls, linear: nn.Linear, *, jitter: float, generator: torch.Generator) -> "KernelRoundingLinear":
        if not 0.0 <= jitter <= 0.5:
            raise ValueError(f"jitter must be in [0, 0.5] rounding steps, got {jitter}")
        plain = _plain_linear(linear)
        out = cls(linear.in_features, linear.out_features, bias=linear.bias is not None, device="meta")
        out.weight, out.bias = plain.weight, plain.bias
        out.jitter, out.generator = float(jitter), generator
        return out.eval()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        from torchao.quantization.quant_primitives import MappingType, choose_qparams_affine

        block = (1,) * (x.dim() - 1) + (x.shape[-1],)
        scale, zp = choose_qparams_affine(x, MappingType.ASYMMETRIC, block, target_dtype=torch.int8, quant_min=-128,
                                          quant_max=127, zero_point_dtype=torch.int8)
        scale = scale.reshape(*x.shape[:-1], 1)
        zp = zp.reshape(*x.shape[:-1], 1).to(x.dtype)
        v = x * (1.0 / scale)
        if self.jitter:
            v = v + (torch.rand(v.shape, generator=self.generator) * 2 - 1) * self.jitter
        q = torch.clamp(torch.round(v) + zp, -128, 127)
        return super().forward((q - zp) * scale)


def with_kernel_rounding(model: nn.Module, *, jitter: float, seed: int = 0) -> nn.Module:
    """A copy of quantized ``model`` whose activation rounding stands in for another kernel family's.

    Each activation moves by up to ``jitter`` of its rounding step (uniform,
    seeded) before it is rounded: ``jitter=0`` is the reference, ``0.5`` a
    kernel whose rounding agrees with the reference's no better than chance.
    """
    gen = torch.Generator().manual_seed(seed)
    return _replace(model, lambda linear: KernelRoundingLinear.like(linear, jitter=jitter, generator=gen))
