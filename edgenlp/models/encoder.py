"""The encoder every edgenlp step works on.

:class:`EncoderClassifier` is a plain PyTorch BERT-style encoder with a
sequence-classification head. Its shape may be uneven (heads and FFN width per
layer), so a pruned model is a normal model of a smaller shape. It is built
from export-friendly ops: the attention mask becomes an additive bias once,
attention is explicit matmul/softmax, and :func:`edgenlp.export.graph.prepare`
swaps layer norms for a decomposition the XNNPACK partitioner takes whole.

Canonical submodule names (``layers[i].query``, ``.key``, ``.value``,
``.attn_out``, ``.ffn_in``, ``.ffn_out``, ``.attn_norm``, ``.ffn_norm``) match
:data:`edgenlp.models.families.LAYER_LINEARS`.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import torch
from torch import nn

from edgenlp.models.families import FAMILIES

ACTIVATIONS = ("gelu", "gelu_new", "relu")
MASK_BIAS = -1e9  # additive bias for padded keys; exp() underflows to exactly 0


@dataclass(frozen=True)
class EncoderShape:
    """Shape of an encoder. ``heads`` and ``ffn`` are per layer (pruning makes them uneven).

    ``head_dim`` is global: pruning removes whole heads (a layer's attention
    width is ``heads[i] * head_dim``), never dimensions inside a head. ``hidden``
    is shared by every layer (hidden-dimension pruning shrinks it everywhere).
    A layer with 0 heads skips attention and one with ``ffn == 0`` skips the FFN
    (each block then contributes only its output bias).
    """

    family: str
    vocab_size: int
    hidden: int
    heads: tuple[int, ...]
    head_dim: int
    ffn: tuple[int, ...]
    max_positions: int = 512
    type_vocab_size: int = 2
    norm_eps: float = 1e-12
    activation: str = "gelu"
    dropout: float = 0.1
    pooler: int | None = None  # pooler output width; None = hidden (hidden-dim pruning keeps the original width)

    def __post_init__(self) -> None:
        if self.family not in FAMILIES:
            raise ValueError(f"family must be one of {sorted(FAMILIES)}, got {self.family!r}")
        object.__setattr__(self, "heads", tuple(int(h) for h in self.heads))
        object.__setattr__(self, "ffn", tuple(int(f) for f in self.ffn))
        if len(self.heads) != len(self.ffn):
            raise ValueError(f"heads ({len(self.heads)} layers) and ffn ({len(self.ffn)} layers) disagree")
        for name in ("vocab_size", "hidden", "head_dim", "max_positions"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if any(h < 0 for h in self.heads) or any(f < 0 for f in self.ffn):
            raise ValueError("heads and ffn widths must be >= 0")
        if self.type_vocab_size < 0:
            raise ValueError("type_vocab_size must be >= 0")
        if self.pooler is not None and self.pooler <= 0:
            raise ValueError(f"pooler must be positive or None, got {self.pooler}")
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {ACTIVATIONS}, got {self.activation!r}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")

    @classmethod
    def uniform(
        cls,
        *,
        family: str = "bert",
        num_layers: int,
        hidden: int,
        num_heads: int,
        ffn: int,
        vocab_size: int = 30522,
        **kwargs,
    ) -> "EncoderShape":
        if hidden % num_heads:
            raise ValueError(f"hidden {hidden} is not divisible by num_heads {num_heads}")
        return cls(
            family=family,
            vocab_size=vocab_size,
            hidden=hidden,
            heads=(num_heads,) * num_layers,
            head_dim=hidden // num_heads,
            ffn=(ffn,) * num_layers,
            **kwargs,
        )

    @property
    def num_layers(self) -> int:
        return len(self.heads)

    @property
    def pooler_width(self) -> int:
        return self.hidden if self.pooler is None else self.pooler

    @property
    def is_uniform(self) -> bool:
        return len(set(self.heads)) <= 1 and len(set(self.ffn)) <= 1

    def to_dict(self) -> dict:
        d = asdict(self)
        d["heads"] = list(self.heads)
        d["ffn"] = list(self.ffn)
        d["num_layers"] = self.num_layers
        if self.pooler is None:
            del d["pooler"]  # directories written before the field existed read the same
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "EncoderShape":
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in d.items() if k in known})


def _activation(name: str):
    if name == "relu":
        return torch.relu
    if name == "gelu_new":
        return lambda x: nn.functional.gelu(x, approximate="tanh")
    return nn.functional.gelu


class Embeddings(nn.Module):
    def __init__(self, shape: EncoderShape) -> None:
        super().__init__()
        self.word = nn.Embedding(shape.vocab_size, shape.hidden)
        self.position = nn.Embedding(shape.max_positions, shape.hidden)
        self.token_type = nn.Embedding(shape.type_vocab_size, shape.hidden) if shape.type_vocab_size else None
        self.norm = nn.LayerNorm(shape.hidden, eps=shape.norm_eps)
        self.dropout = nn.Dropout(shape.dropout)

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        seq = input_ids.shape[1]
        # Slices and broadcasting (no select/unsqueeze) keep these adds inside XNNPACK.
        x = self.word(input_ids) + self.position.weight[:seq]
        if self.token_type is not None:
            if token_type_ids is None:  # single-segment input: every token has type 0
                x = x + self.token_type.weight[:1]
            else:
                x = x + self.token_type(token_type_ids)
        return self.dropout(self.norm(x))


class EncoderLayer(nn.Module):
    """Post-LN transformer layer with ``num_heads`` heads of ``head_dim`` and an FFN of ``ffn`` neurons."""

    def __init__(self, shape: EncoderShape, num_heads: int, ffn: int) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = shape.head_dim
        inner = num_heads * shape.head_dim
        self.query = nn.Linear(shape.hidden, inner)
        self.key = nn.Linear(shape.hidden, inner)
        self.value = nn.Linear(shape.hidden, inner)
        self.attn_out = nn.Linear(inner, shape.hidden)
        self.attn_norm = nn.LayerNorm(shape.hidden, eps=shape.norm_eps)
        self.ffn_in = nn.Linear(shape.hidden, ffn)
        self.ffn_out = nn.Linear(ffn, shape.hidden)
        self.ffn_norm = nn.LayerNorm(shape.hidden, eps=shape.norm_eps)
        self.act = _activation(shape.activation)
        self.dropout = nn.Dropout(shape.dropout)
        self.attn_dropout = nn.Dropout(shape.dropout)

    def attention(self, x: torch.Tensor, mask_bias: torch.Tensor) -> torch.Tensor:
        """Multi-head self-attention; returns the output projection's result."""
        if self.num_heads == 0:  # every head pruned: the block contributes only its bias
            return self.attn_out.bias.expand_as(x)
        b, s, _ = x.shape
        h, d = self.num_heads, self.head_dim
        # Explicit 3-D batched matmuls (no 4-D matmul broadcasting): every op here
        # maps to one XNNPACK node, so the encoder lowers as a single partition.
        q = self.query(x).view(b, s, h, d).transpose(1, 2).reshape(b * h, s, d)
        k = self.key(x).view(b, s, h, d).permute(0, 2, 3, 1).reshape(b * h, d, s)
        v = self.value(x).view(b, s, h, d).transpose(1, 2).reshape(b * h, s, d)
        scores = torch.bmm(q, k).view(b, h, s, s) * (1.0 / math.sqrt(d)) + mask_bias
        probs = self.attn_dropout(torch.softmax(scores, dim=-1)).view(b * h, s, s)
        ctx = torch.bmm(probs, v).view(b, h, s, d).transpose(1, 2).reshape(b, s, h * d)
        return self.attn_out(ctx)

    def feed_forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.ffn_in.out_features == 0:
            return self.ffn_out.bias.expand_as(x)
        return self.ffn_out(self.act(self.ffn_in(x)))

    def forward(self, x: torch.Tensor, mask_bias: torch.Tensor) -> torch.Tensor:
        x = self.attn_norm(x + self.dropout(self.attention(x, mask_bias)))
        return self.ffn_norm(x + self.dropout(self.feed_forward(x)))


class EncoderClassifier(nn.Module):
    """BERT-family encoder + sequence-classification head.

    ``forward(input_ids, attention_mask)`` takes int64 ``[batch, seq]`` tensors
    (mask: 1 for tokens, 0 for padding) and returns float logits
    ``[batch, num_labels]``.
    """

    def __init__(self, shape: EncoderShape, num_labels: int, *, labels: tuple[str, ...] | None = None) -> None:
        super().__init__()
        if num_labels < 1:
            raise ValueError(f"num_labels must be >= 1, got {num_labels}")
        self.shape = shape
        self.labels = tuple(labels) if labels is not None else tuple(str(i) for i in range(num_labels))
        if len(self.labels) != num_labels:
            raise ValueError(f"{len(self.labels)} labels given for num_labels={num_labels}")
        self.embeddings = Embeddings(shape)
        self.layers = nn.ModuleList(EncoderLayer(shape, h, f) for h, f in zip(shape.heads, shape.ffn))
        self.pooler = nn.Linear(shape.hidden, shape.pooler_width)
        self.pooler_act = torch.tanh if FAMILIES[shape.family].pooler_activation == "tanh" else torch.relu
        self.head_dropout = nn.Dropout(shape.dropout)
        self.classifier = nn.Linear(shape.pooler_width, num_labels)

    @property
    def num_labels(self) -> int:
        return self.classifier.out_features

    @property
    def family(self):
        return FAMILIES[self.shape.family]

    def mask_bias(self, attention_mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """Additive attention bias ``[batch, 1, 1, seq]``: 0 for tokens, a large negative for padding."""
        b, s = attention_mask.shape
        return (1.0 - attention_mask.to(dtype)).view(b, 1, 1, s) * MASK_BIAS

    def encode(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids=None) -> torch.Tensor:
        x = self.embeddings(input_ids, token_type_ids)
        bias = self.mask_bias(attention_mask, x.dtype)
        for layer in self.layers:
            x = layer(x, bias)
        return x

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids=None) -> torch.Tensor:
        x = self.encode(input_ids, attention_mask, token_type_ids)
        cls = x[:, :1].reshape(x.shape[0], x.shape[2])  # [CLS] token (slice, not select: stays in XNNPACK)
        pooled = self.pooler_act(self.pooler(cls))
        return self.classifier(self.head_dropout(pooled))

    def init_weights(self, *, std: float = 0.02, seed: int | None = None) -> "EncoderClassifier":
        """BERT-style initialisation (normal(0, std) weights, zero biases, unit norms)."""
        gen = torch.Generator().manual_seed(seed) if seed is not None else None
        with torch.no_grad():
            for module in self.modules():
                if isinstance(module, (nn.Linear, nn.Embedding)):
                    module.weight.normal_(0.0, std, generator=gen)
                    if getattr(module, "bias", None) is not None:
                        module.bias.zero_()
                elif isinstance(module, nn.LayerNorm):
                    module.weight.fill_(1.0)
                    module.bias.zero_()
        return self

    def param_count(self, *, trainable_only: bool = False) -> int:
        return sum(p.numel() for p in self.parameters() if p.requires_grad or not trainable_only)


@dataclass(frozen=True)
class ModelInfo:
    """What a loaded model is: name, where it came from, shape, and whether weights are pretrained."""

    name: str
    source: str
    shape: EncoderShape
    pretrained: bool
    vocab_file: str | None = None
    tokenizer: dict = field(default_factory=dict)
    recipe: tuple = ()  # typed steps already applied (edgenlp.recipe.Step: fine-tuning, pruning, ...)

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "source": self.source,
            "family": self.shape.family,
            "pretrained": self.pretrained,
            "shape": self.shape.to_dict(),
        }
