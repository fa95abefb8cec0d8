"""aarch64 cross build run under qemu-user on three CPU models."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from adversarial import ADVERSARIAL
from native_testing import build, hf_ids

pytestmark = pytest.mark.cross

CPUS = ["cortex-a53", "cortex-a76", "max"]


@pytest.fixture(scope="module")
def aarch64_build():
    for tool in ("aarch64-linux-gnu-g++", "qemu-aarch64"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} missing: run `bash runtime/setup_deps.sh`")
    return build("--arch", "aarch64")


def qemu(cpu: str, *args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(["qemu-aarch64", "-L", "/usr/aarch64-linux-gnu", "-cpu", cpu, *args],
                          capture_output=True, text=True, timeout=300, **kw)


@pytest.mark.parametrize("cpu", CPUS)
def test_example_and_unit_tests(cpu, aarch64_build, tiny_bundle, host_build):
    host = subprocess.run([str(host_build / "edgenlp-run"), str(tiny_bundle), "--json", "a gripping, funny film"],
                          capture_output=True, text=True, check=True)
    proc = qemu(cpu, str(aarch64_build / "edgenlp-run"), str(tiny_bundle), "--json", "a gripping, funny film")
    assert proc.returncode == 0, proc.stderr
    import json

    a, b = json.loads(host.stdout)["probabilities"], json.loads(proc.stdout)["probabilities"]
    assert all(abs(a[k] - b[k]) < 1e-4 for k in a)
    proc = qemu(cpu, str(aarch64_build / "classify"), str(tiny_bundle), "dull")
    assert proc.returncode == 0, proc.stderr
    proc = qemu(cpu, str(aarch64_build / "edgenlp_tests"), str(tiny_bundle))
    assert proc.returncode == 0 and " 0 failures" in proc.stdout, proc.stdout + proc.stderr


@pytest.mark.parametrize("cpu", CPUS)
def test_tokenizer_under_qemu(cpu, aarch64_build, tok_bundle, hf_tokenizer, tmp_path):
    texts = [t for t in ADVERSARIAL if "\n" not in t and "\r" not in t and "\x85" not in t]
    (tmp_path / "texts.txt").write_text("\n".join(texts) + "\n", encoding="utf-8")
    proc = qemu(cpu, str(aarch64_build / "edgenlp-run"), str(tok_bundle), "--tokenize", "--input",
                str(tmp_path / "texts.txt"))
    assert proc.returncode == 0, proc.stderr
    got = [[int(x) for x in line.split()] for line in proc.stdout.splitlines()]
    assert got == hf_ids(hf_tokenizer, texts, max_len=512)
