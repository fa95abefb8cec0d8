"""Block-sparse kernels (runtime/kernels) against a plain loop: natively, and under qemu-aarch64.

The C++ tester sweeps odd M, N, K, sparsities 0-99% and the 1x4 / 1x8 / 4x1
blocks for fp32 and int8 on every ISA variant the CPU runs, with a tolerance
derived from the reduction length, and prints the kernel, tile and shape of
the first bad element. These tests also check that dispatch ran the variants
the CPU has (an ISA silently never selected would otherwise go untested).
runtime/kernels/tests/inject_defects.py shows the tester failing on one
injected defect per variant.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from native_testing import build

QEMU_CPUS = {  # CPU model -> the ISAs the tester must run there
    "cortex-a53": {"scalar", "neon"},
    "cortex-a76": {"scalar", "neon", "neondot"},
    "max": {"scalar", "neon", "neondot"},
}


def _ran(stdout: str) -> dict[str, tuple[int, int]]:
    """ISA -> (cases, failures) from the tester's summary lines."""
    return {m.group(1): (int(m.group(2)), int(m.group(3)))
            for m in re.finditer(r"^isa (\w+): (\d+) cases, (\d+) failures", stdout, re.M)}


def _host_isas() -> set[str]:
    flags: set[str] = set()
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("flags"):
            flags = set(line.split(":", 1)[1].split())
            break
    want = {"scalar"}
    if {"avx2", "fma"} <= flags:
        want.add("avx2")
        if "avx512f" in flags:
            want.add("avx512")
            if {"avx512bw", "avx512vl", "avx512_vnni"} <= flags:
                want.add("avx512vnni")
    return want


def _check(proc: subprocess.CompletedProcess, want: set[str]) -> None:
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    ran = _ran(proc.stdout)
    assert set(ran) == want, f"ran {sorted(ran)}, expected {sorted(want)}:\n{out[-2000:]}"
    for isa, (cases, failures) in ran.items():
        assert cases >= 500 and failures == 0, (isa, cases, failures)
    assert proc.stdout.rstrip().endswith("all passed")


@pytest.mark.native
@pytest.mark.skipif(Path("/proc/cpuinfo").is_file() is False, reason="needs /proc/cpuinfo to know the host's ISAs")
def test_kernels_native(host_build):
    tester = host_build / "kernels" / "sparse_linear_tester"
    assert tester.is_file(), f"{tester} not built"
    proc = subprocess.run([str(tester), "--quick"], capture_output=True, text=True, timeout=300)
    want = _host_isas() if host_build.name == "x86_64" else {"scalar"}
    _check(proc, want)
    for isa in ("avx512", "avx512vnni"):
        if isa not in want:  # built but not runnable here: the tester must say so, not pass silently
            assert f"isa {isa}: skipped (not supported by this CPU)" in proc.stdout


@pytest.mark.native
def test_avx512_kernels_emulated(host_build):
    """The AVX-512 / VNNI kernels' logic on any x86-64 CPU, their intrinsics emulated by SIMDe."""
    tester = host_build / "kernels" / "sparse_linear_tester_simde_avx512"
    if not tester.is_file():
        pytest.skip("libsimde-dev not installed (or not x86-64): the AVX-512 kernels run only on AVX-512 CPUs")
    proc = subprocess.run([str(tester), "--quick"], capture_output=True, text=True, timeout=300)
    _check(proc, {"scalar", "avx2", "avx512", "avx512vnni"})


@pytest.fixture(scope="module")
def aarch64_kernels():
    for tool in ("aarch64-linux-gnu-g++", "qemu-aarch64"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} missing: run `bash runtime/setup_deps.sh`")
    return build("--arch", "aarch64") / "kernels" / "sparse_linear_tester"


@pytest.mark.cross
@pytest.mark.parametrize("cpu", sorted(QEMU_CPUS))
def test_kernels_under_qemu(cpu, aarch64_kernels):
    proc = subprocess.run(["qemu-aarch64", "-L", "/usr/aarch64-linux-gnu", "-cpu", cpu, str(aarch64_kernels), "--quick"],
                          capture_output=True, text=True, timeout=600)
    _check(proc, QEMU_CPUS[cpu])
    if "neondot" not in QEMU_CPUS[cpu]:
        assert "isa neondot: skipped (not supported by this CPU)" in proc.stdout
