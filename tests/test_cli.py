"""The CLI through click's runner: happy paths and one-line errors with non-zero exits."""

import json

import pytest
from click.testing import CliRunner

from edgenlp.cli import COMMANDS, main


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def test_help_lists_every_verb_and_each_has_examples():
    out = invoke("--help").output
    for verb in COMMANDS:
        assert verb in out
    for verb in COMMANDS:
        r = invoke(verb, "--help")
        assert r.exit_code == 0 and "Examples:" in r.output, verb


def test_models_json():
    rows = json.loads(invoke("models", "--json").output)
    by_name = {r["name"]: r for r in rows}
    assert by_name["minilm-l6"]["hidden"] == 384 and by_name["minilm-l6"]["weights"] == "pretrained"
    assert by_name["bert-base"]["layers"] == 12 and by_name["distilbert-base"]["family"] == "distilbert"


def test_run_and_eval_through_both_runtimes(tiny_bundle, tiny_task_dir):
    r = invoke("run", tiny_bundle, "a joy to watch", "tedious", "--json")
    assert r.exit_code == 0, r.output
    res = json.loads(r.output)
    assert [x["text"] for x in res] == ["a joy to watch", "tedious"]
    assert all(abs(sum(x["probs"].values()) - 1) < 1e-5 and x["label"] in ("neg", "pos") for x in res)
    reports = {}
    for runtime in ("executorch", "onnx"):
        r = invoke("eval", tiny_bundle, "--task", tiny_task_dir, "--runtime", runtime, "--json")
        assert r.exit_code == 0, r.output
        reports[runtime] = json.loads(r.output)
    assert reports["executorch"]["n"] == 3 and reports["executorch"]["accuracy"] == reports["onnx"]["accuracy"]
    r = invoke("eval", tiny_bundle, "--data", tiny_task_dir / "dev.tsv", "--runtime", "onnx", "--json")
    assert json.loads(r.output)["accuracy"] == reports["onnx"]["accuracy"]


def test_inspect(tiny_bundle):
    r = invoke("inspect", tiny_bundle)
    assert r.exit_code == 0 and "verified" in r.output and "export" in r.output


@pytest.mark.parametrize(
    "args, message",
    [
        (["export", "no-such-model", "--out", "{tmp}/x"], "unknown model 'no-such-model'"),
        (["export", "bert-mini", "--task", "nope", "--out", "{tmp}/x"], "unknown task 'nope'"),
        (["export", "bert-mini", "--seq-len", "1", "--out", "{tmp}/x"], "max_seq_len must be"),
        (["export", "bert-mini", "--buckets", "a,b", "--out", "{tmp}/x"], "--buckets expects"),
        (["run", "{tmp}/missing", "hi"], "bundle directory not found"),
        (["eval", "{bundle}", "--data", "{tmp}/labels.tsv"], "label 'maybe' is not one of the 2 known labels"),
        (["eval", "{bundle}"], "give --task"),
        (["run", "{bundle}", "hi", "--threads", "0"], "--threads must be >= 1"),
    ],
)
def test_errors_are_one_line_with_nonzero_exit(tmp_path, tiny_bundle, args, message):
    (tmp_path / "labels.tsv").write_text("text\tlabel\nfine\tpos\nhmm\tmaybe\n")
    args = [a.format(tmp=tmp_path, bundle=tiny_bundle) for a in args]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 2, r.output
    assert message in r.output
    err_lines = [l for l in r.output.splitlines() if l.startswith("error:")]
    assert len(err_lines) == 1 and "Traceback" not in r.output
    assert not (tmp_path / "x").exists()
