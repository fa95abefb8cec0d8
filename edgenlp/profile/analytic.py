"""Parameters, stored weight bytes, FLOPs and activation bytes per component, from module shapes.

Everything is read from the model's modules (linear ``in/out_features``,
``num_heads``/``head_dim`` per layer, the storage hook of
:mod:`edgenlp.profile.storage`), so the numbers follow pruning and
quantization. The formulas applied to those dimensions are
:mod:`edgenlp.models.arithmetic`'s, where the definitions are written out:
FLOPs count matrix multiplications only (2 per multiply-add, as
:class:`torch.utils.flop_counter.FlopCounterMode` does; the head runs on the
[CLS] token only), activation bytes are the sizes of each component's outputs
summed over layers, at the element size of the word embeddings. A linear
with a ``flop_density`` attribute (a block-sparse op's share of kept blocks,
set by :func:`edgenlp.profile.api.apply_sparse_ops`) counts that share of
its FLOPs.

The classifier head (pooler + classifier) is in ``other``; the classic BERT
table counts the pooler in its total, and the classifier (``H·L + L``
parameters) is the only thing that reference does not have.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from edgenlp.models import arithmetic
from edgenlp.models.encoder import EncoderShape
from edgenlp.models.families import LAYER_LINEARS, LAYER_NORMS
from edgenlp.profile.components import COMPONENTS, HEAD_PARTS, part_component
from edgenlp.profile.storage import WeightStorage, describe_storage, subtree_storage


@dataclass
class Counts:
    """Analytic numbers of one row (component, or component within one layer)."""

    params: int = 0
    weight_bytes: int = 0
    flops: int = 0
    activation_bytes: int = 0
    formats: set[str] = field(default_factory=set)

    def add(self, other: "Counts") -> None:
        self.params += other.params
        self.weight_bytes += other.weight_bytes
        self.flops += other.flops
        self.activation_bytes += other.activation_bytes
        self.formats |= other.formats

    def add_storage(self, st: WeightStorage) -> None:
        self.params += st.params
        self.weight_bytes += st.bytes
        if st.params or st.bytes:
            self.formats.add(st.format)

    def to_dict(self) -> dict:
        return {
            "params": self.params,
            "flops": self.flops,
            "weight_bytes": self.weight_bytes,
            "activation_bytes": self.activation_bytes,
            "weight_format": "+".join(sorted(self.formats)) or "none",
        }


@dataclass
class AnalyticProfile:
    """Per-component and per-layer analytic counts for one (seq_len, batch)."""

    seq_len: int
    batch: int
    components: dict[str, Counts]
    layers: list[dict[str, Counts]]  # per encoder layer: component -> counts (embedding/head excluded)
    head: Counts  # pooler + classifier (part of components["other"])

    @property
    def total(self) -> Counts:
        t = Counts()
        for c in self.components.values():
            t.add(c)
        return t


def _linear_dims(module) -> tuple[int, int]:
    return int(module.in_features), int(module.out_features)


def _activation_bytes_per_elem(model) -> int:
    w = model.embeddings.word.weight
    return w.element_size() if w.is_floating_point() else 4


def analyze(model, *, seq_len: int, batch: int = 1) -> AnalyticProfile:
    """Counts for an :class:`~edgenlp.models.encoder.EncoderClassifier` (possibly pruned/quantized).

    Parameters not reached through the family's canonical parts (embeddings,
    layer parts, pooler, classifier) are added to ``other``.
    """
    if seq_len <= 0 or batch <= 0:
        raise ValueError(f"seq_len and batch must be positive, got {seq_len}, {batch}")
    b, s = batch, seq_len
    act = _activation_bytes_per_elem(model)
    comps = {c: Counts() for c in COMPONENTS}
    seen: set[int] = set()

    emb = comps["embedding"]
    emb.add_storage(subtree_storage(model.embeddings))
    seen.update(id(m) for m in model.embeddings.modules())
    hidden = int(model.embeddings.word.embedding_dim)
    emb.activation_bytes += b * s * hidden * act

    layers: list[dict[str, Counts]] = []
    for layer in model.layers:
        row = {c: Counts() for c in COMPONENTS if c != "embedding"}
        for part in LAYER_LINEARS + LAYER_NORMS:
            module = getattr(layer, part)
            seen.update(id(m) for m in module.modules())
            comp = part_component(part)
            row[comp].add_storage(subtree_storage(module))
            if part in LAYER_LINEARS:
                fin, fout = _linear_dims(module)
                dense = arithmetic.linear_flops(fin, fout, tokens=b * s)
                row[comp].flops += round(dense * getattr(module, "flop_density", 1.0))  # block-sparse: kept blocks
                row[comp].activation_bytes += arithmetic.linear_activations(fin, fout, tokens=b * s) * act
            else:
                row[comp].activation_bytes += b * s * hidden * act
        h, d = int(layer.num_heads), int(layer.head_dim)
        row["attn_core"].flops += arithmetic.attention_flops(h, d, seq_len=s, batch=b)
        row["attn_core"].activation_bytes += arithmetic.attention_activations(h, d, seq_len=s, batch=b) * act
        for c, counts in row.items():
            comps[c].add(counts)
        layers.append(row)
        seen.add(id(layer))

    head = Counts()
    for part in HEAD_PARTS:
        module = getattr(model, part)
        seen.update(id(m) for m in module.modules())
        head.add_storage(subtree_storage(module))
        fin, fout = _linear_dims(module)
        head.flops += arithmetic.linear_flops(fin, fout, tokens=b)
        head.activation_bytes += arithmetic.linear_activations(fin, fout, tokens=b) * act
    comps["other"].add(head)

    # anything the canonical parts did not reach (a future adapter, a buffer) goes to `other`
    for m in model.modules():
        if id(m) not in seen and m is not model.layers:
            st = describe_storage(m)
            if st.params or st.bytes:
                comps["other"].add_storage(st)
    return AnalyticProfile(seq_len, batch, comps, layers, head)


def closed_form_bert(*, num_layers: int, hidden: int, ffn: int, vocab_size: int, max_positions: int,
                     type_vocab_size: int, seq_len: int, batch: int = 1) -> dict[str, dict[str, int]]:
    """The reference BERT table per component: params (with the pooler, no classifier) and FLOPs of matmuls.

    :func:`edgenlp.models.arithmetic.component_params` / ``component_flops`` of
    the uniform shape; the ``other`` row is ``norms_and_pooler``.
    """
    shape = EncoderShape(family="bert", vocab_size=vocab_size, hidden=hidden, heads=(1,) * num_layers, head_dim=hidden,
                         ffn=(ffn,) * num_layers, max_positions=max_positions, type_vocab_size=type_vocab_size)  # fmt: skip
    params = arithmetic.component_params(shape, num_labels=0)
    flops = arithmetic.component_flops(shape, seq_len=seq_len, batch=batch, num_labels=0)
    rows = {c: {"params": params[c], "flops": flops[c]} for c in arithmetic.COMPONENTS if c != "other"}
    rows["norms_and_pooler"] = {"params": params["other"], "flops": flops["other"]}
    return rows


def count_flops_torch(model, inputs: tuple[torch.Tensor, ...]) -> int:
    """Total FLOPs of one forward as counted by ``torch.utils.flop_counter.FlopCounterMode``."""
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    with torch.inference_mode(), counter:
        model(*inputs)
    return int(counter.get_total_flops())
