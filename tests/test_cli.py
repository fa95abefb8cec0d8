"""The CLI through click's runner: help and happy paths (bad inputs: test_cli_errors.py)."""

import json

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
