"""The Java binding (runtime/java): the archive's jar + libedgenlp_jni.so on the host JVM.

EdgeNlpSelfTest (plain Java, no framework) checks the API's contracts itself and prints
its classifications; here they are compared with the Python ExecuTorch runner on the
same bundle, and bad input (missing, corrupted, newer-format bundle) must give one
EdgeNlpException each. On the tiny dynamic bundle (tests/conftest.py's), classifyDynamic
must take the Python runner's exit and keep its tokens, per call setting. The same program
runs with the JNI layer under ASan + UBSan.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from native_testing import RUNTIME, SENTENCES, build
from test_native import CORRUPTIONS

pytestmark = pytest.mark.native

TEXTS = [*SENTENCES, "", "emoji 😀👍🏽 and 中文", "Ｆｕｌｌｗｉｄｔｈ ＡＢＣ", "word " * 200]
# (edgenlp_status name, CORRUPTIONS entry or None for a path that does not exist)
BAD = [("IO", None), ("CHECKSUM", "wrong_sha"), ("BUNDLE", "manifest_not_json"), ("MODEL", "corrupted_pte"),
       ("BUNDLE_FORMAT", "newer_format")]


# (name, exit threshold, keep ratio, static mode) per classifyDynamic call, -1 = the instance's (EdgeNlp.DEFAULT),
# and the same call of the Python runners: together they exit at every layer and re-bucket after pruning.
DYNAMIC_CASES = {
    "bundle": ((-1, -1, -1), {}),
    "keep": ((0.8, 0.5, -1), {"exit_threshold": 0.8, "keep": 0.5}),
    "deep-keep": ((1.0, 0.3, -1), {"exit_threshold": 1.0, "keep": 0.3}),
    "static": ((-1, -1, 1), {"static": True}),
}


def _java() -> str:
    for tool in ("java", "javac"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} missing: the Java binding needs a JDK (apt-get install default-jdk-headless)")
    return "java"


def _broken_bundles(tiny_bundle: Path, tmp: Path) -> list[str]:
    args = []
    for status, name in BAD:
        path = tmp / f"bad-{status.lower()}"
        if name is not None:
            shutil.copytree(tiny_bundle, path)
            CORRUPTIONS[name][0](path)
        args += ["--expect", status, str(path)]
    return args


def run_self_test(java: str, jar: Path, tests_jar: Path, libdir: Path, tiny_bundle: Path, tmp: Path, *,
                  env=None, prefix=(), dynamic: Path | None = None) -> subprocess.CompletedProcess:
    from edgenlp_testing import dynamic_texts

    (tmp / "texts.txt").write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    cmd = [*prefix, java, "-Xss4m", f"-Djava.library.path={libdir}", "-cp", f"{jar}{os.pathsep}{tests_jar}",
           "org.edgenlp.EdgeNlpSelfTest", str(tiny_bundle), str(tmp / "texts.txt"), *_broken_bundles(tiny_bundle, tmp)]
    if dynamic is not None:
        (tmp / "dynamic.txt").write_text("\n".join(dynamic_texts()) + "\n", encoding="utf-8")
        cmd += ["--dynamic", str(dynamic), str(tmp / "dynamic.txt")]
        for name, (call, _) in DYNAMIC_CASES.items():
            cmd += [name, *map(str, call)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)


def _lines(stdout: str) -> list[dict]:
    return [json.loads(line) for line in stdout.splitlines()]


def test_java_binding(host_sdk, host_build, tiny_bundle, dynamic_bundle, tmp_path):
    java = _java()
    jars = list((host_sdk / "share/java").glob("edgenlp-*.jar"))
    if not jars:
        pytest.skip("the SDK was built without the Java binding (no JDK at configure time)")
    proc = run_self_test(java, jars[0], host_build / "java/edgenlp-tests.jar", host_sdk / "lib", tiny_bundle, tmp_path,
                         dynamic=dynamic_bundle)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "FAIL" not in proc.stderr and "all checks passed" in proc.stderr
    assert "ok dynamic bundle: settings, static mode and errors" in proc.stderr
    out = _lines(proc.stdout)
    assert out[0] == {"tokens": [101, 7592, 1010, 2088, 999, 102]}
    preds = [o for o in out if "probabilities" in o and "case" not in o]
    errors = {o["error"]: o["message"] for o in out if "error" in o}

    # predictions equal the Python ExecuTorch runner's on the same bundle
    from edgenlp.run.base import get_runner

    with get_runner(tiny_bundle, runtime="executorch", threads=1) as runner:
        logits = runner.predict_logits(TEXTS)
    want = np.exp(logits - logits.max(1, keepdims=True))
    want /= want.sum(1, keepdims=True)
    got = np.array([p["probabilities"] for p in preds])
    assert got.shape == want.shape
    assert [p["index"] for p in preds] == list(want.argmax(1))
    np.testing.assert_allclose(got, want, atol=1e-5)

    # one clear error per bad input, naming what is wrong
    assert set(errors) == {s for s, _ in BAD}
    assert "cannot read" in errors["IO"] and "bad-io" in errors["IO"]
    assert "sha256" in errors["CHECKSUM"]
    assert "format_version 2 is newer" in errors["BUNDLE_FORMAT"]

    # classifyDynamic takes the Python ExecuTorch runner's exit and keeps its tokens, case by case
    from edgenlp_testing import dynamic_texts

    texts = dynamic_texts()
    cases = [o for o in out if "case" in o]
    assert len(cases) == len(DYNAMIC_CASES) * len(texts)
    layers = set()
    with get_runner(dynamic_bundle, runtime="executorch", threads=1) as runner:
        for name, (_, options) in DYNAMIC_CASES.items():
            want = runner.predict_details(texts, **options)
            got = [o for o in cases if o["case"] == name]
            for o, w in zip(got, want, strict=True):
                assert (o["exit_layer"], o["tokens_kept"]) == (w.exit_layer, list(w.tokens)), (name, texts[o["text"]])
                p = np.exp(w.logits - w.logits.max())
                np.testing.assert_allclose(o["probabilities"], p / p.sum(), atol=1e-5, err_msg=name)
            layers |= {o["exit_layer"] for o in got}
    assert layers == {1, 2, 3}, layers


@pytest.mark.slow  # an ASan build of the runtime and the JNI layer: minutes; CI runs the C unit tests under ASan
def test_java_binding_under_asan(host_sdk, tiny_bundle, tmp_path):
    """The same program with libedgenlp + the JNI layer built with ASan + UBSan, preloaded into the JVM."""
    java = _java()
    asan = build("--sanitize", "--target", "edgenlp_jni", "--target", "edgenlp_java_tests")
    if not (asan / "java/libedgenlp_jni.so").is_file():
        pytest.skip("the sanitizer build has no Java binding")
    libasan = subprocess.run(["g++", "-print-file-name=libasan.so"], capture_output=True, text=True).stdout.strip()
    env = dict(os.environ, LD_PRELOAD=libasan,
               # The JVM uses SIGSEGV itself and never frees some memory: let it, check everything else.
               ASAN_OPTIONS="handle_segv=0:allow_user_segv_handler=1:detect_leaks=0:abort_on_error=1",
               UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1")
    proc = run_self_test(java, next((asan / "java").glob("edgenlp-[0-9]*.jar")), asan / "java/edgenlp-tests.jar",
                         asan / "java", tiny_bundle, tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "Sanitizer" not in proc.stderr and "runtime error" not in proc.stderr
    assert "all checks passed" in proc.stderr


@pytest.mark.cross
def test_java_binding_under_qemu(host_build, tiny_bundle, tmp_path, tmp_path_factory):
    """The aarch64 archive's jar + JNI library on Debian's aarch64 JVM under qemu-aarch64 (Cortex-A76)."""
    from native_testing import unpack

    for tool in ("qemu-aarch64", "aarch64-linux-gnu-g++", "dpkg-deb", "apt-get"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} missing: needed to cross-build and to fetch the aarch64 JVM")
    if not (host_build / "java/edgenlp-tests.jar").is_file():
        pytest.skip("no JDK on the build host: the Java binding was not built")
    fetch = subprocess.run(["bash", str(RUNTIME / "java/fetch_jre.sh")], capture_output=True, text=True, timeout=600)
    if fetch.returncode != 0:
        pytest.skip(f"cannot fetch Debian's aarch64 JVM: {fetch.stderr.strip()[-300:]}")
    root = Path(fetch.stdout.strip().splitlines()[-1])
    sdk = unpack(build("--arch", "aarch64", "--package"), tmp_path_factory.mktemp("sdk-aarch64-java"))
    jar = next((sdk / "share/java").glob("edgenlp-*.jar"))
    prefix = ["qemu-aarch64", "-L", "/usr/aarch64-linux-gnu", "-cpu", "cortex-a76",
              "-E", f"LD_LIBRARY_PATH={root}/lib/aarch64-linux-gnu"]
    java = str(root / "usr/lib/jvm/java-17-openjdk-arm64/bin/java")
    proc = run_self_test(java, jar, host_build / "java/edgenlp-tests.jar", sdk / "lib", tiny_bundle, tmp_path,
                         prefix=(*prefix,))
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "all checks passed" in proc.stderr
    (tmp_path / "host").mkdir()
    host = run_self_test(_java(), host_build / f"java/{jar.name}", host_build / "java/edgenlp-tests.jar",
                         host_build / "java", tiny_bundle, tmp_path / "host")
    a = [o for o in _lines(proc.stdout) if "probabilities" in o]
    b = [o for o in _lines(host.stdout) if "probabilities" in o]
    assert [x["index"] for x in a] == [x["index"] for x in b]
    np.testing.assert_allclose([x["probabilities"] for x in a], [x["probabilities"] for x in b], atol=1e-4)
