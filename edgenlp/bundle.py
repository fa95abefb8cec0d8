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
                 "onnx": {file, opset, dynamic_axes, op_counts, ...[, shared_weights{file, bytes,
                          bytes_inline_before, tensors, unique_tensors}] (dynamic bundles)}}
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
    dynamic     (dynamic bundles only) the segments, exits, rule and token pruning; see below

Dynamic bundles (optional ``dynamic`` key; absent = a static bundle, run as before)
----------------------------------------------------------------------------------
A dynamic bundle is a complete static bundle plus segments, so a runtime
that does not know segments runs it as the static model. ``model.pte`` holds,
besides ``forward_<S>`` (still the only methods ``artifacts.pte.methods``
lists), ``embed_<S>`` and ``seg<k>_<S>`` for every bucket ``S``, all in one
program sharing one copy of the weights (``sizes["model.pte"]`` stays within a
few percent of the static program's plus the exit heads). ONNX gets one file
per segment beside the static ``model.onnx``: ``model.embed.onnx`` and
``model.seg<k>.onnx``, batch 1 and a dynamic ``seq`` axis (any length, no
buckets). The ONNX files keep their weights in one external-data file,
``model.onnx.data``, each weight once (``artifacts.onnx.shared_weights``;
load them from the bundle folder)::

    dynamic {
      version     1
      num_layers  L;  hidden H;  num_labels C
      mask_bias   -1e9        the additive attention bias of a padded position (0 for a token)
      buckets     [S, ...]    ascending sequence lengths of the pte segment methods
      embedding   {pte: {"S": "embed_S", ...}, onnx: "model.embed.onnx"}
                  input_ids int64 [1, S] -> hidden float32 [1, S, H]
      segments    [{index: k, layers: [first, last], exit: bool, tokens: bool,
                    outputs: ["hidden", "logits" (exit), "importance" (tokens)],
                    pte: {"S": "seg<k>_S", ...}, onnx: "model.seg<k>.onnx"}, ...]
                  in execution order, covering layers 1..L once (1-based, inclusive). Inputs:
                  hidden float32 [1, S, H], bias float32 [1, S]; outputs in the order listed:
                  hidden [1, S, H], logits [1, C] where the segment ends at an exit (the last
                  segment's are the model's own classifier), importance [1, S] where tokens may
                  drop after it (the attention each token receives, averaged over heads and
                  summed over the real queries: importances average 1 over a sentence).
                  In the ONNX files the hidden-state output is named ``hidden_out``.
      spec        {num_layers, exits, rule, threshold, tokens, token_layers, token_thresholds, keep_ratio}
                  (edgenlp.dynamic.spec.DynamicSpec; exits are layer numbers, the last is L)
      rule        {name: "maxprob"|"entropy"|"patience", threshold, range: [lo, hi], stops_when}
      tokens      {mode: "none"|"ltp"|"keep", layers: [l, ...], thresholds: [per layer 1..L, null where
                   none], keep_ratio: R, always_keep: ["first", "last"]}
      pte         {methods: [{name, seq_len, delegate_calls, ...}]}   reports of the segment methods
      onnx        {files: {file: {inputs, outputs}}}
    }

How a runtime runs one sentence of ``n`` tokens (``edgenlp.run.dynamic`` is the reference)::

    S = smallest bucket >= n (ONNX: S = n); pad ids with the pad id; hidden = embed_S(ids)
    positions = 0..n-1 (original positions of the current tokens); count = n
    for each segment k:
        bias[j] = 0 for j < count, mask_bias otherwise
        outputs = seg<k>_S(hidden, bias)
        if it has logits and (it is the last segment or the exit rule fires): answer with them, stop
        if it has importance and tokens are pruned: keep = decision(importance[:count]) (first and
            last always kept, order kept); if fewer than count remain: hidden = the kept rows,
            re-padded (zeros) to the smallest bucket S that holds them; count = len(keep)
        else hidden = outputs.hidden

The exit rule and the token decision are :mod:`edgenlp.dynamic.rules` (probabilities in
double; ``maxprob``: stop when max p >= threshold; ``entropy``: stop when
-sum p log p / log C <= threshold; ``patience``: stop when the last ``threshold`` exits
agree on the argmax; ``ltp``: keep importance >= the layer's threshold (float32);
``keep``: keep the ``max(min(n, 2), ceil(R * n))`` most important, stable on ties).
A prediction reports the exit layer (the last layer of the answering segment) and the
tokens each layer processed. Runtimes may override the threshold and switch token
pruning to a keep ratio per call, or run ``static`` (the ``forward_<S>`` methods / ``model.onnx``).

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

from edgenlp.dynamic.manifest import DynamicEntry
from edgenlp.errors import BundleError
from edgenlp.models.families import ATTENTION_LINEARS, FAMILIES, FFN_LINEARS
from edgenlp.models.vocab import IdRemap
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
VOCAB_MAP_FILE = "vocab_map.json"


class VocabMap(IdRemap):
    """``vocab_map.json``: the trimmed vocabulary a bundle's model takes (see the module docstring).

    ``kept[new_id] = original_id``; the lookup itself is
    :class:`edgenlp.models.vocab.IdRemap`. Written by export, read (and checked
    against the tokenizer and the model's table) by :meth:`Bundle.vocab_map`.
    """

    def to_dict(self) -> dict:
        return {"format": VOCAB_MAP_FORMAT, "version": 1, "source_vocab_size": self.source_vocab_size,
                "unk_id": self.unk_id, "kept": list(self.kept)}

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), separators=(",", ":")) + "\n")

    @classmethod
    def from_remap(cls, remap: IdRemap) -> "VocabMap":
        return cls(remap.kept, source_vocab_size=remap.source_vocab_size, unk_old_id=remap.kept[remap.unk_id])

    @classmethod
    def read(cls, path: Path, *, unk_id: int, vocab_size: int, specials: tuple[int, ...] = (),
             rows: int | None = None) -> "VocabMap":
        """Read and check ``vocab_map.json``; raises :class:`BundleError` with one line.

        ``unk_id`` is the unk token's original id, ``vocab_size`` the number of
        lines of ``vocab.txt``, ``specials`` original ids that must be kept and
        ``rows`` the model's embedding-table rows (the map must keep that many).
        The file's ``format``/``version``, ``source_vocab_size`` and ``unk_id``
        (new id) are checked when present.
        """
        try:
            d = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise BundleError(f"{path}: unreadable vocabulary map ({exc})") from None
        if not isinstance(d, dict):
            raise BundleError(f"{path}: unreadable vocabulary map (not a JSON object)")
        if "format" in d and (d.get("format") != VOCAB_MAP_FORMAT or d.get("version") != 1):
            raise BundleError(f"{path}: not an {VOCAB_MAP_FORMAT} version 1 file")
        kept = d.get("kept")
        if not isinstance(kept, list) or not kept or not all(isinstance(i, int) and not isinstance(i, bool) for i in kept):
            raise BundleError(f"{path}: \"kept\" must be a non-empty list of token ids")
        if rows is not None and len(kept) != rows:
            raise BundleError(f"{path}: keeps {len(kept)} tokens but the model's embedding table has {rows} rows")
        n = d.get("source_vocab_size", vocab_size)
        if n != vocab_size:
            raise BundleError(f"{path}: source_vocab_size {n!r} is not the vocabulary's {vocab_size} tokens")
        if max(kept) >= vocab_size or min(kept) < 0:
            raise BundleError(f"{path}: ids must be in 0..{vocab_size - 1} (the vocabulary has {vocab_size} tokens)")
        if any(a >= b for a, b in zip(kept, kept[1:])):
            raise BundleError(f"{path}: \"kept\" must list ascending ids, each once")
        missing = [i for i in (unk_id, *specials) if i not in set(kept)]
        if missing:
            raise BundleError(f"{path}: the special token ids {missing} must be kept")
        out = cls(kept, source_vocab_size=vocab_size, unk_old_id=unk_id)
        if "unk_id" in d and d["unk_id"] != out.unk_id:
            raise BundleError(f"{path}: unk_id {d['unk_id']!r} is not the unk token's new id {out.unk_id}")
        return out


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
            check_quantization(self)
        if "dynamic" in self.manifest:
            self.dynamic  # noqa: B018  (parses and checks the dynamic section)

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
        """The trimmed-vocabulary map (``tokenizer.vocab_map`` or ``tokenizer.id_map``), or None for a full vocabulary."""
        settings = self.manifest["tokenizer"]
        name = settings.get("id_map") or settings.get("vocab_map")
        if not name:
            return None
        tok = self.tokenizer
        specials = tuple(tok.convert_tokens_to_ids(t) for t in (tok.cls_token, tok.sep_token, tok.pad_token))
        rows = (self.manifest.get("model") or {}).get("shape", {}).get("vocab_size")
        return VocabMap.read(self.path / name, unk_id=tok.unk_token_id, vocab_size=len(tok), specials=specials,
                             rows=rows if isinstance(rows, int) and settings.get("id_map") else None)

    @property
    def id_map(self) -> VocabMap | None:
        """The same map as :attr:`vocab_map` (the name export and the tests used)."""
        return self.vocab_map

    def remap_ids(self, ids) -> list[int]:
        """Token ids from :attr:`tokenizer` as the model takes them (identity without a vocabulary map)."""
        vmap = self.vocab_map
        return list(ids) if vmap is None else vmap.apply(ids)

    @property
    def is_dynamic(self) -> bool:
        return "dynamic" in self.manifest

    @cached_property
    def dynamic(self) -> "DynamicEntry | None":
        """The parsed, checked ``dynamic`` section (None for a static bundle); raises :class:`BundleError`."""
        if "dynamic" not in self.manifest:
            return None
        return DynamicEntry.from_manifest(self.manifest, where=str(self.path / MANIFEST))

    @cached_property
    def recipe(self):
        """The typed steps applied to this bundle's model (:mod:`edgenlp.recipe`)."""
        from edgenlp.recipe import RecipeError, recipe_from_list

        try:
            return recipe_from_list(self.manifest.get("applied"), where=f"{self.path / MANIFEST}: applied")
        except RecipeError as exc:
            raise BundleError(str(exc)) from None


# --------------------------------------------------------------------------- quantization metadata


def expected_linears(shape: dict) -> set[str]:
    """Linear names a model of this manifest shape has (zero-width linears excluded)."""
    heads, ffn = shape.get("heads", []), shape.get("ffn", [])
    names = set()
    for i, (h, f) in enumerate(zip(heads, ffn)):
        if h:
            names.update(f"layers.{i}.{p}" for p in ATTENTION_LINEARS)
        if f:
            names.update(f"layers.{i}.{p}" for p in FFN_LINEARS)
    family = FAMILIES.get(shape.get("family"))
    names.update(family.head if family else ("pooler", "classifier"))
    return names


def check_quantization(bundle) -> None:
    """The ``quantization`` key, the recipe's quantize step and the vocabulary map agree with the model."""
    where = f"{bundle.path / 'manifest.json'}"
    q = bundle.manifest.get("quantization")
    shape = (bundle.manifest.get("model") or {}).get("shape") or {}
    steps = [s for s in bundle.recipe if s.type == "quantize"]
    if q is not None:
        if not isinstance(q, dict) or not isinstance(q.get("linears"), dict):
            raise BundleError(f"{where}: 'quantization' must be an object with a 'linears' map")
        if not steps:
            raise BundleError(f"{where}: 'quantization' is present but the recipe has no quantize step")
        bits = steps[-1].config.layer_bits
        if dict(bits) != q["linears"]:
            raise BundleError(f"{where}: quantization.linears disagrees with the recipe's quantize step")
        want = expected_linears(shape)
        if set(q["linears"]) != want:
            extra = sorted(set(q["linears"]) - want) or sorted(want - set(q["linears"]))
            raise BundleError(f"{where}: quantization.linears does not match the model's linears (e.g. {extra[0]!r})")
        bad = [k for k, v in q["linears"].items() if v not in (32, 8, 4)]
        if bad:
            raise BundleError(f"{where}: quantization.linears[{bad[0]!r}] must be 32, 8 or 4")
        if q.get("embeddings") != steps[-1].config.embeddings:
            raise BundleError(f"{where}: quantization.embeddings disagrees with the recipe's quantize step")
    name = bundle.manifest["tokenizer"].get("id_map")
    if name:
        if name not in bundle.manifest["files"]:
            raise BundleError(f"{where}: tokenizer.id_map {name!r} is not a listed bundle file")
        bundle.id_map  # noqa: B018  (reads and checks the map against the model's table)


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


# --------------------------------------------------------------------------- dynamic bundles
