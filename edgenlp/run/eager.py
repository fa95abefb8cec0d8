"""Eager PyTorch on a model (named, a Hugging Face directory, or an in-memory model)."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

from edgenlp.models.tokenizer import build_tokenizer, pad_batch, token_ids
from edgenlp.run.base import Runner, check_texts


class EagerRunner(Runner):
    name = "eager"
    batch_size = 32

    def __init__(self, model, *, threads: int | None = None, info=None, max_seq_len: int = 128) -> None:
        import torch

        if threads:
            torch.set_num_threads(int(threads))
        if isinstance(model, (str, Path)):
            from edgenlp.bundle import Bundle

            if (Path(model) / "manifest.json").exists():
                bundle = Bundle.open(model)
                source = bundle.manifest.get("model", {}).get("source")
                from edgenlp.errors import BundleError

                if not source or not Path(source).is_dir():
                    raise BundleError(f"{model}: eager runtime needs the source model directory, not found: {source}")
                max_seq_len = bundle.max_seq_len
                model = source
            from edgenlp.models.registry import load_model

            model, info = load_model(model)
        self.model = model.eval()
        self.labels = model.labels
        self.max_seq_len = max_seq_len
        vocab = info.vocab_file if info else None
        if vocab is None:
            from edgenlp.models.registry import default_vocab_file

            vocab = default_vocab_file()
        self._tok = build_tokenizer(vocab, info.tokenizer if info else None)

    def predict_logits(self, texts: Sequence[str]) -> np.ndarray:
        import torch

        texts = check_texts(texts)
        all_ids = token_ids(self._tok, texts, max_len=self.max_seq_len)
        out = []
        with torch.no_grad():
            for i in range(0, len(all_ids), self.batch_size):
                ids, mask = pad_batch(all_ids[i : i + self.batch_size], pad_id=self._tok.pad_token_id or 0)
                out.append(self.model(torch.from_numpy(ids), torch.from_numpy(mask)).numpy())
        return np.concatenate(out).astype(np.float32)
