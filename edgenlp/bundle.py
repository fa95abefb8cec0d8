"""Bundles: a directory that carries a lowered model with everything needed to run it.

Layout::

    BUNDLE/
      manifest.json   what this is, how to feed it, what was applied and measured
      model.pte       ExecuTorch program, one method per sequence-length bucket (optional)
      model.onnx      ONNX model with dynamic batch/sequence axes (optional)
      vocab.txt       WordPiece vocabulary
      labels.json     label strings, index = logit position

Manifest keys (``format_version`` 1)::

    format, format_version, created, edgenlp_version
    model       {name, source, family, pretrained, shape{...}, params}
    task        {name, num_labels, train_file, dev_file, ...}
    labels      [str, ...]
    tokenizer   {type: "wordpiece", vocab: "vocab.txt", do_lower_case, strip_accents,
                 tokenize_chinese_chars, cls_token, sep_token, pad_token, unk_token,
                 max_input_chars_per_word[, vocab_map: "vocab_map.json"]}
    max_seq_len int
    inputs      [{name, dtype, shape}]   ("seq" is the variable dimension)
    outputs     [{name, dtype, shape}]
    artifacts   {"pte": {file, methods[{name, seq_len, delegate_calls, ...}], backend, ...},
                 "onnx": {file, opset, dynamic_axes, op_counts, ...}}
    files       {filename: sha256}   every file but manifest.json
    sizes       {filename: bytes}
    applied     [{step, version, config{type, version, ...}, result{...}}]   the typed recipe
                (edgenlp.recipe): fine-tuning, pruning, quantization, export
    parity      {runtime: {policy, max_abs_diff, tolerance, samples, argmax_agreement, passed[, fp32{...}]}}
    quantization (quantized bundles only) {scheme, linears{module name: 32|8|4}, group_size,
                activations, weights, embeddings (null|"int8"|"int4"), vocab_map (null|"vocab_map.json"),
                kept_tokens, fallbacks[str], predicted_weight_bytes}
    tokenizer.id_map (trimmed vocabulary only) "vocab_map.json": full-vocabulary id -> model id
                (edgenlp.quantize.vocab: {"format": "edgenlp-vocab-map", "version": 1,
                "source_vocab_size", "unk_id" (new id), "kept": [ascending old ids]})
    export      {config{...}, seconds{...}, environment{...}}

Trimmed vocabulary (optional ``tokenizer.vocab_map``): the model's embedding
table keeps only some rows; ``vocab.txt`` stays the original vocabulary (so
WordPiece splits words exactly as before) and ``vocab_map.json`` says which
original id each new id stands for::

    {"format": "edgenlp-vocab-map", "version": 1, "kept": [0, 100, 101, 102, 103, 1996, ...]}

``kept[new_id] = original_id``. Tokenizers split with ``vocab.txt`` and then
map every piece's original id to its new id; a piece whose id is not kept
becomes ``[UNK]`` (the new id of the unk token). The special tokens must be
kept. Both the Python runners (:meth:`Bundle.remap_ids`) and the native
runtime apply it.

:meth:`Bundle.open` verifies the manifest, the presence of every listed file
and its sha256, and raises :class:`BundleError` with a one-line message.

This module is the format both sides depend on: ``edgenlp.export`` writes it,
``edgenlp.run`` and ``edgenlp.profile`` read it. It imports neither.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from edgenlp.errors import BundleError
from edgenlp.utils import sha256_file

FORMAT = "edgenlp-bundle"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
# Artifact format -> the runtime that executes it (the native runtime also runs "pte").
FORMAT_RUNTIME = {"pte": "executorch", "onnx": "onnx"}
FORMATS = tuple(FORMAT_RUNTIME)


def pick_bucket(methods: "list[PteMethod]", n_tokens: int) -> "PteMethod":
    """The smallest method whose sequence length holds ``n_tokens`` (the largest when none does)."""
    for m in methods:
        if m.seq_len >= n_tokens:
            return m
    return methods[-1]


def pad_to_bucket(ids, method: "PteMethod", *, pad_id: int):
    """``input_ids`` and ``attention_mask`` (int64 ``[1, L]`` torch tensors) for one text in ``method``'s bucket.

    ``L`` is the bucket length (or the text's length for a dynamic method); the
    text is truncated to ``L`` tokens, the rest padded with ``pad_id`` and masked.
    """
    import torch

    ids = list(ids)
    length = len(ids) if method.dynamic else method.seq_len
    n = min(len(ids), length)
    x = torch.full((1, length), pad_id, dtype=torch.int64)
    mask = torch.zeros((1, length), dtype=torch.int64)
    x[0, :n] = torch.tensor(ids[:n], dtype=torch.int64)
    mask[0, :n] = 1
    return x, mask


VOCAB_MAP_FORMAT = "edgenlp-vocab-map"


@dataclass(frozen=True)
class VocabMap:
    """A trimmed vocabulary: ``kept[new_id] = original_id`` (see the module docstring)."""

    kept: tuple[int, ...]
    unk_id: int  # original id of the unk token

    def __post_init__(self) -> None:
        if not self.kept:
            raise ValueError("a vocabulary map keeps at least the special tokens")
        if len(set(self.kept)) != len(self.kept):
            raise ValueError("a vocabulary map keeps an id twice")
        if min(self.kept) < 0:
            raise ValueError("vocabulary map ids must be >= 0")
        if self.unk_id not in self.kept:
            raise ValueError("a vocabulary map must keep the unk token")

    @cached_property
    def _to_new(self) -> dict[int, int]:
        return {orig: new for new, orig in enumerate(self.kept)}

    def remap(self, ids) -> list[int]:
        """Original ids -> new ids; ids not kept become the unk token's new id."""
        to_new = self._to_new
        unk = to_new[self.unk_id]
        return [to_new.get(int(i), unk) for i in ids]

    def to_dict(self) -> dict:
        return {"format": VOCAB_MAP_FORMAT, "version": 1, "kept": list(self.kept)}

    @classmethod
    def read(cls, path: Path, *, unk_id: int, vocab_size: int, specials: tuple[int, ...] = ()) -> "VocabMap":
        """Read and check ``vocab_map.json``; raises :class:`BundleError` with one line."""
        try:
            d = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise BundleError(f"{path}: cannot read the vocabulary map ({exc})") from exc
        kept = d.get("kept") if isinstance(d, dict) else None
        if not isinstance(kept, list) or not kept or not all(isinstance(i, int) and not isinstance(i, bool) for i in kept):
            raise BundleError(f"{path}: \"kept\" must be a non-empty list of token ids")
        if max(kept) >= vocab_size or min(kept) < 0:
            raise BundleError(f"{path}: ids must be in 0..{vocab_size - 1} (the vocabulary has {vocab_size} tokens)")
        missing = [i for i in (unk_id, *specials) if i not in set(kept)]
        if missing:
            raise BundleError(f"{path}: the special token ids {missing} must be kept")
        try:
            return cls(tuple(kept), unk_id)
        except ValueError as exc:
            raise BundleError(f"{path}: {exc}") from None


@dataclass(frozen=True)
class PteMethod:
    name: str
    seq_len: int
    dynamic: bool = False


@dataclass
class Bundle:
    """A verified bundle directory. Open with :meth:`Bundle.open`."""

    path: Path
    manifest: dict

    @classmethod
    def open(cls, path: str | Path, *, verify: bool = True) -> "Bundle":
        path = Path(path)
        if not path.is_dir():
            raise BundleError(f"{path}: bundle directory not found")
        mpath = path / MANIFEST
        if not mpath.is_file():
            raise BundleError(f"{path}: not a bundle (no {MANIFEST})")
        try:
            manifest = json.loads(mpath.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise BundleError(f"{mpath}: invalid JSON ({exc})") from exc
        if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
            raise BundleError(f"{mpath}: not an {FORMAT} manifest")
        if manifest.get("format_version") != FORMAT_VERSION:
            raise BundleError(f"{mpath}: format_version {manifest.get('format_version')} is not supported (expected {FORMAT_VERSION})")
        for key in ("labels", "tokenizer", "max_seq_len", "files", "artifacts"):
            if key not in manifest:
                raise BundleError(f"{mpath}: missing key {key!r}")
        bundle = cls(path, manifest)
        if verify:
            bundle.verify()
        return bundle

    def verify(self) -> None:
        """Check that every listed file exists and matches its sha256."""
        for name, digest in self.manifest["files"].items():
            f = self.path / name
            if not f.is_file():
                raise BundleError(f"{self.path}: missing file {name} listed in the manifest")
            actual = sha256_file(f)
            if actual != digest:
                raise BundleError(f"{f}: sha256 mismatch (manifest {digest[:12]}…, file {actual[:12]}…): corrupted or modified")
        vocab = self.manifest["tokenizer"].get("vocab", "vocab.txt")
        if not (self.path / vocab).is_file():
            raise BundleError(f"{self.path}: missing vocabulary {vocab}")
        if "quantization" in self.manifest or self.manifest["tokenizer"].get("id_map"):
            from edgenlp.quantize.metadata import check_quantization

            check_quantization(self)

    # ---------------------------------------------------------------- accessors

    @property
    def labels(self) -> tuple[str, ...]:
        return tuple(self.manifest["labels"])

    @property
    def max_seq_len(self) -> int:
        return int(self.manifest["max_seq_len"])

    @property
    def formats(self) -> tuple[str, ...]:
        return tuple(self.manifest["artifacts"])

    def artifact(self, fmt: str) -> Path:
        if fmt not in self.manifest["artifacts"]:
            have = ", ".join(self.formats) or "none"
            raise BundleError(f"{self.path}: bundle has no {fmt} artifact (has: {have}); re-export with --format {fmt} or both")
        return self.path / self.manifest["artifacts"][fmt]["file"]

    @property
    def pte_methods(self) -> list[PteMethod]:
        entry = self.manifest["artifacts"].get("pte", {})
        return sorted(
            (PteMethod(m["name"], int(m["seq_len"]), bool(m.get("dynamic", False))) for m in entry.get("methods", [])),
            key=lambda m: m.seq_len,
        )

    @property
    def vocab_file(self) -> Path:
        return self.path / self.manifest["tokenizer"].get("vocab", "vocab.txt")

    @cached_property
    def tokenizer(self):
        from edgenlp.models.tokenizer import build_tokenizer

        try:
            return build_tokenizer(self.vocab_file, self.manifest["tokenizer"])
        except Exception as exc:
            raise BundleError(f"{self.vocab_file}: cannot build the tokenizer ({exc})") from exc

    @cached_property
    def vocab_map(self) -> VocabMap | None:
        """The trimmed-vocabulary map (``tokenizer.vocab_map``), or None for a full vocabulary."""
        name = self.manifest["tokenizer"].get("vocab_map")
        if not name:
            return None
        tok = self.tokenizer
        specials = tuple(tok.convert_tokens_to_ids(t) for t in (tok.cls_token, tok.sep_token, tok.pad_token))
        return VocabMap.read(self.path / name, unk_id=tok.unk_token_id, vocab_size=len(tok), specials=specials)

    def remap_ids(self, ids) -> list[int]:
        """Token ids from :attr:`tokenizer` as the model takes them (identity without a vocabulary map)."""
        if self.id_map is not None:
            return self.id_map.apply(list(ids))
        vmap = self.vocab_map
        return list(ids) if vmap is None else vmap.remap(ids)

    @cached_property
    def id_map(self):
        """The :class:`edgenlp.quantize.vocab.IdMap` of a trimmed vocabulary, else None."""
        name = self.manifest["tokenizer"].get("id_map")
        if not name:
            return None
        from edgenlp.quantize.vocab import IdMap

        rows = (self.manifest.get("model") or {}).get("shape", {}).get("vocab_size")
        return IdMap.load(self.path / name, vocab_size=rows if isinstance(rows, int) else None)

    @cached_property
    def recipe(self):
        """The typed steps applied to this bundle's model (:mod:`edgenlp.recipe`)."""
        from edgenlp.recipe import RecipeError, recipe_from_list

        try:
            return recipe_from_list(self.manifest.get("applied"), where=f"{self.path / MANIFEST}: applied")
        except RecipeError as exc:
            raise BundleError(str(exc)) from None


def finalize_manifest(tmp_dir: Path, manifest: dict) -> dict:
    """Fill ``files`` (sha256) and ``sizes`` for every file in ``tmp_dir`` and write manifest.json."""
    files, sizes = {}, {}
    for f in sorted(tmp_dir.iterdir()):
        if f.name == MANIFEST or not f.is_file():
            continue
        files[f.name] = sha256_file(f)
        sizes[f.name] = f.stat().st_size
    manifest["files"] = files
    manifest["sizes"] = sizes
    (tmp_dir / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest
