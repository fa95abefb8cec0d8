"""The Python wheel (tools/build_wheel.sh): libedgenlp and edgenlp-run inside, found without a checkout."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from native_testing import REPO, SENTENCES

pytestmark = pytest.mark.native


def test_packaged_library_comes_before_the_checkout(tmp_path, monkeypatch):
    """$EDGENLP_NATIVE_LIB, then the wheel's edgenlp/_native/, then runtime/build/<arch>/."""
    from edgenlp.run import native

    monkeypatch.delenv("EDGENLP_NATIVE_LIB", raising=False)
    monkeypatch.setattr(native, "PACKAGED", tmp_path / "_native")
    checkout = native.REPO / "runtime" / "build" / native.host_arch() / "libedgenlp.so"
    assert native.library_path() == checkout
    assert native.runner_path() == checkout.with_name("edgenlp-run")
    (tmp_path / "_native/lib").mkdir(parents=True)
    (tmp_path / "_native/bin").mkdir()
    for name in ("libedgenlp.so.0.3.0", "libedgenlp.so.0"):
        (tmp_path / "_native/lib" / name).write_bytes(b"")
    (tmp_path / "_native/bin/edgenlp-run").write_bytes(b"")
    assert native.library_path() == tmp_path / "_native/lib/libedgenlp.so.0"
    assert native.runner_path() == tmp_path / "_native/bin/edgenlp-run"
    monkeypatch.setenv("EDGENLP_NATIVE_LIB", "/x/libedgenlp.so")
    assert native.library_path() == Path("/x/libedgenlp.so")


def test_targets_fall_back_to_the_packaged_copy(tmp_path, monkeypatch):
    from edgenlp.targets import target

    monkeypatch.delenv("EDGENLP_TARGETS_DIR", raising=False)
    assert target.targets_dir() == REPO / "targets"  # a checkout uses its own targets/


@pytest.fixture(scope="module")
def wheel() -> Path:
    if shutil.which("cmake") is None:
        pytest.skip("cmake missing: run `bash runtime/setup_deps.sh --host`")
    env = dict(os.environ, PYTHON=sys.executable)
    proc = subprocess.run(["bash", str(REPO / "tools/build_wheel.sh")], capture_output=True, text=True, env=env,
                          timeout=1200)
    if proc.returncode != 0 and "scikit-build-core" in proc.stderr and "No matching distribution" in proc.stderr:
        pytest.skip("scikit-build-core is not installable here")
    assert proc.returncode == 0, proc.stderr[-4000:]
    return Path(proc.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_wheel_contents(wheel):
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
    assert wheel.name.startswith("edgenlp-") and wheel.name.endswith(".whl")
    for name in ("edgenlp/_native/bin/edgenlp-run", "edgenlp/_native/lib/libexecutorch.so",
                 "edgenlp/_data/targets/pixel-7.toml", "edgenlp/cli.py", "edgenlp/run/native.py"):
        assert name in names, name
    assert any(n.startswith("edgenlp/_native/lib/libedgenlp.so.") for n in names)


@pytest.mark.slow
def test_wheel_in_a_fresh_virtualenv(wheel, tiny_bundle, tmp_path):
    """pip install the wheel into a new virtualenv, then eval --runtime native and edgenlp-run from there, no checkout."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    py = venv / "bin" / "python"
    # pip from this interpreter installs into the new environment; the pinned dependencies come from the
    # machine's pip configuration (local wheels for torch, the package index for the rest, pip's cache)
    # (without PYTHONPATH: what it makes importable would count as installed)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "EDGENLP_NATIVE_LIB", "EDGENLP_TARGETS_DIR")}
    proc = subprocess.run([sys.executable, "-m", "pip", "--python", str(py), "install", "-q", str(wheel)],
                          capture_output=True, text=True, timeout=3000, env=env)
    assert proc.returncode == 0, proc.stderr[-4000:]
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    out = tmp_path / "elsewhere"
    out.mkdir()
    probe = subprocess.run([str(py), "-c", "import edgenlp, edgenlp.run.native as n, edgenlp.targets.target as t; "
                            "print(edgenlp.__file__); print(n.library_path()); print(t.targets_dir())"],
                           capture_output=True, text=True, env=env, cwd=out, check=True).stdout.split()
    site = Path(probe[0]).parent
    assert str(REPO) not in probe[0] and Path(probe[1]).parent == site / "_native/lib"
    assert Path(probe[2]) == site / "_data/targets"
    data = out / "dev.tsv"
    data.write_text("text\tlabel\n" + "".join(f"{t.strip()}\t{i % 2}\n" for i, t in enumerate(SENTENCES)))
    results, probs = {}, {}
    for runtime in ("native", "executorch"):
        proc = subprocess.run([str(venv / "bin/edgenlp"), "eval", str(tiny_bundle), "--data", str(data), "--runtime",
                               runtime, "--json"], capture_output=True, text=True, env=env, cwd=out, timeout=600)
        assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
        results[runtime] = json.loads(proc.stdout)
        proc = subprocess.run([str(venv / "bin/edgenlp"), "run", str(tiny_bundle), *SENTENCES, "--runtime", runtime,
                               "--json"], capture_output=True, text=True, env=env, cwd=out, timeout=600)
        assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
        probs[runtime] = [[row["probs"][k] for k in sorted(row["probs"])] for row in json.loads(proc.stdout)]
    assert results["native"]["n"] == len(SENTENCES)
    assert results["native"]["accuracy"] == results["executorch"]["accuracy"]
    import numpy as np

    np.testing.assert_allclose(probs["native"], probs["executorch"], atol=1e-5)
    proc = subprocess.run([str(venv / "bin/edgenlp-run"), str(tiny_bundle), "--json", "a gripping, funny film"],
                          capture_output=True, text=True, env=env, cwd=out)
    assert proc.returncode == 0, proc.stderr
    assert set(json.loads(proc.stdout)["probabilities"]) == {"0", "1"}
