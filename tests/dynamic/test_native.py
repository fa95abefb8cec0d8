"""The native runtime on dynamic bundles: libedgenlp's segment loop against the Python ExecuTorch runner.

Same tiny dynamic bundle as test_dynamic.py (3 layers, an exit after each, learned token
thresholds, buckets 8/32). The native runtime must take the same decisions (exit layer,
tokens per layer) and return the same logits, through the C API, ``edgenlp-run``, the C example
and ``edgenlp run/eval --runtime native``.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from edgenlp.errors import EdgeNLPError, ExitCode
from edgenlp.run.base import get_runner
from edgenlp_testing import dynamic_texts

pytestmark = pytest.mark.native

TOL = 1e-4  # the fp32 export tolerance
TEXTS = dynamic_texts()

# name -> per-call options; together they exit at every layer and re-bucket after pruning
CASES = {
    "bundle": {},                                     # the bundle's own threshold and ltp thresholds
    "ltp": {"exit_threshold": 0.9},
    "keep": {"exit_threshold": 0.8, "keep": 0.5},
    "deep-keep": {"exit_threshold": 1.0, "keep": 0.3},  # every sentence to the last layer, pruned twice
    "no-exit": {"exit_threshold": 1.0},
    "static": {"static": True},
}


@pytest.fixture(scope="module")
def native_lib():
    """The host build of libedgenlp (incremental; what runtime/tests' host_build makes)."""
    from native_testing import build

    return build()


@pytest.fixture(scope="module")
def runners(native_lib, tiny_dynamic_bundle):
    native = get_runner(tiny_dynamic_bundle, runtime="native", threads=1)
    et = get_runner(tiny_dynamic_bundle, runtime="executorch", threads=1)
    yield native, et
    native.close()
    et.close()


def _same(native, want, *, what):
    assert len(native) == len(want)
    for i, (a, b) in enumerate(zip(native, want)):
        assert (a.exit_layer, list(a.tokens)) == (b.exit_layer, list(b.tokens)), (what, i, TEXTS[i])
        np.testing.assert_allclose(a.logits, b.logits, atol=TOL, err_msg=f"{what}: {TEXTS[i]}")


def test_native_runs_segments_like_the_python_executorch_runner(runners):
    native, et = runners
    assert type(native).__name__ == "NativeDynamicRunner"
    layers, rebucketed = set(), 0
    for name, options in CASES.items():
        got, want = native.predict_details(TEXTS, **options), et.predict_details(TEXTS, **options)
        _same(got, want, what=name)
        layers |= {p.exit_layer for p in got}
        rebucketed += sum(any(a > 8 >= b for a, b in zip(p.tokens, p.tokens[1:])) for p in got)  # 32 -> 8
    assert layers == {1, 2, 3} and rebucketed >= 5, (layers, rebucketed)


def _with_rule(bundle: Path, dst: Path, rule: str, threshold) -> Path:
    """``bundle`` with another exit rule in its manifest (the files hard-linked; the manifest is not hashed)."""
    dst.mkdir()
    for f in bundle.iterdir():
        if f.name != "manifest.json":
            os.link(f, dst / f.name)
    m = json.loads((bundle / "manifest.json").read_text())
    d = m["dynamic"]
    d["spec"].update(rule=rule, threshold=threshold)
    d["rule"].update(name=rule, threshold=threshold, range=[1, 3] if rule == "patience" else [0.0, 1.0])
    (dst / "manifest.json").write_text(json.dumps(m))
    return dst


@pytest.mark.parametrize("rule, threshold", [("entropy", 0.85), ("patience", 2)])
def test_entropy_and_patience_rules(native_lib, tiny_dynamic_bundle, tmp_path, rule, threshold):
    b = _with_rule(tiny_dynamic_bundle, tmp_path / rule, rule, threshold)
    with get_runner(b, runtime="native", threads=1) as native, get_runner(b, runtime="executorch") as et:
        for options in ({}, {"keep": 0.5}):
            got = native.predict_details(TEXTS, **options)
            _same(got, et.predict_details(TEXTS, **options), what=f"{rule} {options}")
        assert len({p.exit_layer for p in got}) >= 2


def test_static_mode_is_the_static_methods(runners, tiny_dynamic_bundle, tiny_static_bundle):
    from edgenlp.run.native import NativeRunner

    native, _ = runners
    with NativeRunner(tiny_static_bundle, threads=1) as plain:
        want = plain.predict_logits(TEXTS)
    with NativeRunner(tiny_dynamic_bundle, threads=1) as old_calls:  # edgenlp_logits_batch: static, as before
        np.testing.assert_array_equal(old_calls.predict_logits(TEXTS), want)
    lengths = [len(x) for x in native.token_ids(TEXTS)]
    for p, n, w in zip(native.predict_details(TEXTS, static=True), lengths, want):
        assert p.exit_layer == 3 and p.tokens == [n] * 3
        np.testing.assert_array_equal(p.logits, w)
    with get_runner(tiny_dynamic_bundle, runtime="native", static=True) as static:  # the handle's setting
        np.testing.assert_array_equal(static.predict_logits(TEXTS), want)
        assert {p.exit_layer for p in static.predict_details(TEXTS, static=False, exit_threshold=0.0)} == {1}


def test_a_threshold_that_always_exits_stops_at_the_first_exit(runners):
    native, et = runners
    got = native.predict_details(TEXTS, exit_threshold=0.0, keep=0.4)
    assert all(p.exit_layer == 1 and len(p.tokens) == 1 for p in got)
    _same(got, et.predict_details(TEXTS, exit_threshold=0.0, keep=0.4), what="threshold 0")


def test_keep_ratio_one_is_no_pruning(runners):
    native, et = runners
    lengths = [len(x) for x in native.token_ids(TEXTS)]
    got = native.predict_details(TEXTS, exit_threshold=0.7, keep=1.0)
    assert all(p.tokens == [n] * p.exit_layer for p, n in zip(got, lengths))
    assert len({p.exit_layer for p in got}) >= 2
    _same(got, et.predict_details(TEXTS, exit_threshold=0.7, keep=1.0), what="keep 1")


def test_bad_options_give_clean_errors(native_lib, tiny_dynamic_bundle, tiny_static_bundle):
    from edgenlp.run.native import NativeError, NativeHandle, Status

    dyn = NativeHandle(tiny_dynamic_bundle)
    static = NativeHandle(tiny_static_bundle)
    try:
        assert dyn.num_layers == 3 and static.num_layers == 0
        cases = [
            (lambda: dyn.set_exit_threshold(1.5), Status.ERR_INVALID_ARGUMENT, "must be in [0, 1], got 1.5"),
            (lambda: dyn.set_exit_threshold(math.nan), Status.ERR_INVALID_ARGUMENT, "must be a number"),
            (lambda: dyn.logits_dynamic("x", exit_threshold=-0.5), Status.ERR_INVALID_ARGUMENT, "got -0.5"),
            (lambda: dyn.set_keep_ratio(0.0), Status.ERR_INVALID_ARGUMENT, "keep ratio must be in (0, 1]"),
            (lambda: dyn.logits_dynamic("x", keep=1.5), Status.ERR_INVALID_ARGUMENT, "got 1.5"),
            (lambda: static.set_exit_threshold(0.5), Status.ERR_NOT_DYNAMIC, "has no segments"),
            (lambda: static.set_keep_ratio(0.5), Status.ERR_NOT_DYNAMIC, "has no segments"),
            (lambda: static.set_static(True), Status.ERR_NOT_DYNAMIC, "has no segments"),
            (lambda: static.logits_dynamic("x", keep=0.5), Status.ERR_NOT_DYNAMIC, "has no segments"),
        ]
        for call, status, message in cases:
            with pytest.raises(NativeError) as info:
                call()
            assert info.value.status == status and message in str(info.value), str(info.value)
        # a refused setting changes nothing; the handle still answers with the bundle's
        logits, layer, tokens = dyn.logits_dynamic("the film was great")
        assert layer == 1 and len(tokens) == 1
        logits, layer, _ = static.logits_dynamic("the film was great")
        assert layer == 0 and logits.shape == (2,)
    finally:
        dyn.close()
        static.close()
    # the Python entry points give the other runtimes' messages
    with pytest.raises(EdgeNLPError, match=r"--exit-threshold for rule maxprob .* must be in \[0, 1\]"):
        get_runner(tiny_dynamic_bundle, runtime="native", exit_threshold=2.0)
    with pytest.raises(EdgeNLPError, match="needs a dynamic bundle"):
        get_runner(tiny_static_bundle, runtime="native", keep=0.5)
    with get_runner(tiny_dynamic_bundle, runtime="native") as r, pytest.raises(EdgeNLPError, match=r"--keep must be in"):
        r.predict(["great"], keep=0.0)
    for bundle, args in ((tiny_dynamic_bundle, ["--exit-threshold", "2"]), (tiny_static_bundle, ["--keep", "0.5"])):
        proc = subprocess.run([str(native_lib / "edgenlp-run"), str(bundle), *args, "great"], capture_output=True,
                              text=True)
        assert proc.returncode == ExitCode.USER_ERROR and proc.stderr.startswith("edgenlp-run: error:"), proc.stderr
        assert proc.stderr.count("\n") == 1


def _edit_dynamic(edit):
    def apply(b: Path) -> None:
        m = json.loads((b / "manifest.json").read_text())
        edit(m["dynamic"])
        (b / "manifest.json").write_text(json.dumps(m))
    return apply


def _swap(d, a: tuple, b: tuple) -> None:
    """Swap two pte method names: a, b = (section, bucket) with section "embedding" or a segment index."""
    entry = lambda where: d["embedding"] if where == "embedding" else d["segments"][where]  # noqa: E731
    (ea, sa), (eb, sb) = (entry(a[0]), a[1]), (entry(b[0]), b[1])
    ea["pte"][sa], eb["pte"][sb] = eb["pte"][sb], ea["pte"][sa]


def _hidden_32(b: Path) -> None:
    m = json.loads((b / "manifest.json").read_text())
    m["dynamic"]["hidden"] = m["model"]["shape"]["hidden"] = 32
    (b / "manifest.json").write_text(json.dumps(m))


# name -> manifest edit; the native runtime must refuse the bundle at open with EDGENLP_ERR_BUNDLE
DISAGREEING = {
    "missing_method": _edit_dynamic(lambda d: d["segments"][1]["pte"].update({"32": "seg7_32"})),
    "other_outputs": _edit_dynamic(lambda d: _swap(d, (1, "8"), (2, "8"))),
    "embedding_is_a_segment": _edit_dynamic(lambda d: _swap(d, ("embedding", "32"), (0, "32"))),
    "other_bucket": _edit_dynamic(lambda d: _swap(d, (0, "8"), (0, "32"))),
    "other_hidden": _hidden_32,
    "duplicate_method": _edit_dynamic(lambda d: d["segments"][2]["pte"].update({"8": "seg1_8"})),
    "wrong_hidden": _edit_dynamic(lambda d: d.update(hidden=32)),
    "layers_gap": _edit_dynamic(lambda d: d["segments"][1].update(layers=[3, 3])),
    "exit_not_in_spec": _edit_dynamic(lambda d: d["spec"].update(exits=[2, 3])),
    "bucket_missing": _edit_dynamic(lambda d: d["segments"][0]["pte"].pop("32")),
    "empty_section": _edit_dynamic(lambda d: d.clear()),
}


@pytest.mark.parametrize("name", list(DISAGREEING))
def test_manifest_disagreeing_with_the_program_is_a_clean_error(native_lib, tiny_dynamic_bundle, tmp_path, name):
    from edgenlp.run.native import NativeBundleError, NativeHandle, Status

    b = tmp_path / name
    b.mkdir()
    for f in tiny_dynamic_bundle.iterdir():
        if f.name != "manifest.json":
            os.link(f, b / f.name)
    shutil.copy(tiny_dynamic_bundle / "manifest.json", b / "manifest.json")
    DISAGREEING[name](b)
    with pytest.raises(NativeBundleError) as info:
        NativeHandle(b)
    assert info.value.status == Status.ERR_BUNDLE and "\n" not in str(info.value)
    assert "dynamic" in str(info.value), str(info.value)


def test_edgenlp_run_and_the_c_example_report_exits_and_tokens(runners, native_lib, tiny_dynamic_bundle):
    native, _ = runners
    texts = TEXTS[::4]
    want = native.predict(texts, exit_threshold=0.9, keep=0.5)
    proc = subprocess.run([str(native_lib / "edgenlp-run"), str(tiny_dynamic_bundle), "--json", "--exit-threshold",
                           "0.9", "--keep", "0.5", *texts], capture_output=True, text=True, check=True)
    rows = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [(r["exit_layer"], r["tokens_kept"]) for r in rows] == [(w["exit_layer"], w["tokens_kept"]) for w in want]
    for r, w in zip(rows, want):
        assert all(abs(r["probabilities"][k] - w["probs"][k]) < 1e-4 for k in w["probs"])
    # the C example: the bundle's own settings
    want = native.predict(texts)
    proc = subprocess.run([str(native_lib / "classify"), str(tiny_dynamic_bundle), *texts], capture_output=True,
                          text=True, check=True)
    got = [line.split() for line in proc.stdout.splitlines()]
    assert [g[0] for g in got] == [w["label"] for w in want]
    assert [g[2:] for g in got] == [[f"exit_layer={w['exit_layer']}",
                                     "tokens_kept=" + ",".join(map(str, w["tokens_kept"]))] for w in want]


def test_cli_run_and_eval_with_the_native_runtime(native_lib, tiny_dynamic_bundle, dyn_task_dir):
    from click.testing import CliRunner

    from edgenlp.cli import main

    reports = {}
    for runtime in ("native", "executorch"):
        r = CliRunner().invoke(main, ["eval", str(tiny_dynamic_bundle), "--task", str(dyn_task_dir), "--json",
                                      "--runtime", runtime, "--exit-threshold", "0.9", "--keep", "0.6"])
        assert r.exit_code == 0, r.output
        reports[runtime] = json.loads(r.output)
    for key in ("exit_layers", "tokens_kept", "accuracy", "n"):
        assert reports["native"][key] == reports["executorch"][key], key
    assert reports["native"]["runtime"] == "native"
    r = CliRunner().invoke(main, ["run", str(tiny_dynamic_bundle), TEXTS[-1], "--json", "--runtime", "native", "--static"])
    assert r.exit_code == 0, r.output
    got = json.loads(r.output)[0]
    assert got["exit_layer"] == 3 and len(set(got["tokens_kept"])) == 1
    r = CliRunner().invoke(main, ["run", str(tiny_dynamic_bundle), "great", "--runtime", "native", "--keep", "2"])
    assert r.exit_code == 2 and r.output.startswith("error:") and "Traceback" not in r.output, r.output
