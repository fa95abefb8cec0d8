"""libedgenlp, edgenlp-run and the C example against the ExecuTorch Python runtime, plus bad input."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from edgenlp.errors import ExitCode
from edgenlp.run.native import Status
from native_testing import RUNTIME

pytestmark = pytest.mark.native

TEXTS = ["a gripping, funny film", "dull", "", "word " * 60, "Ünïcödé — 中文 😀", "x" * 100_000, "long text " * 10_000]


def reference_logits(bundle: Path, ids_list: list[list[int]]) -> np.ndarray:
    """ExecuTorch pybindings on the same ids, bucketed and padded per the bundle contract (edgenlp.bundle)."""
    from executorch.runtime import Runtime

    from edgenlp.bundle import Bundle, pad_to_bucket, pick_bucket

    b = Bundle.open(bundle)
    program = Runtime.get().load_program(b.artifact("pte"))
    rows = []
    for ids in ids_list:
        m = pick_bucket(b.pte_methods, len(ids))
        assert m.seq_len >= len(ids)
        x, mask = pad_to_bucket(ids, m, pad_id=0)
        rows.append(program.load_method(m.name).execute([x, mask])[0].numpy()[0])
    return np.stack(rows)


def test_native_runner_equals_executorch_python(tiny_bundle):
    from edgenlp.run.native import NativeRunner

    with NativeRunner(tiny_bundle, threads=1) as runner:
        logits = runner.predict_logits(TEXTS)
        ids = runner.token_ids(TEXTS)
        assert logits.dtype == np.float32 and logits.shape == (len(TEXTS), 2)
        assert runner.labels == ("0", "1")
        assert {len(i) for i in ids} >= {3, 62, 128}  # both buckets used
    np.testing.assert_allclose(logits, reference_logits(tiny_bundle, ids), rtol=1e-5, atol=1e-5)


SENTENCES = [
    "it 's a charming and often affecting journey . ",
    "unflinchingly bleak and desperate ",
    "the acting , costumes , music , cinematography and sound are all astounding given the production 's "
    "austere locales . ",
    "Hello, World! A naïve café-goer's résumé (2nd edition) — 中文 😀",
    "It's not THAT bad... is it?!",
]


def _sst2_dev(n: int) -> list[str]:
    from native_testing import DATA

    path = DATA / "sst2" / "dev.tsv"
    if not path.is_file():
        pytest.skip(f"{path} missing (the shared SST-2 data)")
    from edgenlp.data.tasks import read_tsv

    return list(read_tsv(path).texts)[:n]


def test_native_runner_equals_executorch_runner_from_text(tiny_bundle):
    """The whole text path: Python tokenizer + ExecuTorch pybindings vs native tokenizer + C++ runtime."""
    from edgenlp.run.executorch import ExecuTorchRunner
    from edgenlp.run.native import NativeRunner

    texts = SENTENCES + _sst2_dev(16) + ["word " * 60]
    et = ExecuTorchRunner(tiny_bundle)
    want_ids, want = et.token_ids(texts), et.predict_logits(texts)
    with NativeRunner(tiny_bundle, threads=1) as runner:
        got_ids, got = runner.token_ids(texts), runner.predict_logits(texts)
    # a Python tokenizer with a broken vocabulary maps every word to [UNK]
    assert sum(i == 100 for ids in want_ids for i in ids) < len(texts)
    assert got_ids == want_ids
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert (got.argmax(1) == want.argmax(1)).all()


def test_threads_do_not_change_results(tiny_bundle):
    from edgenlp.run.native import NativeRunner

    with NativeRunner(tiny_bundle, threads=1) as one:
        a = one.predict_logits(TEXTS[:3])
    with NativeRunner(tiny_bundle, threads=2) as two:
        b = two.predict_logits(TEXTS[:3])
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


def test_status_codes_mirror_the_header():
    """edgenlp.run.native.Status is edgenlp_status of runtime/include/edgenlp.h, name for name."""
    import re

    header = (RUNTIME / "include" / "edgenlp.h").read_text()
    body = re.search(r"typedef enum edgenlp_status \{(.*?)\} edgenlp_status;", header, re.S).group(1)
    declared = {name: int(value) for name, value in re.findall(r"EDGENLP_(\w+)\s*=\s*(\d+)", body)}
    assert declared == {s.name: s.value for s in Status}


def test_cpp_unit_tests(host_build, tiny_bundle):
    proc = subprocess.run([str(host_build / "edgenlp_tests"), str(tiny_bundle)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert " 0 failures" in proc.stdout


def test_c_example(host_build, tiny_bundle):
    """The C example prints each text's label and its probability, as the Python ExecuTorch runner computes them."""
    from edgenlp.run.executorch import ExecuTorchRunner

    texts = SENTENCES + ["word " * 60]
    proc = subprocess.run([str(host_build / "classify"), str(tiny_bundle), *texts], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    got = [line.rsplit(" ", 1) for line in proc.stdout.splitlines()]
    want = ExecuTorchRunner(tiny_bundle).predict(texts)
    assert [label for label, _ in got] == [w["label"] for w in want]
    np.testing.assert_allclose([float(p) for _, p in got], [w["probs"][w["label"]] for w in want], atol=1e-4)


def test_cli_json_bench_etdump(host_build, tiny_bundle, tmp_path):
    run = str(host_build / "edgenlp-run")
    out = subprocess.run([run, str(tiny_bundle), "--json", "good", "bad"], capture_output=True, text=True, check=True)
    rows = [json.loads(l) for l in out.stdout.splitlines()]
    assert [r["text"] for r in rows] == ["good", "bad"]
    assert abs(sum(rows[0]["probabilities"].values()) - 1) < 1e-4
    out = subprocess.run([run, str(tiny_bundle), "--bench", "5", "--seq-len", "32", "--threads", "2"],
                         capture_output=True, text=True, check=True)
    bench = json.loads(out.stdout)
    assert bench["iterations"] == 5 and bench["latency_ms"]["median"] > 0 and bench["peak_rss_kb"] > 0
    etdump = tmp_path / "run.etdp"
    subprocess.run([run, str(tiny_bundle), "--etdump", str(etdump), "hello"], check=True, capture_output=True)
    assert etdump.stat().st_size > 0
    from executorch.devtools.etdump.serialize import deserialize_from_etdump_flatcc

    assert deserialize_from_etdump_flatcc(etdump.read_bytes()).run_data


@pytest.mark.parametrize("args", [[], ["/nonexistent"], ["BUNDLE", "--threads", "0", "x"], ["BUNDLE", "--bogus"],
                                  ["BUNDLE", "--bench", "3"], ["BUNDLE", "--bench", "3", "--seq-len", "9999"]])
def test_cli_bad_input_exits_2(host_build, tiny_bundle, args):
    args = [str(tiny_bundle) if a == "BUNDLE" else a for a in args]
    if args == ["/nonexistent"]:
        args.append("text")
    proc = subprocess.run([str(host_build / "edgenlp-run"), *args], capture_output=True, text=True)
    assert proc.returncode == ExitCode.USER_ERROR, proc.stderr
    assert proc.stderr.count("\n") <= 3 and "error" in proc.stderr


def _copy(bundle: Path, dst: Path) -> Path:
    shutil.copytree(bundle, dst)
    return dst


def _rehash(bundle: Path) -> None:
    manifest = json.loads((bundle / "manifest.json").read_text())
    manifest["files"] = {n: hashlib.sha256((bundle / n).read_bytes()).hexdigest() for n in manifest["files"]}
    (bundle / "manifest.json").write_text(json.dumps(manifest))


def _corrupt_pte_rehashed(b: Path) -> None:
    data = bytearray((b / "model.pte").read_bytes())
    for i in range(64, len(data), 997):
        data[i] ^= 0x5A
    (b / "model.pte").write_bytes(bytes(data))
    _rehash(b)


def _truncate_pte_rehashed(b: Path) -> None:
    (b / "model.pte").write_bytes((b / "model.pte").read_bytes()[:5000])
    _rehash(b)


def _set(key, value):
    def edit(b: Path) -> None:
        m = json.loads((b / "manifest.json").read_text())
        m[key] = value
        (b / "manifest.json").write_text(json.dumps(m))
    return edit


# name -> (corrupt the bundle in place, the edgenlp_status the native runtime reports)
CORRUPTIONS = {
    "wrong_sha": (lambda b: (b / "vocab.txt").write_text((b / "vocab.txt").read_text() + "extra\n"), Status.ERR_CHECKSUM),
    "missing_pte": (lambda b: (b / "model.pte").unlink(), Status.ERR_IO),
    "missing_manifest": (lambda b: (b / "manifest.json").unlink(), Status.ERR_IO),
    "manifest_not_json": (lambda b: (b / "manifest.json").write_text("{\"format\": "), Status.ERR_BUNDLE),
    "manifest_empty": (lambda b: (b / "manifest.json").write_text(""), Status.ERR_BUNDLE),
    "corrupted_pte": (_corrupt_pte_rehashed, Status.ERR_MODEL),
    "truncated_pte": (_truncate_pte_rehashed, Status.ERR_MODEL),
    "path_escape": (_set("files", {"../etc/passwd": "0" * 64}), Status.ERR_BUNDLE),
    "no_labels": (_set("labels", []), Status.ERR_BUNDLE),
    "bad_version": (_set("format_version", 0), Status.ERR_BUNDLE),
    "newer_format": (_set("format_version", 2), Status.ERR_BUNDLE_FORMAT),
    "max_seq_len_1": (_set("max_seq_len", 1), Status.ERR_BUNDLE),
    "wrong_labels": (_set("labels", ["a", "b", "c"]), Status.ERR_BUNDLE),
}


@pytest.mark.parametrize("name", list(CORRUPTIONS))
def test_broken_bundles_give_clean_errors(name, tiny_bundle, tmp_path, host_build):
    from edgenlp.errors import EdgeNLPError
    from edgenlp.run.native import NativeRunner

    corrupt, status = CORRUPTIONS[name]
    b = _copy(tiny_bundle, tmp_path / name)
    corrupt(b)
    with pytest.raises(EdgeNLPError) as info:
        NativeRunner(b)
    assert info.value.status == status, f"{name}: got {Status(info.value.status).name}, want {status.name}: {info.value}"
    assert "\n" not in str(info.value)
    proc = subprocess.run([str(host_build / "edgenlp-run"), str(b), "x"], capture_output=True, text=True)
    assert proc.returncode in (ExitCode.FAILURE, ExitCode.USER_ERROR) and proc.stderr.startswith("edgenlp-run: error:")


def test_tokenize_cli(tiny_bundle):
    from click.testing import CliRunner

    from edgenlp.cli import main

    r = CliRunner().invoke(main, ["tokenize", str(tiny_bundle), "Hello, world!", "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output.splitlines()[-1])["ids"] == [101, 7592, 1010, 2088, 999, 102]
    r = CliRunner().invoke(main, ["tokenize", str(tiny_bundle)])
    assert r.exit_code == 2 and "no text given" in r.output


def test_open_flags(tiny_bundle, tmp_path):
    """Skipping verification opens a modified bundle; loading every method up front gives the same logits."""
    from edgenlp.run.native import NativeRunner

    texts = SENTENCES[:3] + ["word " * 60]
    with NativeRunner(tiny_bundle, threads=1) as lazy:
        want = lazy.predict_logits(texts)
    with NativeRunner(tiny_bundle, threads=1, load_all_methods=True) as eager:
        np.testing.assert_allclose(eager.predict_logits(texts), want, rtol=1e-6, atol=1e-6)
    b = _copy(tiny_bundle, tmp_path / "modified")
    (b / "labels.json").write_text('["0", "1"]\n')  # same labels, other bytes
    with pytest.raises(Exception) as info:
        NativeRunner(b)
    assert info.value.status == Status.ERR_CHECKSUM
    with NativeRunner(b, threads=1, verify=False) as unverified:
        np.testing.assert_allclose(unverified.predict_logits(texts), want, rtol=1e-6, atol=1e-6)


def test_unread_listed_files_must_exist_but_are_not_hashed(tiny_bundle, tmp_path):
    from edgenlp.run.native import NativeRunner

    b = _copy(tiny_bundle, tmp_path / "extra")
    m = json.loads((b / "manifest.json").read_text())
    m["files"]["model.onnx"] = "0" * 64  # a file this runtime never reads
    (b / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(Exception) as info:
        NativeRunner(b)
    assert info.value.status == Status.ERR_IO and "model.onnx" in str(info.value)
    (b / "model.onnx").write_bytes(b"not read")
    with NativeRunner(b, threads=1) as runner:
        assert runner.predict_logits(["fine"]).shape == (1, 2)
