"""The C++ unit tests, the CLI and broken bundles under AddressSanitizer + UBSan.

CI runs the unit tests, the CLI on hostile texts and a handful of broken
bundles (the build goes to runtime/build-asan/, ~45 s once, then incremental);
``-m slow`` adds every other corruption of test_native.CORRUPTIONS.
"""

from __future__ import annotations

import os
from pathlib import Path
import shutil
import subprocess

import pytest

from edgenlp.errors import ExitCode
from native_testing import build
from test_native import CORRUPTIONS

pytestmark = pytest.mark.native

# One of each failure path: checksum, manifest parsing, ExecuTorch rejecting the program, path validation.
IN_CI = ("wrong_sha", "manifest_not_json", "corrupted_pte", "truncated_pte", "path_escape")


@pytest.fixture(scope="module")
def asan_build():
    return build("--sanitize", "--target", "edgenlp_tests", "--target", "edgenlp-run")  # not the kernel testers


ENV = dict(os.environ, ASAN_OPTIONS="detect_leaks=1:abort_on_error=1", UBSAN_OPTIONS="halt_on_error=1")


def test_unit_tests_and_cli_under_asan(asan_build, tiny_bundle):
    proc = subprocess.run([str(asan_build / "edgenlp_tests"), str(tiny_bundle)], capture_output=True, text=True,
                          env=ENV)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    for args in (["--threads", "2", "a héllo wörld 中文 😀", "", "x" * 100_000, "long text " * 10_000],
                 ["--bench", "3", "--seq-len", "128"], ["--tokenize", "İstanbul straße ＡＢＣ"]):
        proc = subprocess.run([str(asan_build / "edgenlp-run"), str(tiny_bundle), *args], capture_output=True,
                              text=True, env=ENV)
        assert proc.returncode == 0, proc.stderr[-3000:]


@pytest.mark.parametrize("name", [n if n in IN_CI else pytest.param(n, marks=pytest.mark.slow) for n in CORRUPTIONS])
def test_broken_bundles_under_asan(name, asan_build, tiny_bundle, tmp_path):
    corrupt, _ = CORRUPTIONS[name]
    b = tmp_path / name
    shutil.copytree(tiny_bundle, b)
    corrupt(b)
    proc = subprocess.run([str(asan_build / "edgenlp-run"), str(b), "x"], capture_output=True, text=True, env=ENV)
    assert proc.returncode in (ExitCode.FAILURE, ExitCode.USER_ERROR), proc.stderr[-3000:]
    assert "Sanitizer" not in proc.stderr


def _corrupt_row_start(bundle: Path) -> None:
    """Point the last ``row_start`` entry of layers.0.ffn_in's packed weights past its blocks, in model.pte itself."""
    import json

    import numpy as np

    from edgenlp.bundle import MANIFEST, finalize_manifest
    from edgenlp.prune.sparsity import block_masks
    from edgenlp.sparse.ops import pack_f32
    from edgenlp_testing import SPARSE_LINEARS, tiny_model

    # the model session_sparse_bundles exported (deterministic): its packed row_start, as the program stores it
    model, _ = tiny_model(labels=tuple(json.loads((bundle / "labels.json").read_text())), num_layers=1)
    mask = block_masks(model, 0.8, "1x4", SPARSE_LINEARS)["layers.0.ffn_in"]
    w = (model.layers[0].ffn_in.weight.detach() * mask).numpy()
    row_start = pack_f32(w, None, "1x4").row_start
    data = (bundle / "model.pte").read_bytes()
    needle = row_start.astype("<i4").tobytes()
    assert data.count(needle) == 1, "the packed row_start is not stored verbatim once"
    bad = row_start.copy()
    bad[-1] += 1
    (bundle / "model.pte").write_bytes(data.replace(needle, bad.astype("<i4").tobytes()))
    manifest = json.loads((bundle / MANIFEST).read_text())
    finalize_manifest(bundle, manifest)
    assert np.frombuffer(bad.tobytes(), "<i4")[-1] == row_start[-1] + 1


def test_a_malformed_sparse_header_is_one_error_under_asan(asan_build, host_build, tmp_path_factory, tmp_path):
    """A sparse bundle whose packed header lies: the op refuses it, the run fails cleanly, ASan sees no bad access."""
    from edgenlp_testing import session_sparse_bundles

    b = tmp_path / "sparse-bad"
    shutil.copytree(session_sparse_bundles(tmp_path_factory)["fp32"], b)
    _corrupt_row_start(b)
    for exe in (asan_build / "edgenlp-run", host_build / "edgenlp-run"):
        proc = subprocess.run([str(exe), str(b), "a gripping film"], capture_output=True, text=True, env=ENV)
        assert proc.returncode in (ExitCode.FAILURE, ExitCode.USER_ERROR), (exe, proc.stdout, proc.stderr[-3000:])
        # 0x12: InvalidArgument, what the op's header check sets (the program itself loads: only the op reads row_start)
        assert "Sanitizer" not in proc.stderr and "0x12" in proc.stderr, proc.stderr[-3000:]
