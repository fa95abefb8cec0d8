"""Shared fixtures: tiny models and bundles built once per session."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
if os.environ.get("PYTEST_XDIST_WORKER"):
    # The workers already use every core: lowering helpers would only add their start-up (tests of the
    # helpers pass processes= explicitly).
    os.environ.setdefault("EDGENLP_LOWER_PROCESSES", "1")

from edgenlp_testing import (DYN_BUCKETS, _once, export_tiny, session_dyn_task_dir, session_sparse_bundles, session_tiny_dynamic_bundle,
                             session_tiny_dynamic_dir, session_tiny_ft_dir, tiny_model, write_task_dir)


RUNTIME_TESTS = Path(__file__).resolve().parents[1] / "runtime" / "tests"


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own hook, which reads the groups into the node ids
def pytest_collection_modifyitems(config, items):
    """Under pytest-xdist (``--dist loadgroup``), the tests that build or run the native runtime share one worker.

    They build runtime/build/<arch> (and the cross, sanitizer and wheel builds) and fill
    .cache/native-test-bundles: one process at a time keeps those trees whole, while the rest of
    the suite runs on the other workers. The tests on a local Ray instance share one worker too, so that
    the session starts one instance, not one per worker.
    """
    for item in items:
        path = Path(str(item.path)).resolve()
        if (path.is_relative_to(RUNTIME_TESTS) or item.get_closest_marker("native") or item.get_closest_marker("cross")):
            item.add_marker(pytest.mark.xdist_group("native"))
        elif "ray_instance" in getattr(item, "fixturenames", ()) or "[ray]" in item.nodeid:
            item.add_marker(pytest.mark.xdist_group("ray"))
    # runtime/tests first: their builds and bundles need nothing the other processes build, so the native
    # process starts working at once instead of waiting for a session bundle (tiny, dynamic) another one is making.
    items.sort(key=lambda item: not Path(str(item.path)).resolve().is_relative_to(RUNTIME_TESTS))


@pytest.fixture(scope="session", autouse=True)
def lowering_cache(tmp_path_factory) -> Path:
    """One lowering cache (edgenlp.export.lowering.LoweringCache) for every test process of the session.

    Tests export the same tiny programs many times (a static bundle and a
    dynamic bundle's static methods, a fixture's bundle re-exported through
    the CLI): each program is lowered once. Tests of lowering itself turn it off.
    """
    from edgenlp.export.lowering import ENV_CACHE

    base = tmp_path_factory.getbasetemp()
    root = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "lowering-cache"
    os.environ.setdefault(ENV_CACHE, str(root))
    return Path(os.environ[ENV_CACHE])


@pytest.fixture(scope="session")
def tiny_task_dir(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("task")
    rows_train = [
        ("a gripping , funny film", "pos"),
        ("dull and lifeless", "neg"),
        ('she said "wow" and\nmeant it', "pos"),
        ("the worst film of the year", "neg"),
    ]
    rows_dev = [("a joy to watch", "pos"), ("tedious", "neg"), ("not good , not bad", "neg")]
    return write_task_dir(d, train=rows_train, dev=rows_dev)


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    from edgenlp.models.registry import save_pretrained

    model, info = tiny_model()
    return save_pretrained(model, info, tmp_path_factory.mktemp("models") / "tiny")


@pytest.fixture(scope="session")
def tiny_bundle(tmp_path_factory, tiny_model_dir, tiny_task_dir) -> Path:
    """The tiny model exported for the tiny task (both formats, buckets 8/16/32), built once for all test processes."""
    return _once(tmp_path_factory, "tiny", lambda: export_tiny(tmp_path_factory, tiny_model_dir, tiny_task_dir, "tiny"))


# --------------------------------------------------------------------------- dynamic models and bundles


# Built once per session through edgenlp_testing, so that runtime/tests (the qemu cross tests) get the same ones.
@pytest.fixture(scope="session")
def dyn_task_dir(tmp_path_factory) -> Path:
    return session_dyn_task_dir(tmp_path_factory)


@pytest.fixture(scope="session")
def tiny_ft_dir(tmp_path_factory) -> Path:
    """A tiny uneven model directory whose recipe has a finetune step."""
    return session_tiny_ft_dir(tmp_path_factory)


@pytest.fixture(scope="session")
def tiny_dynamic_dir(tmp_path_factory, tiny_ft_dir, dyn_task_dir) -> Path:
    """``make_dynamic`` on the tiny model: exits after every layer, learned token thresholds (seconds)."""
    return session_tiny_dynamic_dir(tmp_path_factory)


@pytest.fixture(scope="session")
def tiny_dynamic_bundle(tmp_path_factory, tiny_dynamic_dir, dyn_task_dir) -> Path:
    """The dynamic model exported as a model directory is (through its recipe): segments in both formats."""
    return session_tiny_dynamic_bundle(tmp_path_factory)


@pytest.fixture(scope="session")
def tiny_static_bundle(tmp_path_factory, tiny_ft_dir, dyn_task_dir) -> Path:
    """The same base model exported as a plain static bundle."""
    return _once(tmp_path_factory, "tiny-static", lambda: export_tiny(tmp_path_factory, tiny_ft_dir, dyn_task_dir, "tiny-static",
                                                                      DYN_BUCKETS))


@pytest.fixture(scope="session")
def sparse_bundles(tmp_path_factory) -> dict[str, Path]:
    """fp32 and int8 bundles of a 1-layer model whose query and FFN linears run edgenlp's sparse ops."""
    return session_sparse_bundles(tmp_path_factory)


@pytest.fixture
def fake_calibrate(monkeypatch):
    """``calibrate()`` replaced by a synthetic table of the grid it was asked for; records each call.

    ``compress --target host`` calibrates an uncalibrated machine first (a real grid of
    ExecuTorch programs: minutes); tests of the pipeline's other stages use this table instead.
    """
    from costmodel_testing import synthetic_observations

    from edgenlp.targets import calibrate as cal
    from edgenlp.targets.costmodel import CostTable

    calls: list[dict] = []

    def fake(**kw):
        calls.append(kw)
        for i, (_, prec) in enumerate(kw["runtime_precisions"]):
            kw["on_step"](i, len(kw["runtime_precisions"]), f"fake {prec}")
        precs = tuple(p for _, p in kw["runtime_precisions"])
        return CostTable(synthetic_observations(precisions=precs, threads=kw["threads"]), {"cpu": "this one"}, "host",
                         {"measured": [f"executorch/{p}" for p in precs], "grid": kw["grid"], "fp32_gemm_gflops": 33.0})

    monkeypatch.setattr(cal, "calibrate", fake)
    return calls
