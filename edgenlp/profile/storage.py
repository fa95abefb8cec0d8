"""How many bytes a module's weights take at the precision they are stored in.

The profiler asks :func:`describe_storage` for every module. Quantization or
sparsity code reports its own format through one of these hooks, checked in
order:

1. a ``weight_storage()`` method on the module returning a :class:`WeightStorage`
   (or a dict with its fields) for the module's own parameters;
2. a ``weight_bytes()`` method returning an int (format from a
   ``storage_format`` attribute, else ``"custom"``);
3. a :class:`~edgenlp.models.arithmetic.StorageMarker` set with
   :func:`mark_storage` — "these weights ship as int8/int4 (per channel or per
   group)", sized by :func:`edgenlp.models.arithmetic.weight_bytes`: the way a
   bundle's applied quantization step is reported for an fp32 module tree;
4. ``torch.ao`` dynamically quantized linears (packed int8 weights + scales);
5. otherwise the module's own tensors: dense tensors count ``numel *
   element_size``, tensor subclasses (torchao quantized tensors, semi-structured
   sparse) count the bytes of their inner tensors, ``torch.sparse`` layouts
   count values + indices.

``params`` is always the logical parameter count (an int8 weight still has
``out * in`` parameters), so parameter shares do not change with precision.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from edgenlp.models.arithmetic import StorageMarker  # defined with the byte arithmetic; still importable from here

MARKER_ATTR = "_edgenlp_storage"


@dataclass(frozen=True)
class WeightStorage:
    """The stored size of one module's own weights."""

    format: str
    params: int
    bytes: int

    def __post_init__(self) -> None:
        if self.params < 0 or self.bytes < 0:
            raise ValueError(f"params and bytes must be >= 0, got {self.params}, {self.bytes}")


def mark_storage(module: nn.Module, marker: StorageMarker) -> nn.Module:
    """Record that ``module``'s weight ships as ``marker`` describes (biases stay fp32)."""
    setattr(module, MARKER_ATTR, marker)
    return module


def tensor_bytes(t: torch.Tensor) -> int:
    """Bytes ``t`` occupies: inner tensors of a subclass, values + indices of a sparse tensor."""
    if t.layout == torch.sparse_coo:
        t = t.coalesce()
        return tensor_bytes(t.values()) + tensor_bytes(t.indices())
    if t.layout in (torch.sparse_csr, torch.sparse_bsr):
        return sum(tensor_bytes(x) for x in (t.values(), t.crow_indices(), t.col_indices()))
    if t.layout in (torch.sparse_csc, torch.sparse_bsc):
        return sum(tensor_bytes(x) for x in (t.values(), t.ccol_indices(), t.row_indices()))
    if type(t) not in (torch.Tensor, nn.Parameter) and hasattr(t, "__tensor_flatten__"):
        names, _ = t.__tensor_flatten__()
        return sum(tensor_bytes(getattr(t, n)) for n in names)
    return t.numel() * t.element_size()


def _dtype_format(t: torch.Tensor) -> str:
    if t.layout != torch.strided:
        return f"sparse-{str(t.layout).split('_', 1)[-1]}"
    if type(t) not in (torch.Tensor, nn.Parameter) and hasattr(t, "__tensor_flatten__"):
        return type(t).__name__
    return {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16", torch.int8: "int8", torch.qint8: "int8"}.get(
        t.dtype, str(t.dtype).replace("torch.", "")
    )


def _own_tensors(module: nn.Module) -> list[tuple[str, torch.Tensor]]:
    return [(n, t) for n, t in list(module.named_parameters(recurse=False)) + list(module.named_buffers(recurse=False)) if t is not None]


def _ao_dynamic_linear(module: nn.Module) -> WeightStorage | None:
    packed = getattr(module, "_packed_params", None)
    if packed is None or not callable(getattr(module, "weight", None)):
        return None
    w = module.weight()
    b = module.bias()
    nbytes = w.numel() * w.element_size()
    if w.qscheme() in (torch.per_channel_affine, torch.per_channel_symmetric):
        nbytes += w.q_per_channel_scales().numel() * 4 + w.q_per_channel_zero_points().numel() * 4
    else:
        nbytes += 8  # one fp32 scale + one int32 zero point
    bias_n = b.numel() if b is not None else 0
    return WeightStorage(_dtype_format(w), w.numel() + bias_n, nbytes + bias_n * 4)


def describe_storage(module: nn.Module) -> WeightStorage:
    """Stored size of ``module``'s own weights (not its children's); see the module docstring for the hooks."""
    hook = getattr(module, "weight_storage", None)
    if callable(hook):
        out = hook()
        return out if isinstance(out, WeightStorage) else WeightStorage(**out)
    own = _own_tensors(module)
    params = sum(t.numel() for n, t in own if isinstance(t, nn.Parameter))
    hook = getattr(module, "weight_bytes", None)
    if callable(hook):
        return WeightStorage(str(getattr(module, "storage_format", "custom")), params, int(hook()))
    marker = getattr(module, MARKER_ATTR, None)
    if isinstance(marker, StorageMarker):
        nbytes = 0
        for name, t in own:
            if name == "weight" and t.dim() >= 2:
                nbytes += marker.weight_bytes(t.shape[0], math.prod(t.shape[1:]))
            elif isinstance(t, nn.Parameter):
                nbytes += t.numel() * 4
        return WeightStorage(marker.format, params, nbytes)
    ao = _ao_dynamic_linear(module)
    if ao is not None:
        return ao
    weights = [t for n, t in own if isinstance(t, nn.Parameter)]
    fmt = _dtype_format(next((t for n, t in own if n == "weight"), weights[0])) if weights else "none"
    return WeightStorage(fmt, params, sum(tensor_bytes(t) for t in weights))


def subtree_storage(module: nn.Module) -> WeightStorage:
    """Storage of ``module`` and all its children (formats joined when they differ)."""
    parts = [describe_storage(m) for m in module.modules()]
    parts = [p for p in parts if p.params or p.bytes]
    formats = sorted({p.format for p in parts})
    return WeightStorage("+".join(formats) if formats else "none", sum(p.params for p in parts), sum(p.bytes for p in parts))
