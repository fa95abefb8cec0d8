"""Export -> bundle -> run, checked the way ExecuTorch's backend tests check: graph, then numbers."""

import json
import shutil

import numpy as np
import pytest
import torch

from edgenlp_testing import tiny_model
from edgenlp.errors import BundleError, ParityError
from edgenlp.export.api import ExportConfig, export_bundle
from edgenlp.bundle import Bundle
from edgenlp.export.graph import example_inputs, prepare
from edgenlp.run.base import get_runner

SENTENCES = [
    "ok",
    "a gripping , funny film",
    "the plot is thin , the acting worse , and the ending drags on for what feels like an hour of nothing",
    "tedious",
]


def test_decomposed_layer_norm_matches():
    model, _ = tiny_model()
    ids, mask = example_inputs(20, batch=2, vocab_size=1000)
    with torch.no_grad():
        assert (prepare(model)(ids, mask) - model(ids, mask)).abs().max().item() < 1e-5


def test_whole_encoder_is_one_xnnpack_partition(tiny_bundle):
    """The manifest's delegation report comes from the lowered graph of every bucket method."""
    methods = Bundle.open(tiny_bundle).manifest["artifacts"]["pte"]["methods"]
    for m in methods:
        assert m["delegate_calls"] == 1, m
        # only the embedding gather and the mask's dtype conversion stay outside
        assert set(m["non_delegated_ops"]) <= {"aten.embedding.default", "dim_order_ops._to_dim_order_copy.default"}, m
        assert m["delegated_nodes"] > 20 * 2  # two layers of linears, bmm, softmax, norms
        assert set(m["why_not_delegated"]) == set(m["non_delegated_ops"])


def test_bundle_layout_and_manifest(tiny_bundle):
    b = Bundle.open(tiny_bundle)
    m = b.manifest
    assert set(m["files"]) == {"model.pte", "model.onnx", "vocab.txt", "labels.json"}
    assert json.loads((tiny_bundle / "labels.json").read_text()) == list(b.labels) == ["neg", "pos"]
    assert [x["seq_len"] for x in m["artifacts"]["pte"]["methods"]] == [8, 16, 32]
    assert m["inputs"][0] == {"name": "input_ids", "dtype": "int64", "shape": [1, "seq"]}
    assert m["tokenizer"]["vocab"] == "vocab.txt" and m["tokenizer"]["do_lower_case"] is True
    assert m["applied"][-1]["step"] == "export"
    assert b.recipe[-1].config.resolved_buckets == (8, 16, 32)
    for runtime in ("executorch", "onnx"):
        assert m["parity"][runtime]["passed"] and m["parity"][runtime]["max_abs_diff"] <= 1e-4


@pytest.mark.parametrize("runtime", ["executorch", "onnx"])
def test_runtime_matches_eager_alone_padded_and_batched(tiny_bundle, tiny_model_dir, runtime):
    """A sentence's logits are the same alone, padded into a bucket, or batched with longer ones."""
    eager = get_runner(tiny_model_dir, runtime="eager")
    alone_ref = np.stack([eager.predict_logits([s])[0] for s in SENTENCES])
    with get_runner(tiny_bundle, runtime=runtime) as r:
        batched = r.predict_logits(SENTENCES)
        alone = np.stack([r.predict_logits([s])[0] for s in SENTENCES])
    assert np.abs(batched - alone_ref).max() < 1e-4
    assert np.abs(alone - alone_ref).max() < 1e-4


@pytest.mark.parametrize("runtime", ["executorch", "onnx"])
def test_over_long_text_is_truncated_to_max_len(tiny_bundle, tiny_model_dir, runtime):
    """500 words give the logits of their first max_seq_len tokens, as eager PyTorch computes them."""
    max_len = Bundle.open(tiny_bundle).max_seq_len
    fits = "word " * (max_len - 2)  # [CLS] + words + [SEP] = max_len tokens
    from edgenlp.run.eager import EagerRunner

    with EagerRunner(tiny_model_dir, max_seq_len=max_len) as eager:
        want = eager.predict_logits([fits])
    with get_runner(tiny_bundle, runtime=runtime) as r:
        assert len(r.token_ids(["word " * 500])[0]) == max_len
        out = r.predict_logits(["word " * 500])
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4)


@pytest.fixture
def bundle_copy(tiny_bundle, tmp_path):
    dst = tmp_path / "b"
    shutil.copytree(tiny_bundle, dst)
    return dst


def test_tampered_file_fails_sha256(bundle_copy):
    with open(bundle_copy / "model.pte", "r+b") as f:
        f.seek(1000)
        f.write(b"\x00\x01\x02\x03")
    with pytest.raises(BundleError, match="sha256 mismatch"):
        Bundle.open(bundle_copy)


@pytest.mark.parametrize("name, runtime", [("model.pte", "executorch"), ("model.onnx", "onnx")])
def test_truncated_artifact_with_matching_manifest_fails_cleanly(bundle_copy, name, runtime):
    """Even with a re-signed manifest, a truncated program gives a BundleError, not a crash."""
    from edgenlp.bundle import finalize_manifest

    data = (bundle_copy / name).read_bytes()
    (bundle_copy / name).write_bytes(data[: len(data) // 3])
    manifest = json.loads((bundle_copy / "manifest.json").read_text())
    finalize_manifest(bundle_copy, manifest)
    with pytest.raises(BundleError, match="cannot load"):
        get_runner(bundle_copy, runtime=runtime).predict_logits(["hello"])


def test_missing_vocab_and_bad_manifest(bundle_copy):
    (bundle_copy / "vocab.txt").unlink()
    with pytest.raises(BundleError, match="missing file vocab.txt"):
        Bundle.open(bundle_copy)
    (bundle_copy / "manifest.json").write_text("{not json")
    with pytest.raises(BundleError, match="invalid JSON"):
        Bundle.open(bundle_copy)


def test_failed_parity_leaves_nothing(tmp_path):
    model, info = tiny_model()
    out = tmp_path / "never"
    with pytest.raises(ParityError, match="nothing written"):
        export_bundle(model, info, out, config=ExportConfig(formats=("onnx",), max_seq_len=16, parity_tolerance=1e-30))
    assert not out.exists()
    assert not [p for p in tmp_path.iterdir()], "temporary directory left behind"


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(formats=("tflite",)), "formats"),
        (dict(max_seq_len=1), "max_seq_len"),
        (dict(max_seq_len=64, buckets=(16, 32)), "end at max_seq_len"),
        (dict(parity_tolerance=0), "parity_tolerance"),
    ],
)
def test_export_config_validation(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ExportConfig(**kwargs)


@pytest.mark.minilm
def test_minilm_export_parity_on_real_dev_sentences(tmp_path):
    """Real weights, real SST-2 dev sentences: ExecuTorch and ONNX within 1e-4 of eager."""
    from edgenlp.data.tasks import default_data_dir, load_task
    from edgenlp.models.registry import load_model

    if not (default_data_dir() / "sst2" / "dev.tsv").is_file():
        pytest.skip(f"{default_data_dir() / 'sst2' / 'dev.tsv'} missing (the shared data)")
    data = load_task("sst2")
    model, info = load_model("minilm-l6", labels=data.labels)
    b = export_bundle(model, info, tmp_path / "minilm", task=data,
                      config=ExportConfig(max_seq_len=64, buckets=(64,), parity_samples=24))
    assert b.manifest["artifacts"]["pte"]["delegate_calls_per_method"] == 1
    for runtime in ("executorch", "onnx"):
        p = b.manifest["parity"][runtime]
        assert p["samples"] == 24 and p["max_abs_diff"] <= 1e-4 and p["argmax_agreement"] == 1.0
