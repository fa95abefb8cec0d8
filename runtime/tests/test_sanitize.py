"""The C++ unit tests, the CLI and broken bundles under AddressSanitizer + UBSan.

CI runs the unit tests, the CLI on hostile texts and a handful of broken
bundles (the build goes to runtime/build-asan/, ~45 s once, then incremental);
``-m slow`` adds every other corruption of test_native.CORRUPTIONS.
"""

from __future__ import annotations

import os
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
