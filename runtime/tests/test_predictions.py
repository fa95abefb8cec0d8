"""The C example's predictions equal the ExecuTorch Python runtime's (tools/check_native_predictions.py).

Natively on the first SST-2 dev sentences and under qemu-aarch64 on a few of
them. Uses the tiny random bundle (agreement is what counts, not accuracy),
or the bundle in $EDGENLP_PREDICTION_BUNDLE (e.g. a fine-tuned MiniLM).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
from pathlib import Path

import pytest

from native_testing import DATA, REPO, build

pytestmark = [pytest.mark.native, pytest.mark.slow]


def _tool():
    spec = importlib.util.spec_from_file_location("check_native_predictions",
                                                  REPO / "tools" / "check_native_predictions.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def sst2_dev():
    from edgenlp.data.tasks import read_tsv

    path = DATA / "sst2" / "dev.tsv"
    if not path.is_file():
        pytest.skip(f"{path} missing")
    return read_tsv(path).head(48)


@pytest.fixture(scope="module")
def bundle(tiny_bundle):
    env = os.environ.get("EDGENLP_PREDICTION_BUNDLE")
    return Path(env) if env else tiny_bundle


def test_native_predictions_equal_executorch(bundle, sst2_dev, host_build):
    r = _tool().check(bundle, list(sst2_dev.texts), list(sst2_dev.labels), build=host_build.parent, qemu_cpu=None,
                      qemu_limit=0, seed=0, jobs=1)
    (run,) = r["runs"]
    assert run["n"] == len(sst2_dev) and run["disagree"] == 0, run["disagreements"]
    assert run["max_abs_prob_diff"] < 2e-4
    assert run["accuracy_native"] == r["executorch_python"]["accuracy"]


@pytest.mark.cross
def test_aarch64_predictions_equal_executorch(bundle, sst2_dev, host_build):
    for tool in ("aarch64-linux-gnu-g++", "qemu-aarch64"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} missing: run `bash runtime/setup_deps.sh`")
    aarch64 = build("--arch", "aarch64")
    r = _tool().check(bundle, list(sst2_dev.texts), list(sst2_dev.labels), build=aarch64.parent,
                      qemu_cpu="cortex-a76", qemu_limit=6, seed=0, jobs=2, skip_native=True)
    (run,) = r["runs"]
    assert run["n"] == 6 and run["disagree"] == 0, run["disagreements"]
    assert run["max_abs_prob_diff"] < 2e-4
