"""aarch64 cross build run under qemu-user on three CPU models (one for the dynamic bundle)."""

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


# `max` with SME off: under qemu 7.2 the SME path XNNPACK picks for int8-weight linears
# (QC8W) returns different logits (|Δ| ≈ 1 on the tiny model) than x86-64, cortex-a53
# and cortex-a76, which agree to the last printed digit; with sme=off, `max` (SVE2, i8mm,
# dotprod) agrees too. fp32 and int4 linears agree with SME on.
# CI runs the two ends (no dotprod; SVE2 + i8mm + dotprod); cortex-a76 (dotprod only) runs with -m slow.
QUANT_CPUS = ["cortex-a53", pytest.param("cortex-a76", marks=pytest.mark.slow), "max,sme=off"]


def assert_same_probabilities(cpu, aarch64_build, host_build, bundle, texts_file, n_texts, *, host_env=None) -> None:
    """``edgenlp-run --json`` on every line of ``texts_file``: aarch64 under qemu gives x86-64's probabilities (1e-4)."""
    import json

    args = [str(bundle), "--json", "--input", str(texts_file)]
    host = subprocess.run([str(host_build / "edgenlp-run"), *args], capture_output=True, text=True, check=True,
                          env=host_env)
    proc = qemu(cpu, str(aarch64_build / "edgenlp-run"), *args)
    assert proc.returncode == 0, proc.stderr
    want = [json.loads(line)["probabilities"] for line in host.stdout.splitlines()]
    got = [json.loads(line)["probabilities"] for line in proc.stdout.splitlines()]
    assert len(got) == n_texts
    for a, b in zip(want, got):
        assert all(abs(a[k] - b[k]) < 1e-4 for k in a), (str(bundle), a, b)


@pytest.mark.parametrize("cpu", QUANT_CPUS)
def test_quantized_bundles_under_qemu(cpu, aarch64_build, quant_bundles, host_build, tmp_path):
    """int8 / int4 linears and embeddings, trimmed vocabulary: aarch64 probabilities equal x86-64's."""
    texts = ["a gripping, funny film", "unflinchingly bleak and desperate", "word " * 40]
    (tmp_path / "texts.txt").write_text("\n".join(texts) + "\n", encoding="utf-8")
    for name, bundle in quant_bundles.items():
        assert_same_probabilities(cpu, aarch64_build, host_build, bundle, tmp_path / "texts.txt", len(texts))
        tok = qemu(cpu, str(aarch64_build / "edgenlp-run"), str(bundle), "--tokenize", "--input", str(tmp_path / "texts.txt"))
        host_tok = subprocess.run([str(host_build / "edgenlp-run"), str(bundle), "--tokenize", "--input",
                                   str(tmp_path / "texts.txt")], capture_output=True, text=True, check=True)
        assert tok.returncode == 0 and tok.stdout == host_tok.stdout, (name, tok.stderr)


def test_dynamic_bundle_under_qemu(aarch64_build, host_build, dynamic_bundle, tmp_path):
    """Early exits and token pruning on aarch64: the same exit layers and tokens per layer as x86-64, and the
    same probabilities within the export tolerance."""
    import json

    from edgenlp_testing import dynamic_texts

    texts = dynamic_texts()
    (tmp_path / "texts.txt").write_text("\n".join(texts) + "\n", encoding="utf-8")
    for options in (["--exit-threshold", "0.8", "--keep", "0.5"], ["--exit-threshold", "0.7"]):
        args = [str(dynamic_bundle), "--json", "--input", str(tmp_path / "texts.txt"), *options]
        host = subprocess.run([str(host_build / "edgenlp-run"), *args], capture_output=True, text=True, check=True)
        proc = qemu("cortex-a76", str(aarch64_build / "edgenlp-run"), *args)
        assert proc.returncode == 0, proc.stderr
        want = [json.loads(line) for line in host.stdout.splitlines()]
        got = [json.loads(line) for line in proc.stdout.splitlines()]
        assert len(got) == len(texts) and len({r["exit_layer"] for r in want}) >= 2
        assert [(r["exit_layer"], r["tokens_kept"]) for r in got] == [(r["exit_layer"], r["tokens_kept"]) for r in want]
        for a, b in zip(want, got):
            assert all(abs(a["probabilities"][k] - b["probabilities"][k]) < 1e-4 for k in a["probabilities"]), (a, b)


@pytest.fixture(scope="module")
def sparse_bundles(tmp_path_factory):
    from edgenlp_testing import session_sparse_bundles

    return session_sparse_bundles(tmp_path_factory)


@pytest.mark.parametrize("cpu", ["cortex-a53", "max,sme=off"])
def test_sparse_ops_under_qemu(cpu, aarch64_build, host_build, sparse_bundles, tmp_path):
    """edgenlp's block-sparse ops (NEON; NEON dot product on `max`) give x86-64's probabilities.

    The host runs the scalar kernels (EDGENLP_SPARSE_ISA=scalar): like NEON they quantize int8
    activations to 8 bits (AVX2 to 7), so the integer sums agree exactly.
    """
    import os

    texts = ["a gripping, funny film", "unflinchingly bleak and desperate", "word " * 20]
    (tmp_path / "texts.txt").write_text("\n".join(texts) + "\n", encoding="utf-8")
    for bundle in sparse_bundles.values():
        assert_same_probabilities(cpu, aarch64_build, host_build, bundle, tmp_path / "texts.txt", len(texts),
                                  host_env={**os.environ, "EDGENLP_SPARSE_ISA": "scalar"})
