"""Parameters, stored weight bytes, FLOPs and activation bytes per component, from module shapes.

Everything is read from the model's modules (linear ``in/out_features``,
``num_heads``/``head_dim`` per layer, the storage hook of
:mod:`edgenlp.profile.storage`), so the numbers follow pruning and
quantization.

Definitions (``b`` batch, ``s`` sequence length, per layer ``h`` heads of
``d``, hidden ``H``, FFN width ``F``, ``L`` labels):

* FLOPs count matrix multiplications only, a multiply-add being 2 FLOPs, as
  :class:`torch.utils.flop_counter.FlopCounterMode` does: linears
  ``2·b·s·in·out`` (the head runs on the [CLS] token only: ``2·b·in·out``),
  attention core ``2·(2·b·h·s²·d)`` for QKᵀ and AV. Gathers, adds, norms,
  softmax and activations count 0.
* Activation bytes are the sizes of each component's outputs, summed over
  layers (traffic, not peak): embedding ``b·s·H``; QKV ``3·b·s·h·d``;
  attention core the probabilities ``b·h·s²`` plus the context ``b·s·h·d``;
  output projection ``b·s·H``; FFN ``b·s·F + b·s·H``; other the two norm
  outputs per layer, pooler ``b·H`` and logits ``b·L``.
* The classifier head (pooler + classifier) is in ``other``; the classic BERT
  table counts the pooler in its total, and the classifier
  (``H·L + L`` parameters) is the only thing that reference does not have.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

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
                row[comp].flops += 2 * b * s * fin * fout
                if fin * fout:  # a pruned-away linear (0 heads / 0 FFN width) does not run
                    row[comp].activation_bytes += b * s * fout * act
            else:
                row[comp].activation_bytes += b * s * hidden * act
        h, d = int(layer.num_heads), int(layer.head_dim)
        row["attn_core"].flops += 2 * (2 * b * h * s * s * d)
        row["attn_core"].activation_bytes += (b * h * s * s + b * s * h * d) * act if h else 0
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
        head.flops += 2 * b * fin * fout
        head.activation_bytes += b * fout * act
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
    """The reference BERT table's closed forms (params with pooler, FLOPs of matmuls), per component."""
    H, F, s, b, n = hidden, ffn, seq_len, batch, num_layers
    lin = lambda i, o: i * o + o  # noqa: E731
    return {
        "embedding": {"params": (vocab_size + max_positions + type_vocab_size) * H + 2 * H, "flops": 0},
        "attn_qkv": {"params": n * 3 * lin(H, H), "flops": n * 3 * 2 * b * s * H * H},
        "attn_core": {"params": 0, "flops": n * 4 * b * s * s * H},
        "attn_out": {"params": n * lin(H, H), "flops": n * 2 * b * s * H * H},
        "ffn": {"params": n * (lin(H, F) + lin(F, H)), "flops": n * 4 * b * s * H * F},
        "norms_and_pooler": {"params": n * 4 * H + lin(H, H), "flops": 2 * b * H * H},
    }


def count_flops_torch(model, inputs: tuple[torch.Tensor, ...]) -> int:
    """Total FLOPs of one forward as counted by ``torch.utils.flop_counter.FlopCounterMode``."""
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    with torch.inference_mode(), counter:
        model(*inputs)
    return int(counter.get_total_flops())
