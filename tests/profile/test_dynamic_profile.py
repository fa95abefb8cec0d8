"""`edgenlp profile BUNDLE --data ...` on a dynamic bundle: per-sentence latency, exits, tokens, weighted components,
the latency-accuracy curve; and the refusals on a static bundle."""

from __future__ import annotations

import json

import numpy as np
from click.testing import CliRunner

from edgenlp.cli import main


def _run(args):
    return CliRunner().invoke(main, ["profile", *args])


def test_dynamic_profile_over_data(tmp_path, tiny_dynamic_bundle, dyn_task_dir):
    from edgenlp.bundle import Bundle
    from edgenlp.data.tasks import load_task
    from edgenlp.profile.report import markdown
    from edgenlp.run.base import BundleRunner

    out_json, curve = tmp_path / "p.json", tmp_path / "curve.png"
    res = _run([str(tiny_dynamic_bundle), "--runtime", "onnx", "--seq-len", "16", "--runs", "3", "--warmup", "0",
                "--data", str(dyn_task_dir), "--exit-threshold", "0.7", "--json-out", str(out_json), "--curve-plot", str(curve)])
    assert res.exit_code == 0, res.output
    doc = json.loads(out_json.read_text())
    d = doc["dynamic"]
    dev = load_task(dyn_task_dir).dev
    assert d["n"] == len(dev) and d["split"] == "dev"
    r = d["runtimes"]["onnx"]
    n = d["n"]
    # exits: a histogram over the sentences; latency: a distribution
    assert sum(r["exit_layers"].values()) == n
    lat = r["latency_ms"]
    assert 0 < lat["p50"] <= lat["p90"] <= lat["max"] and lat["mean"] <= lat["max"]
    # the first layer runs every sentence at its real length (no padding)
    lengths = [len(ids) for ids in BundleRunner(Bundle.open(tiny_dynamic_bundle)).token_ids(dev.texts)]
    assert r["tokens_kept"][0] == round(float(np.mean(lengths)), 3)
    # a segment runs for the sentences that did not exit before it
    exits = {int(k): v for k, v in r["exit_layers"].items()}
    for s in r["segments"]:
        assert s["reach"] == round(sum(v for l, v in exits.items() if l >= s["layers"][1]) / n, 6), s
        if s["reach"]:
            assert s["length"] == max(2, round(s["mean_tokens"]))  # ONNX Runtime runs any length
        else:
            assert s["mean_tokens"] is None and s["length"] is None and s["cost"] is None
    # weighted components: FFN FLOPs by hand, 4·S·H·F per layer (two linears), times the reach of its segment
    shape = doc["shape"]
    ffn = sum(s["reach"] * 4 * s["length"] * shape["hidden"] * shape["ffn"][layer - 1]
              for s in r["segments"] if s["reach"] for layer in range(s["layers"][0], s["layers"][1] + 1))
    rows = {c["name"]: c for c in r["components"]}
    assert rows["ffn"]["flops"] == round(ffn)
    assert r["total"]["latency_ms"] > 0
    assert abs(sum(c["latency_ms"] for c in r["components"]) - r["total"]["latency_ms"]) < 1e-3
    assert abs(sum(s["reach"] * s["cost"]["latency_ms"] for s in r["segments"] if s["reach"]) + rows["embedding"]["latency_ms"]
               - r["total"]["latency_ms"]) < 1e-2
    assert 0 < r["segments"][1]["reach"] < 1 and r["segments"][2]["reach"] > 0  # at 0.7 the sentences spread over the exits
    # the curve: the profiled threshold is on it (its accuracy is the one above), and at maxprob 1/labels
    # every sentence leaves at the first exit
    curve_pts = {c["threshold"]: c for c in r["curve"]}
    assert d["threshold"] == 0.7 and d["threshold"] in curve_pts and curve_pts[d["threshold"]]["accuracy"] == r["accuracy"]
    assert d["rule"] == "maxprob" and curve_pts[0.5]["mean_exit_layer"] == min(d["exits"])
    assert [c["threshold"] for c in r["curve"]] == sorted(curve_pts)
    assert r["static"]["accuracy"] >= 0
    assert curve.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    md = markdown([doc])
    assert "weighted by how often each segment runs" in md and "expected total" in md
    assert "dynamic" in res.output  # the terminal report shows it too


def test_dynamic_options_refused_on_static(tmp_path, tiny_static_bundle, dyn_task_dir):
    out_json = tmp_path / "p.json"
    for args, needle in (
        (["--data", str(dyn_task_dir)], "has no segments"),
        (["--thresholds", "0.9"], "--data"),
        (["--curve-plot", str(tmp_path / "c.png")], "--data"),
    ):
        res = _run([str(tiny_static_bundle), "--runtime", "onnx", "--seq-len", "16", "--runs", "1", "--warmup", "0",
                    "--json-out", str(out_json), *args])
        assert res.exit_code == 2, (args, res.output)
        lines = res.output.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error:") and needle in lines[0], (args, res.output)
        assert not out_json.exists() and not (tmp_path / "c.png").exists()
