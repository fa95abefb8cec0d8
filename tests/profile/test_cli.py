"""`edgenlp profile` through click: tables, JSON schema, plot, bundles and user errors."""

from __future__ import annotations

import json

from click.testing import CliRunner

from edgenlp.cli import main
from edgenlp.profile.components import COMPONENTS

COMPONENT_KEYS = {"name", "params", "flops", "weight_bytes", "activation_bytes", "latency_ms"}


def _run(args):
    return CliRunner().invoke(main, ["profile", *args], catch_exceptions=False)


def test_cli_model_json_and_plot(tmp_path, tiny_model_dir):
    out_json, out_png = tmp_path / "p.json", tmp_path / "p.png"
    res = _run([str(tiny_model_dir), "--seq-len", "16,32", "--threads", "1", "--runs", "3", "--warmup", "1",
                "--json", str(out_json), "--plot", str(out_png), "--per-layer"])  # fmt: skip
    assert res.exit_code == 0, res.output
    assert "attn_core" in res.output and "total" in res.output
    docs = json.loads(out_json.read_text())
    assert isinstance(docs, list) and [d["seq_len"] for d in docs] == [16, 32]
    for doc in docs:
        assert {"model", "seq_len", "threads", "components", "total", "environment", "methods"} <= set(doc)
        assert [c["name"] for c in doc["components"]] == list(COMPONENTS)
        for c in doc["components"]:
            assert COMPONENT_KEYS <= set(c) and set(c["latency_ms"]) == {"eager"}
        assert {"params", "flops", "weight_bytes", "activation_bytes", "latency_ms"} <= set(doc["total"])
        assert sum(c["params"] for c in doc["components"]) == doc["total"]["params"]
        assert len(doc["layers"]) == 2
        assert "cpu" in doc["environment"]
    assert out_png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_bundle_runtimes(tmp_path, tiny_bundle):
    out_json = tmp_path / "b.json"
    res = _run([str(tiny_bundle), "--seq-len", "16", "--runs", "3", "--warmup", "1", "--json", str(out_json)])
    assert res.exit_code == 0, res.output
    doc = json.loads(out_json.read_text())
    assert doc["kind"] == "bundle" and set(doc["runtimes"]) == {"executorch", "onnx"}
    assert all(set(c["latency_ms"]) == {"executorch", "onnx"} for c in doc["components"])


def test_cli_user_errors(tiny_model_dir, tiny_bundle):
    runner = CliRunner()
    for args, needle in (
        (["no-such-model"], "unknown model"),
        ([str(tiny_model_dir), "--runtime", "tpu"], "unknown runtime"),
        ([str(tiny_model_dir), "--seq-len", "abc"], "--seq-len"),
        ([str(tiny_model_dir), "--seq-len", "4096"], "positions"),
        ([str(tiny_bundle), "--runtime", "eager"], "no eager model"),
        ([str(tiny_bundle), "--runtime", "executorch", "--seq-len", "20"], "no method for seq 20"),
        ([str(tiny_bundle), "--runtime", "onnx", "--seq-len", "48"], "max_seq_len 32"),
        ([str(tiny_model_dir), "--runtime", "native", "--seq-len", "16"], "native runtime profiles bundles"),
    ):
        res = runner.invoke(main, ["profile", *args])
        assert res.exit_code == 2, (args, res.output)
        assert needle in res.output, (args, res.output)
        assert "Traceback" not in res.output
