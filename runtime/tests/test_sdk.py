"""The installable SDK: the archive of build.sh --package, used by an app outside the tree.

An app's two ways in, each natively and cross-compiled for aarch64 (run under qemu):
a CMake project with find_package(edgenlp) and a plain `cc $(pkg-config ...)` build,
against the unpacked archive only.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from edgenlp.errors import ExitCode
from native_testing import RUNTIME, SENTENCES, build, unpack

pytestmark = pytest.mark.native

HEADER = (RUNTIME / "include" / "edgenlp.h").read_text()
VERSION = ".".join(re.search(rf"#define EDGENLP_VERSION_{p} (\d+)", HEADER).group(1)
                   for p in ("MAJOR", "MINOR", "PATCH"))
ET_LIBS = ["libexecutorch.so", "libexecutorch_threadpool.so", "libexecutorch_kernels_optimized.so",
           "libexecutorch_backend_xnnpack.so", "libexecutorch_etdump.so", "libexecutorch_kernels_quantized.so"]
TEXTS = ["a gripping, funny film", "unflinchingly bleak and desperate", SENTENCES[2], "word " * 40]
QEMU = ["qemu-aarch64", "-L", "/usr/aarch64-linux-gnu"]


def _require(*tools: str) -> None:
    for tool in tools:
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} missing: run `bash runtime/setup_deps.sh`")


@pytest.fixture(scope="module")
def aarch64_sdk(tmp_path_factory) -> Path:
    _require("aarch64-linux-gnu-gcc", "qemu-aarch64")
    return unpack(build("--arch", "aarch64", "--package"), tmp_path_factory.mktemp("sdk-aarch64"))


def _dynamic(path: Path, tag: str) -> list[str]:
    out = subprocess.run(["readelf", "-d", str(path)], capture_output=True, text=True, check=True).stdout
    return re.findall(rf"\({tag}\)\s+.*\[(.*)\]", out)


def _sections(path: Path) -> str:
    return subprocess.run(["readelf", "-S", "-W", str(path)], capture_output=True, text=True, check=True).stdout


@pytest.mark.parametrize("arch", ["x86_64", pytest.param("aarch64", marks=pytest.mark.cross)])
def test_archive_layout(arch, request):
    """Name, headers, libraries with RUNPATH $ORIGIN (stripped), the config files, example, README."""
    sdk = request.getfixturevalue("host_sdk" if arch == "x86_64" else "aarch64_sdk")
    assert sdk.name == f"edgenlp-runtime-{VERSION}-linux-{arch}"
    lib = sdk / "lib"
    for rel in ("include/edgenlp.h", "README.md", "lib/cmake/edgenlp/edgenlpConfig.cmake",
                "lib/cmake/edgenlp/edgenlpConfigVersion.cmake", "lib/pkgconfig/edgenlp.pc",
                "share/edgenlp/examples/classify.c", "share/edgenlp/examples/CMakeLists.txt", "bin/edgenlp-run"):
        assert (sdk / rel).is_file(), rel
    assert (sdk / "include/edgenlp.h").read_text() == HEADER
    assert os.readlink(lib / "libedgenlp.so") == f"libedgenlp.so.{VERSION.split('.')[0]}"
    elves = [lib / f"libedgenlp.so.{VERSION}", lib / "libedgenlp_ops.so", *(lib / n for n in ET_LIBS)]
    if (lib / "libedgenlp_jni.so").exists():
        elves.append(lib / "libedgenlp_jni.so")
    machine = {"x86_64": "X86-64", "aarch64": "AArch64"}[arch]
    for elf in elves:
        assert _dynamic(elf, "RUNPATH") == ["$ORIGIN"], elf.name
        assert ".symtab" not in _sections(elf), f"{elf.name} is not stripped"
        header = subprocess.run(["readelf", "-h", str(elf)], capture_output=True, text=True, check=True).stdout
        assert machine in header, elf.name
    assert _dynamic(sdk / "bin/edgenlp-run", "RUNPATH") == ["$ORIGIN/../lib"]
    # libedgenlp needs exactly what the archive ships (and the C/C++ runtime of the system)
    needed = set(_dynamic(lib / f"libedgenlp.so.{VERSION}", "NEEDED"))
    assert set(ET_LIBS) | {"libedgenlp_ops.so"} <= needed  # edgenlp's own ExecuTorch kernels (block-sparse linears)
    system = {"libstdc++.so.6", "libm.so.6", "libgcc_s.so.1", "libc.so.6", "ld-linux-x86-64.so.2", "ld-linux-aarch64.so.1"}
    assert needed - set(ET_LIBS) - {"libedgenlp_ops.so"} <= system, needed
    # relocatable: nothing refers to the build machine's paths
    for f in sdk.rglob("*"):
        if f.is_file() and not f.is_symlink():
            data = f.read_bytes()
            assert str(RUNTIME).encode() not in data and b"site-packages" not in data, f


def _classify_output(stdout: str) -> list[tuple[str, float]]:
    return [(line.split()[0], float(line.split()[1])) for line in stdout.splitlines()]


@pytest.fixture(scope="module")
def expected(tiny_bundle) -> list[tuple[str, float]]:
    """What classify should print: the in-tree native runtime's label and probability per text."""
    import numpy as np

    from edgenlp.run.native import NativeRunner

    with NativeRunner(tiny_bundle, threads=1) as runner:
        logits = runner.predict_logits(TEXTS)
    p = np.exp(logits - logits.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    return [(runner.labels[int(i)], float(row[i])) for row, i in zip(p, p.argmax(1))]


def _consumer(kind: str, sdk: Path, work: Path, *, cross: bool) -> Path:
    """Build classify.c from the SDK's own example directory, copied outside the tree."""
    src = work / "app"
    shutil.copytree(sdk / "share/edgenlp/examples", src)
    cc = "aarch64-linux-gnu-gcc" if cross else "cc"
    if kind == "cmake":
        _require("cmake")
        args = ["cmake", "-S", str(src), "-B", str(work / "build"), f"-DCMAKE_PREFIX_PATH={sdk}",
                f"-DCMAKE_C_COMPILER={cc}"]
        if cross:
            args += ["-DCMAKE_SYSTEM_NAME=Linux", "-DCMAKE_SYSTEM_PROCESSOR=aarch64"]
        for cmd in (args, ["cmake", "--build", str(work / "build")]):
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
            assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        return work / "build" / "classify"
    _require("pkg-config", cc)
    # PKG_CONFIG_LIBDIR, not _PATH: only the SDK's .pc, never the build host's (matters when cross-compiling)
    env = dict(os.environ, PKG_CONFIG_LIBDIR=str(sdk / "lib/pkgconfig"))
    flags = subprocess.run(["pkg-config", "--cflags", "--libs", "edgenlp"], capture_output=True, text=True,
                           env=env, check=True).stdout.split()
    libdir = subprocess.run(["pkg-config", "--variable=libdir", "edgenlp"], capture_output=True, text=True, env=env,
                            check=True).stdout.strip()
    assert subprocess.run(["pkg-config", "--modversion", "edgenlp"], capture_output=True, text=True, env=env,
                          check=True).stdout.strip() == VERSION
    out = work / "classify"
    proc = subprocess.run([cc, str(src / "classify.c"), *flags, f"-Wl,-rpath,{libdir}", "-o", str(out)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


def _run(exe: Path, *args: str, cross: bool) -> subprocess.CompletedProcess:
    cmd = [*QEMU, "-cpu", "cortex-a76", str(exe)] if cross else [str(exe)]
    return subprocess.run([*cmd, *args], capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("kind", ["cmake", "pkg-config"])
@pytest.mark.parametrize("arch", ["x86_64", pytest.param("aarch64", marks=pytest.mark.cross)])
def test_app_outside_the_tree(kind, arch, request, tiny_bundle, expected, tmp_path):
    """classify.c built against the unpacked archive only, run on a bundle; bad input gives one error."""
    cross = arch == "aarch64"
    sdk = request.getfixturevalue("host_sdk" if not cross else "aarch64_sdk")
    exe = _consumer(kind, sdk, tmp_path, cross=cross)
    assert _dynamic(exe, "NEEDED")[0] == f"libedgenlp.so.{VERSION.split('.')[0]}"
    proc = _run(exe, str(tiny_bundle), *TEXTS, cross=cross)
    assert proc.returncode == 0, proc.stderr
    got = _classify_output(proc.stdout)
    assert [g[0] for g in got] == [e[0] for e in expected]
    assert all(abs(g[1] - e[1]) <= 2e-4 for g, e in zip(got, expected)), (got, expected)
    # bad input: a missing bundle, a corrupted one: one error line each, exit 2
    broken = tmp_path / "broken"
    shutil.copytree(tiny_bundle, broken)
    (broken / "vocab.txt").write_text("[PAD]\n")
    for bundle, words in ((tmp_path / "missing", "cannot read"), (broken, "sha256")):
        proc = _run(exe, str(bundle), "x", cross=cross)
        assert proc.returncode == ExitCode.USER_ERROR and proc.stdout == "", proc.stderr
        assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("error:") and words in proc.stderr


def test_cmake_version_check(host_sdk, tmp_path):
    """find_package(edgenlp X.Y): same major accepted, another major refused."""
    _require("cmake")
    major, minor, _ = (int(x) for x in VERSION.split("."))
    for want, ok in ((f"{major}.0", True), (f"{major + 1}.0", False)):
        src = tmp_path / want
        src.mkdir()
        (src / "CMakeLists.txt").write_text(
            "cmake_minimum_required(VERSION 3.16)\nproject(v LANGUAGES C)\n"
            f"find_package(edgenlp {want} REQUIRED CONFIG)\n"
            'message(STATUS "edgenlp ${edgenlp_VERSION} abi ${edgenlp_ABI_VERSION}")\n')
        proc = subprocess.run(["cmake", "-S", str(src), "-B", str(src / "b"), f"-DCMAKE_PREFIX_PATH={host_sdk}"],
                              capture_output=True, text=True, timeout=120)
        assert (proc.returncode == 0) == ok, proc.stdout + proc.stderr
        if ok:
            abi = re.search(r"#define EDGENLP_ABI_VERSION (\d+)", HEADER).group(1)
            assert f"edgenlp {VERSION} abi {abi}" in proc.stdout


def test_packaged_runner(host_sdk, tiny_bundle):
    """bin/edgenlp-run from the archive finds its libraries through RUNPATH alone."""
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    proc = subprocess.run([str(host_sdk / "bin/edgenlp-run"), str(tiny_bundle), "--json", TEXTS[0]],
                          capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    assert set(json.loads(proc.stdout)["probabilities"]) == {"0", "1"}


def test_library_reports_its_versions(host_build):
    """edgenlp_version / edgenlp_abi_version / edgenlp_bundle_format_version of the built library = the header's."""
    import ctypes

    from edgenlp.bundle import FORMAT_VERSION
    from edgenlp.run import native

    lib = ctypes.CDLL(str(host_build / "libedgenlp.so"))
    major, minor, patch = (int(x) for x in VERSION.split("."))
    assert lib.edgenlp_version() == major * 10000 + minor * 100 + patch
    assert lib.edgenlp_abi_version() == int(re.search(r"#define EDGENLP_ABI_VERSION (\d+)", HEADER).group(1))
    assert lib.edgenlp_abi_version() >= native.ABI_VERSION
    assert lib.edgenlp_bundle_format_version() == FORMAT_VERSION


def test_newer_bundle_format_is_refused_clearly(tiny_bundle, tmp_path, host_build):
    """A bundle of a newer format: the native runtime, the C tool and the Python side each give one clear error."""
    from click.testing import CliRunner

    from edgenlp.cli import main
    from edgenlp.errors import BundleError
    from edgenlp.run.native import NativeRunner, Status

    b = tmp_path / "future"
    shutil.copytree(tiny_bundle, b)
    m = json.loads((b / "manifest.json").read_text())
    m["format_version"] = 2
    (b / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(BundleError) as info:
        NativeRunner(b)
    assert info.value.status == Status.ERR_BUNDLE_FORMAT
    msg = str(info.value)
    assert "format_version 2 is newer" in msg and f"({VERSION})" in msg and "format_version 1" in msg, msg
    proc = subprocess.run([str(host_build / "edgenlp-run"), str(b), "x"], capture_output=True, text=True)
    assert proc.returncode == ExitCode.USER_ERROR and proc.stderr.count("\n") == 1 and "newer" in proc.stderr
    r = CliRunner().invoke(main, ["run", str(b), "x", "--runtime", "native"])
    assert r.exit_code == ExitCode.USER_ERROR and "format_version" in r.output and "Traceback" not in r.output


def test_cmake_install_matches_the_archive(host_build, host_sdk, tmp_path):
    """`cmake --install` into a prefix writes what the archive holds (the archive adds README.md at its top)."""
    _require("cmake")
    proc = subprocess.run(["cmake", "--install", str(host_build), "--prefix", str(tmp_path / "prefix"), "--strip"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    installed = {p.relative_to(tmp_path / "prefix").as_posix() for p in (tmp_path / "prefix").rglob("*")
                 if not p.is_dir()}
    packaged = {p.relative_to(host_sdk).as_posix() for p in host_sdk.rglob("*") if not p.is_dir()}
    assert installed == packaged - {"README.md"}
    assert _dynamic(tmp_path / "prefix/lib/libexecutorch.so", "RUNPATH") == ["$ORIGIN"]
