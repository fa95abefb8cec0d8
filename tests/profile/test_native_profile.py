"""`edgenlp profile --runtime native`: the C++ runtime's ETDump attributed like ExecuTorch's."""

import pytest

from edgenlp.profile.api import ProfileConfig, profile
from edgenlp.profile.components import COMPONENTS
from edgenlp.profile.native import text_of_length
from edgenlp.run.native import library_path

pytestmark = [
    pytest.mark.native,
    pytest.mark.skipif(not library_path().is_file(), reason="native runtime not built (bash runtime/build.sh)"),
]


def test_text_of_length_fills_the_bucket_exactly(tiny_bundle):
    from edgenlp.run.native import native_tokenize

    for n in (2, 8, 16):
        assert len(native_tokenize(tiny_bundle, [text_of_length(n)])[0]) == n


def test_native_profile_of_a_bundle_attributes_every_component(tiny_bundle):
    (doc,) = profile(tiny_bundle, ProfileConfig(seq_lens=(32,), runtimes=("native",), threads=(1,), runs=5, warmup=1))
    rows = {r["name"]: r for r in doc["components"]}
    assert set(rows) == set(COMPONENTS)
    for name in ("attn_qkv", "attn_core", "attn_out", "ffn"):
        assert rows[name]["latency_ms"]["native"] > 0, name
    assert "libedgenlp" in doc["methods"]["native"]


def test_native_profile_needs_a_bundle(tiny_model_dir):
    from edgenlp.errors import EdgeNLPError

    with pytest.raises(EdgeNLPError, match="native runtime profiles bundles"):
        profile(tiny_model_dir, ProfileConfig(seq_lens=(8,), runtimes=("native",), threads=(1,), runs=2, warmup=1))
