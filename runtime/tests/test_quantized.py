"""Quantized programs and trimmed vocabularies in the native runtime.

The bundles come from quant_programs (int8 / int4 linears on XNNPACK, per-row
int8 / int4 word embeddings through ExecuTorch's quantized kernels), built once
and cached under .cache/ (see native_testing.cached_bundle).
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from native_testing import MINILM_VOCAB, SENTENCES, write_bundle

pytestmark = pytest.mark.native

def test_programs_hold_quantized_weights(quant_bundles, tiny_bundle):
    """The word table runs through embedding_byte / embedding_4bit and the weights shrank accordingly."""
    from make_test_bundle import TinyConfig
    from quant_programs import op_counts

    fp32 = (tiny_bundle / "model.pte").stat().st_size
    ops = {n: op_counts((b / "model.pte").read_bytes()) for n, b in quant_bundles.items()}
    assert "aten::embedding.out" in op_counts((tiny_bundle / "model.pte").read_bytes())
    for name, want in (("int8", "quantized_decomposed::embedding_byte.out"),
                       ("int4", "quantized_decomposed::embedding_4bit.out"),
                       ("trimmed", "quantized_decomposed::embedding_4bit.out")):
        assert ops[name].get(want) == 2 and "aten::embedding.out" not in ops[name], ops[name]
    c = TinyConfig()
    vocab = sum(1 for _ in MINILM_VOCAB.open(encoding="utf-8"))
    layer = 3 * c.hidden * c.hidden + c.hidden * c.hidden + 2 * c.hidden * c.ffn
    fp32_weights = 4 * (vocab * c.hidden + c.layers * layer)  # word table + encoder linears
    # int8 keeps 1/4 of those bytes (+ scales), int4 1/8: at least 70% / 82% must be gone.
    saved = {n: (fp32 - (quant_bundles[n] / "model.pte").stat().st_size) / fp32_weights for n in ("int8", "int4")}
    assert saved["int8"] > 0.70 and saved["int4"] > 0.82 and saved["int4"] > saved["int8"], saved


@pytest.mark.parametrize("name", ["int8", "int4", "trimmed"])
def test_native_equals_executorch_python(name, quant_bundles, eval_texts):
    """Native tokenizer + C++ runtime vs Python tokenizer + ExecuTorch pybindings: same ids, same logits."""
    from edgenlp.run.executorch import ExecuTorchRunner
    from edgenlp.run.native import NativeRunner

    bundle = quant_bundles[name]
    et = ExecuTorchRunner(bundle)
    want_ids, want = et.token_ids(eval_texts), et.predict_logits(eval_texts)
    with NativeRunner(bundle, threads=1) as runner:
        got_ids, got = runner.token_ids(eval_texts), runner.predict_logits(eval_texts)
    assert got_ids == want_ids
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)
    assert (got.argmax(1) == want.argmax(1)).all()


def test_weight_cache_gives_the_same_logits(quant_bundles, tiny_bundle, eval_texts):
    """One shared packed copy of the weights (default) or one per method: identical results, every bucket used."""
    from edgenlp.run.native import NativeRunner

    for bundle in (tiny_bundle, quant_bundles["int8"]):
        runs = []
        for cache in (True, False):
            with NativeRunner(bundle, threads=1, load_all_methods=True, weight_cache=cache) as r:
                runs.append(r.predict_logits(eval_texts))
        np.testing.assert_array_equal(runs[0], runs[1])


# ------------------------------------------------------------------ trimmed vocabulary


@pytest.fixture(scope="session")
def trimmed_tok_bundle(tmp_path_factory, host_build, kept) -> object:
    return write_bundle(tmp_path_factory.mktemp("bundles") / "trimmed-tok", with_pte=False, max_seq_len=512,
                        vocab_map=kept)


def test_trimmed_ids_equal_python(trimmed_tok_bundle, hf_tokenizer, kept, train_texts, eval_texts):
    """Native ids on a trimmed bundle = Python ids remapped; unseen pieces -> [UNK]; training text never [UNK]s more."""
    from adversarial import ADVERSARIAL
    from edgenlp.bundle import Bundle
    from edgenlp.run.native import native_tokenize

    bundle = Bundle.open(trimmed_tok_bundle)
    train = train_texts[:50]
    texts = eval_texts + train + list(ADVERSARIAL)
    full = hf_tokenizer(texts, truncation=True, max_length=512)["input_ids"]
    want = [bundle.remap_ids(row) for row in full]
    got = native_tokenize(trimmed_tok_bundle, texts)
    assert got == want
    unk_new = kept.index(hf_tokenizer.unk_token_id)
    to_new = {o: n for n, o in enumerate(kept)}
    for f, g in zip(full, got):
        assert g == [to_new.get(i, unk_new) for i in f]
        assert max(g) < len(kept)
    # every piece of a training sentence is kept; some dev sentence loses some to [UNK]
    assert all(i in to_new for f in full[len(eval_texts):len(eval_texts) + len(train)] for i in f)
    assert any(unk_new in g and hf_tokenizer.unk_token_id not in f for f, g in zip(full, got))


@pytest.mark.parametrize("case, match", [
    ("dup", "twice"),
    ("range", "outside the vocabulary"),
    ("special", "special token"),
    ("type", "integer token ids"),
    ("unlisted", "not listed"),
])
def test_bad_vocab_map_is_a_bundle_error(case, match, trimmed_tok_bundle, tmp_path, kept):
    from edgenlp.run.native import NativeBundleError, native_tokenize

    b = tmp_path / "b"
    shutil.copytree(trimmed_tok_bundle, b)
    manifest = json.loads((b / "manifest.json").read_text())
    bad = {"dup": kept + [kept[-1]], "range": kept + [10**6], "special": kept[1:], "type": kept[:-1] + [1.5]}
    if case == "unlisted":
        del manifest["files"]["vocab_map.json"]
    else:
        (b / "vocab_map.json").write_text(json.dumps({"kept": bad[case]}))
        import hashlib

        manifest["files"]["vocab_map.json"] = hashlib.sha256((b / "vocab_map.json").read_bytes()).hexdigest()
    (b / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(NativeBundleError, match=match):
        native_tokenize(b, ["hello"])
