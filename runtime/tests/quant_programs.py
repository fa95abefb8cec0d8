"""Quantized ExecuTorch programs for the native runtime tests and benchmarks.

Stand-alone lowering of a bundle-contract model (``input_ids``, ``attention_mask``
-> logits) with

* ``linears="int8"``: dynamic per-token int8 activations x per-channel symmetric
  int8 weights (PT2E, ``XNNPACKQuantizer``), lowered to XNNPACK;
* ``linears="int4"``: int8 dynamic activations x int4 groupwise weights
  (torchao ``Int8DynamicActivationIntxWeightConfig``), lowered to XNNPACK;
* ``embeddings="int8"|"int4"``: per-row symmetric word-embedding table through
  ExecuTorch's ``quantized_decomposed::embedding_byte`` / ``embedding_4bit``
  kernels (run outside XNNPACK by libexecutorch_kernels_quantized).

It exists so the runtime can be tested on quantized programs independently
of ``edgenlp.quantize``; the weights are what these flows produce, the
numbers only have to agree between runtimes.
"""

from __future__ import annotations

import copy
import logging

import torch
from torch import nn

log = logging.getLogger(__name__)

LINEARS = (None, "int8", "int4")
EMBEDDINGS = (None, "int8", "int4")


class QuantEmbedding(nn.Module):
    """A per-row symmetric int8 or int4 embedding table (ExecuTorch's quantized embedding ops)."""

    def __init__(self, weight: torch.Tensor, *, bits: int) -> None:
        super().__init__()
        if bits not in (4, 8):
            raise ValueError(f"bits must be 4 or 8, got {bits}")
        w = weight.detach().to(torch.float32)
        qmax = 127 if bits == 8 else 7
        scales = (w.abs().amax(dim=1) / qmax).clamp(min=1e-8)
        q = torch.clamp(torch.round(w / scales[:, None]), -qmax - 1, qmax).to(torch.int8)
        if bits == 4:
            if w.shape[1] % 2:
                raise ValueError("int4 embeddings need an even embedding width")
            u = (q + 8).to(torch.uint8).view(w.shape[0], -1, 2)
            q = (u[:, :, 0] * 16 + u[:, :, 1]).to(torch.uint8)  # even column in the high nibble
        self.bits = bits
        self.num_embeddings, self.embedding_dim = w.shape
        self.register_buffer("qweight", q)
        self.register_buffer("scales", scales)

    @property
    def weight(self) -> torch.Tensor:
        """The dequantized table (what the kernels compute with)."""
        return self.forward(torch.arange(self.num_embeddings)[None])[0]

    def forward(self, indices: torch.Tensor) -> torch.Tensor:
        ops = torch.ops.quantized_decomposed
        if self.bits == 8:
            return ops.embedding_byte.default(self.qweight, self.scales, None, -128, 127, indices)
        return ops.embedding_4bit.default(self.qweight, self.scales, None, -8, 7, indices)


def quantize_embedding(model: nn.Module, path: str, *, bits: int) -> nn.Module:
    """Replace the ``nn.Embedding`` at dotted ``path`` in ``model`` (in place) by a :class:`QuantEmbedding`."""
    import executorch.exir.passes._quant_patterns_and_replacements  # noqa: F401  defines the ops

    parent_path, _, name = path.rpartition(".")
    parent = model.get_submodule(parent_path) if parent_path else model
    emb = getattr(parent, name)
    if not isinstance(emb, nn.Embedding):
        raise TypeError(f"{path} is {type(emb).__name__}, not nn.Embedding")
    setattr(parent, name, QuantEmbedding(emb.weight, bits=bits))
    return model


def _export(model: nn.Module, inputs) -> torch.export.ExportedProgram:
    with torch.no_grad():
        return torch.export.export(model, inputs, strict=False)


def _int8_pt2e(model: nn.Module, inputs) -> nn.Module:
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
        XNNPACKQuantizer,
        get_symmetric_quantization_config,
    )
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    quantizer = XNNPACKQuantizer().set_global(get_symmetric_quantization_config(is_per_channel=True, is_dynamic=True))
    m = prepare_pt2e(_export(model, inputs).module(), quantizer)
    with torch.no_grad():
        m(*inputs)
    return convert_pt2e(m)


def _int4_torchao(model: nn.Module, group_size: int) -> nn.Module:
    from torchao.quantization.granularity import PerGroup
    from torchao.quantization.quant_api import Int8DynamicActivationIntxWeightConfig, quantize_

    m = copy.deepcopy(model)
    quantize_(m, Int8DynamicActivationIntxWeightConfig(weight_dtype=torch.int4, weight_granularity=PerGroup(group_size)),
              filter_fn=lambda mod, fqn: isinstance(mod, nn.Linear) and mod.in_features % group_size == 0)
    return m


def lower(model: nn.Module, inputs_by_method: dict[str, tuple], *, linears: str | None = None,
          group_size: int = 32) -> bytes:
    """Lower ``model`` (eval mode, already carrying any :class:`QuantEmbedding`) to one program.

    ``inputs_by_method`` maps each method name to its example ``(input_ids, attention_mask)``.
    """
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower

    if linears not in LINEARS:
        raise ValueError(f"linears must be one of {LINEARS}, got {linears!r}")
    model = model.eval()
    if linears == "int4":
        model = _int4_torchao(model, group_size)
    programs = {}
    for name, inputs in inputs_by_method.items():
        m = _int8_pt2e(model, inputs) if linears == "int8" else model
        programs[name] = _export(m, inputs)
    from edgenlp.export.lowering import shared_provenance

    with shared_provenance():  # the same program, in less time (tests/export/test_lowering.py)
        edge = to_edge_transform_and_lower(programs, partitioner=[XnnpackPartitioner()])
        return edge.to_executorch().buffer


def op_counts(pte: bytes) -> dict[str, int]:
    """Operator names used outside delegates and the number of delegate calls, over all methods."""
    from executorch.exir._serialize._program import deserialize_pte_binary

    program = deserialize_pte_binary(pte).program
    counts: dict[str, int] = {}
    for plan in program.execution_plan:
        for chain in plan.chains:
            for ins in chain.instructions:
                args = ins.instr_args
                kind = type(args).__name__
                if kind == "KernelCall":
                    op = plan.operators[args.op_index]
                    key = f"{op.name}.{op.overload}" if op.overload else op.name
                elif kind == "DelegateCall":
                    key = "delegate_call"
                else:
                    continue
                counts[key] = counts.get(key, 0) + 1
    return counts
