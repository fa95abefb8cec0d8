"""Architecture knowledge as data: one structure table per model family.

A :class:`FamilyTable` says where each part of an encoder lives in a Hugging
Face checkpoint (parameter-name templates, ``{i}`` is the layer index) and how
the family's head is built. Every other module (loading, saving, profiling,
pruning, fine-tuning targets) asks this table instead of testing names.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

# Canonical names of the linear layers inside one encoder layer. Fine-tuning
# targets, pruning surgery and the profiler all speak these names.
LAYER_LINEARS = ("query", "key", "value", "attn_out", "ffn_in", "ffn_out")
# The linears that exist while a layer keeps a head / an FFN neuron (a pruned layer may have neither).
ATTENTION_LINEARS = ("query", "key", "value", "attn_out")
FFN_LINEARS = ("ffn_in", "ffn_out")
LAYER_NORMS = ("attn_norm", "ffn_norm")


@dataclass(frozen=True)
class FamilyTable:
    """Where a family keeps its weights in a Hugging Face checkpoint.

    ``embeddings`` / ``layer`` / ``head`` map canonical module names to
    checkpoint module paths (without ``.weight``/``.bias``). ``prefixes`` are the
    base-model prefixes a checkpoint may put in front of encoder keys
    (``bert.`` in ``BertForSequenceClassification``, none in ``BertModel``).
    """

    name: str
    hf_model_types: tuple[str, ...]
    prefixes: tuple[str, ...]
    embeddings: Mapping[str, str]
    layer: Mapping[str, str]
    head: Mapping[str, str]
    pooler_activation: str  # "tanh" (BERT pooler) or "relu" (DistilBERT pre_classifier)
    pooler_in_base: bool  # the pooler is part of the base model (BERT) or of the task head
    hf_class: str  # class name written to config.json "architectures"
    config_keys: Mapping[str, str] = field(default_factory=dict)  # canonical -> HF config key

    def layer_key(self, index: int, part: str) -> str:
        return self.layer[part].format(i=index)


BERT = FamilyTable(
    name="bert",
    hf_model_types=("bert",),
    prefixes=("bert.", ""),
    embeddings={
        "word": "embeddings.word_embeddings",
        "position": "embeddings.position_embeddings",
        "token_type": "embeddings.token_type_embeddings",
        "norm": "embeddings.LayerNorm",
    },
    layer={
        "query": "encoder.layer.{i}.attention.self.query",
        "key": "encoder.layer.{i}.attention.self.key",
        "value": "encoder.layer.{i}.attention.self.value",
        "attn_out": "encoder.layer.{i}.attention.output.dense",
        "attn_norm": "encoder.layer.{i}.attention.output.LayerNorm",
        "ffn_in": "encoder.layer.{i}.intermediate.dense",
        "ffn_out": "encoder.layer.{i}.output.dense",
        "ffn_norm": "encoder.layer.{i}.output.LayerNorm",
    },
    head={"pooler": "pooler.dense", "classifier": "classifier"},
    pooler_activation="tanh",
    pooler_in_base=True,
    hf_class="BertForSequenceClassification",
    config_keys={
        "vocab_size": "vocab_size",
        "hidden": "hidden_size",
        "num_layers": "num_hidden_layers",
        "num_heads": "num_attention_heads",
        "ffn": "intermediate_size",
        "max_positions": "max_position_embeddings",
        "type_vocab_size": "type_vocab_size",
        "norm_eps": "layer_norm_eps",
        "activation": "hidden_act",
        "dropout": "hidden_dropout_prob",
    },
)

DISTILBERT = FamilyTable(
    name="distilbert",
    hf_model_types=("distilbert",),
    prefixes=("distilbert.", ""),
    embeddings={
        "word": "embeddings.word_embeddings",
        "position": "embeddings.position_embeddings",
        "norm": "embeddings.LayerNorm",
    },
    layer={
        "query": "transformer.layer.{i}.attention.q_lin",
        "key": "transformer.layer.{i}.attention.k_lin",
        "value": "transformer.layer.{i}.attention.v_lin",
        "attn_out": "transformer.layer.{i}.attention.out_lin",
        "attn_norm": "transformer.layer.{i}.sa_layer_norm",
        "ffn_in": "transformer.layer.{i}.ffn.lin1",
        "ffn_out": "transformer.layer.{i}.ffn.lin2",
        "ffn_norm": "transformer.layer.{i}.output_layer_norm",
    },
    head={"pooler": "pre_classifier", "classifier": "classifier"},
    pooler_activation="relu",
    pooler_in_base=False,
    hf_class="DistilBertForSequenceClassification",
    config_keys={
        "vocab_size": "vocab_size",
        "hidden": "dim",
        "num_layers": "n_layers",
        "num_heads": "n_heads",
        "ffn": "hidden_dim",
        "max_positions": "max_position_embeddings",
        "activation": "activation",
        "dropout": "dropout",
    },
)

FAMILIES: dict[str, FamilyTable] = {t.name: t for t in (BERT, DISTILBERT)}


def family_for_model_type(model_type: str) -> FamilyTable:
    """The table for a Hugging Face ``model_type`` (``bert``, ``distilbert``)."""
    for table in FAMILIES.values():
        if model_type in table.hf_model_types:
            return table
    from edgenlp.errors import EdgeNLPError

    known = ", ".join(sorted(t for f in FAMILIES.values() for t in f.hf_model_types))
    raise EdgeNLPError(f"unsupported model_type {model_type!r}; supported: {known}")
