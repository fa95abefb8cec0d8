"""The dynamic model: a static :class:`EncoderClassifier` with exit heads and token thresholds, cut into segments.

:class:`DynamicModel` holds the unchanged base model, one :class:`ExitHead`
per early exit and a :class:`DynamicSpec` (exits, rule, thresholds). It
exposes three views of the same weights:

- ``forward(ids, mask)`` is the base model's static forward (exits off);
- :meth:`DynamicModel.segments` cuts the encoder into :class:`Segment`
  modules, one per group of layers between decision points (an exit or a
  layer after which tokens may drop), plus :class:`EmbeddingSegment`. Each
  takes the hidden states and an additive attention bias and returns the new
  hidden states, the exit logits where the group ends at an exit, and the
  token importance where tokens may drop. Lowering exports these modules
  (``edgenlp.export.segments``) and the runtimes chain them;
- :meth:`DynamicModel.masked_forward` runs a padded batch at full length,
  dropping tokens by masking them out of attention instead of gathering, and
  records every exit's logits and every layer's token count. It is the eager
  reference the gathered, re-bucketed runtimes must equal, and what
  calibration evaluates.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

from edgenlp.dynamic.config import POOLINGS
from edgenlp.dynamic.rules import keep_tokens
from edgenlp.dynamic.spec import DynamicSpec
from edgenlp.models.encoder import MASK_BIAS, EncoderClassifier, EncoderLayer


# --------------------------------------------------------------------------- building blocks


def query_weights(bias: torch.Tensor) -> torch.Tensor:
    """1 for a real token, exactly 0 for a padded (or dropped) one, from the additive bias (0 or ``MASK_BIAS``).

    ``(bias - MASK_BIAS) * (-1 / MASK_BIAS)``: real tokens get 1 up to one rounding
    (the same factor for every token of every runtime), padded ones exactly 0.
    """
    return (bias - MASK_BIAS) * (-1.0 / MASK_BIAS)


def weighted_importance(probs: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """``[b, s]``: attention each key receives, averaged over heads, summed over queries weighted by ``weights [b, s]``.

    ``probs`` are the attention probabilities ``[b, h, s, s]`` (query, key).
    Written as a head mean (a 4-D mean over the innermost dims) and one
    batched matmul with the query weights, ops the XNNPACK partitioner takes,
    so the whole segment stays one delegate call.
    """
    b, h, s, _ = probs.shape
    # mean over heads as a 4-D mean over the two innermost dims (the form XNNPACK takes: no sum, no expand)
    per_pair = probs.permute(0, 2, 3, 1).reshape(b, s * s, h, 1).mean(dim=(2, 3), keepdim=True).reshape(b, s, s)
    return torch.bmm(weights.view(b, 1, s), per_pair).reshape(b, s)


def token_importance(probs: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """Importance of each token (:func:`weighted_importance` over the real queries of the ``[b, s]`` additive bias)."""
    return weighted_importance(probs, query_weights(bias))


def attend(layer: EncoderLayer, x: torch.Tensor, bias4: torch.Tensor):
    """``layer(x, bias4)`` that also returns the attention probabilities ``[b, h, s, s]`` (None without heads).

    The same operations in the same order as :meth:`EncoderLayer.forward`
    (dropout included, for training).
    """
    if layer.num_heads == 0:
        x = layer.attn_norm(x + layer.dropout(layer.attn_out.bias.expand_as(x)))
        return layer.ffn_norm(x + layer.dropout(layer.feed_forward(x))), None
    b, s, _ = x.shape
    h, d = layer.num_heads, layer.head_dim
    q = layer.query(x).view(b, s, h, d).transpose(1, 2).reshape(b * h, s, d)
    k = layer.key(x).view(b, s, h, d).permute(0, 2, 3, 1).reshape(b * h, d, s)
    v = layer.value(x).view(b, s, h, d).transpose(1, 2).reshape(b * h, s, d)
    scores = torch.bmm(q, k).view(b, h, s, s) * (1.0 / math.sqrt(d)) + bias4
    probs = torch.softmax(scores, dim=-1)
    ctx = torch.bmm(layer.attn_dropout(probs).view(b * h, s, s), v).view(b, h, s, d).transpose(1, 2).reshape(b, s, h * d)
    x = layer.attn_norm(x + layer.dropout(layer.attn_out(ctx)))
    return layer.ffn_norm(x + layer.dropout(layer.feed_forward(x))), probs


def masked_mean(x: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """``[b, H]``: the mean of ``x [b, s, H]`` over the tokens whose ``weights [b, s]`` are 1 (0: padded or dropped).

    Two batched matmuls (the count is ``weights . weights``, equal to their sum for weights of 0 and 1): ops the
    XNNPACK partitioner takes, so a segment ending at a mean-pooled exit stays one delegate call, and no shape
    enters the arithmetic, so ONNX keeps its dynamic sequence axis.
    """
    b, s, h = x.shape
    w = weights.reshape(b, 1, s)
    total = torch.bmm(w, x).reshape(b, h)
    count = torch.bmm(w, weights.reshape(b, s, 1)).reshape(b, 1)
    return total / count


class ExitHead(nn.Module):
    """An early exit: the family's pooler (dense + activation) and a classifier, on the ``[CLS]`` token or on the mean
    of the tokens the layer processed (``pooling="mean"``: early layers have barely mixed the sentence into ``[CLS]``)."""

    def __init__(self, hidden: int, pooler_width: int, num_labels: int, *, activation: str = "tanh",
                 pooling: str = "cls") -> None:
        super().__init__()
        if pooling not in POOLINGS:
            raise ValueError(f"pooling must be one of {', '.join(POOLINGS)}, got {pooling!r}")
        self.pooler = nn.Linear(hidden, pooler_width)
        self.classifier = nn.Linear(pooler_width, num_labels)
        self.activation = activation
        self.pooling = pooling

    @classmethod
    def like(cls, model: EncoderClassifier, *, pooling: str = "cls") -> "ExitHead":
        """A head shaped like ``model``'s, initialised from its final pooler and classifier."""
        head = cls(model.shape.hidden, model.shape.pooler_width, model.num_labels, activation=model.family.pooler_activation,
                   pooling=pooling)
        head.load_state_dict({k: v.detach().clone().float() for k, v in _plain_head_state(model).items()})
        return head

    def pool(self, x: torch.Tensor, weights: torch.Tensor | None = None) -> torch.Tensor:
        """``[b, H]`` from hidden states ``x [b, s, H]``: ``[CLS]``, or the mean over ``weights`` (1 real token, 0 not;
        None: every token)."""
        if self.pooling == "cls":
            return x[:, :1].reshape(x.shape[0], x.shape[2])
        if weights is None:
            weights = torch.ones(x.shape[:2], dtype=x.dtype, device=x.device)
        return masked_mean(x, weights.to(x.dtype))

    def classify(self, pooled: torch.Tensor) -> torch.Tensor:
        """Logits from pooled features ``[b, H]`` (what :meth:`pool` returns; training caches them)."""
        z = self.pooler(pooled)
        z = torch.tanh(z) if self.activation == "tanh" else torch.relu(z)
        return self.classifier(z)

    def forward(self, x: torch.Tensor, weights: torch.Tensor | None = None) -> torch.Tensor:
        return self.classify(self.pool(x, weights))


def _plain_head_state(model: EncoderClassifier) -> dict:
    """The final pooler/classifier weights as plain tensors (a quantized model's fp32 source when it has one)."""
    quant = getattr(model, "quantization", None)
    src = quant.source if quant is not None else model
    return {f"{m}.{p}": getattr(getattr(src, m), p) for m in ("pooler", "classifier") for p in ("weight", "bias")}


def final_logits(model: EncoderClassifier, x: torch.Tensor) -> torch.Tensor:
    """The base model's head on hidden states ``x`` (what :meth:`EncoderClassifier.forward` does after encoding)."""
    cls = x[:, :1].reshape(x.shape[0], x.shape[2])
    return model.classifier(model.head_dropout(model.pooler_act(model.pooler(cls))))


class EmbeddingSegment(nn.Module):
    """``input_ids [1, S]`` -> hidden states ``[1, S, hidden]`` (the base model's embeddings)."""

    def __init__(self, model: EncoderClassifier) -> None:
        super().__init__()
        self.embeddings = model.embeddings

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.embeddings(input_ids)


class Segment(nn.Module):
    """Layers ``layer_indices`` (0-based) of a model, then an exit and/or the token importance.

    ``forward(hidden [b, S, H], bias [b, S])`` returns ``(hidden, [logits [b, C]], [importance [b, S]])``:
    logits when the segment ends at an exit (the model's own classifier for
    the last layer), importance when tokens may drop after it. ``bias`` is 0
    for a real token and ``MASK_BIAS`` for a padded one. Submodule names
    follow the base model's (``layers.3.query``, ``pooler``, ``classifier``),
    so per-layer quantization settings find them; an early exit's head is
    ``exit_head``.
    """

    def __init__(self, model: EncoderClassifier, layer_indices: tuple[int, ...], *, head: ExitHead | None,
                 final: bool, importance: bool) -> None:
        super().__init__()
        if not layer_indices:
            raise ValueError("a segment needs at least one layer")
        self.layer_indices = tuple(layer_indices)
        self.layers = nn.ModuleDict({str(i): model.layers[i] for i in layer_indices})
        self.final = final
        self.has_exit = final or head is not None
        self.importance = importance
        if importance and model.layers[layer_indices[-1]].num_heads == 0:
            raise ValueError(f"layer {layer_indices[-1] + 1} has no attention heads: it cannot rank tokens")
        if final:
            self.pooler, self.classifier = model.pooler, model.classifier
            self.pooler_act = model.pooler_act
        elif head is not None:
            self.exit_head = head

    @property
    def outputs(self) -> tuple[str, ...]:
        return ("hidden",) + (("logits",) if self.has_exit else ()) + (("importance",) if self.importance else ())

    def forward(self, hidden: torch.Tensor, bias: torch.Tensor):
        b, s = bias.shape
        bias4 = bias.view(b, 1, 1, s)
        layers = [self.layers[str(i)] for i in self.layer_indices]
        for layer in layers[:-1]:
            hidden = layer(hidden, bias4)
        hidden, probs = attend(layers[-1], hidden, bias4)
        out = [hidden]
        if self.final:
            cls = hidden[:, :1].reshape(b, hidden.shape[2])
            out.append(self.classifier(self.pooler_act(self.pooler(cls))))
        elif self.has_exit:
            out.append(self.exit_head(hidden, query_weights(bias) if self.exit_head.pooling == "mean" else None))
        if self.importance:
            out.append(token_importance(probs, bias))
        return tuple(out)


# --------------------------------------------------------------------------- the model


@dataclass
class MaskedTrace:
    """What :meth:`DynamicModel.masked_forward` saw for a batch (numpy, one row per sentence).

    ``exit_logits``: layer number -> ``[N, C]`` logits of that exit (every exit, run
    to the end); ``tokens``: ``[N, L]`` tokens each layer processed; ``kept``:
    layer number -> list of kept original positions per sentence (token layers only).
    """

    exit_logits: dict[int, np.ndarray]
    tokens: np.ndarray
    kept: dict[int, list[np.ndarray]] = field(default_factory=dict)
    importance: dict[int, list[np.ndarray]] = field(default_factory=dict)


class DynamicModel(nn.Module):
    """A static model plus exit heads (``exit_heads[str(layer)]``) and the :class:`DynamicSpec` it runs with."""

    def __init__(self, base: EncoderClassifier, spec: DynamicSpec, heads: dict[int, ExitHead]) -> None:
        super().__init__()
        if spec.num_layers != base.shape.num_layers:
            raise ValueError(f"spec is for {spec.num_layers} layers, the model has {base.shape.num_layers}")
        want = set(spec.exits[:-1])
        if set(heads) != want:
            raise ValueError(f"exit heads for layers {sorted(heads)} do not match the spec's early exits {sorted(want)}")
        for t in spec.token_layers:
            if base.layers[t - 1].num_heads == 0:
                raise ValueError(f"tokens cannot drop after layer {t}: it has no attention heads")
        self.base = base
        self.spec = spec
        self.exit_heads = nn.ModuleDict({str(l): heads[l] for l in sorted(heads)})

    # the base model's identity, for code that lowers or reports any model
    @property
    def shape(self):
        return self.base.shape

    @property
    def labels(self):
        return self.base.labels

    @property
    def num_labels(self) -> int:
        return self.base.num_labels

    @property
    def family(self):
        return self.base.family

    @property
    def quantization(self):
        return getattr(self.base, "quantization", None)

    def with_base(self, base: EncoderClassifier) -> "DynamicModel":
        """The same exits and spec on another base of the same shape (e.g. its quantized or fp32 twin), in this
        model's mode (train or eval)."""
        return DynamicModel(base, self.spec, {int(k): h for k, h in self.exit_heads.items()}).train(self.training)

    def with_spec(self, spec: DynamicSpec) -> "DynamicModel":
        """The same base and exits with another spec (e.g. a calibrated threshold), in this model's mode."""
        return DynamicModel(self.base, spec, {int(k): h for k, h in self.exit_heads.items()}).train(self.training)

    def with_heads(self, heads) -> "DynamicModel":
        """The same base and spec with other exit heads (``{layer: head}`` or a module dict keyed like
        :attr:`exit_heads`, e.g. the same heads quantized), in this model's mode."""
        return DynamicModel(self.base, self.spec, {int(k): h for k, h in heads.items()}).train(self.training)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids=None) -> torch.Tensor:
        """The static model's logits (every layer, every token)."""
        return self.base(input_ids, attention_mask, token_type_ids)

    def head(self, layer: int):
        """The exit of ``layer`` (1-based) as a function of hidden states."""
        if layer == self.spec.num_layers:
            return lambda x: final_logits(self.base, x)
        return self.exit_heads[str(layer)]

    # ------------------------------------------------------------------ segments

    def embedding_segment(self) -> EmbeddingSegment:
        return EmbeddingSegment(self.base).train(self.training)

    def segments(self) -> list[Segment]:
        """The encoder cut at every exit and token layer (see :attr:`DynamicSpec.segment_ends`)."""
        out = []
        L = self.spec.num_layers
        for idx in self.spec.segment_layers():
            end = idx[-1] + 1
            head = self.exit_heads[str(end)] if end in self.spec.exits and end != L else None
            seg = Segment(self.base, idx, head=head, final=end == L, importance=end in self.spec.token_layers)
            out.append(seg.train(self.training))
        return out

    # ------------------------------------------------------------------ the masked reference

    def masked_pass(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, *, tokens: str, thresholds,
                    keep_ratio: float, trace: bool = False):
        """The masked reference as torch tensors (differentiable in the weights; decisions are not).

        Returns ``(exit_logits {layer: [N, C] tensor}, counts [N, L], features
        {layer: [N, H] pooled features at each exit (the head's pooling; [CLS] at the last)}, kept, importance)``.
        """
        spec, base = self.spec, self.base
        x = base.embeddings(input_ids)
        keep = attention_mask.bool().clone()
        n, L = input_ids.shape[0], spec.num_layers
        counts = np.zeros((n, L), dtype=np.int64)
        logits, features, kept, importance = {}, {}, {}, {}
        for i, layer in enumerate(base.layers):
            number = i + 1
            counts[:, i] = keep.sum(1).cpu().numpy()
            bias = torch.where(keep, 0.0, MASK_BIAS).to(x.dtype)
            x, probs = attend(layer, x, bias.view(n, 1, 1, -1))
            if number in spec.exits:
                if number == L:
                    features[number], logits[number] = x[:, 0], self.head(number)(x)
                else:  # an early exit pools the tokens this layer processed
                    head = self.exit_heads[str(number)]
                    features[number] = head.pool(x, keep.to(x.dtype))
                    logits[number] = head.classify(features[number])
            if number in spec.token_layers and tokens != "none":
                imp = token_importance(probs.detach(), bias).float().cpu().numpy()
                rows = keep.cpu().numpy()
                new = np.zeros_like(rows)
                kept_pos, imps = [], []
                for r in range(n):
                    pos = np.flatnonzero(rows[r])
                    k = keep_tokens(imp[r, pos], mode=tokens, threshold=thresholds[i] if thresholds else None,
                                    ratio=keep_ratio)
                    new[r, pos[k]] = True
                    if trace:
                        kept_pos.append(pos[k])
                        imps.append(imp[r, pos])
                keep = torch.from_numpy(new).to(keep.device)
                if trace:
                    kept[number], importance[number] = kept_pos, imps
        return logits, counts, features, kept, importance

    @torch.no_grad()
    def masked_forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, *, tokens: str | None = None,
                       thresholds=None, keep_ratio: float | None = None, trace: bool = False) -> MaskedTrace:
        """Run every layer at full length, dropping tokens by masking; record every exit and token count.

        ``tokens``/``thresholds``/``keep_ratio`` override the spec's token
        pruning (``thresholds``: one per layer, None where nothing drops).
        Exits never stop the computation here: every exit's logits are
        recorded, and :func:`edgenlp.dynamic.rules.exit_fires` tells where a
        rule would have stopped. Decisions use :func:`keep_tokens`, per sentence.
        """
        spec = self.spec
        logits, counts, _, kept, importance = self.masked_pass(
            input_ids, attention_mask, tokens=spec.tokens if tokens is None else tokens,
            thresholds=spec.token_thresholds if thresholds is None else tuple(thresholds),
            keep_ratio=spec.keep_ratio if keep_ratio is None else keep_ratio, trace=trace)
        return MaskedTrace({k: v.float().cpu().numpy() for k, v in logits.items()}, counts, kept, importance)
