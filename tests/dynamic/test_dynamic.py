"""Dynamic bundles: segments lowered and run segment by segment, checked against the static bundle and the masked reference.

The model is tiny and uneven (3 layers of 4, 2 and 3 heads: a pruned shape);
its dynamic bundle has an exit after every layer and learned token thresholds,
buckets 8/32 (edgenlp_testing.DYN_BUCKETS), both formats.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from edgenlp.bundle import Bundle
from edgenlp.dynamic.rules import exit_fires
from edgenlp.run.base import get_runner
from edgenlp.run.dynamic import Settings, eager_runner, run_sentence
from edgenlp_testing import DYN_BUCKETS

RUNTIMES = ("executorch", "onnx")
TOL = 1e-4  # the fp32 export tolerance

# Odd token counts (with [CLS]/[SEP]) on both sides of the 8-token bucket, so pruning re-buckets.
ODD = [
    "great",
    "the film was really great and a story",
    "dull plot and acting , the film was weak and flat , a story of our time",
    "a lovely , funny and gripping story of our time , the acting was sharp and the plot moving",
    "boring",
    "the the the film film plot acting was really really tedious",
]


def _token_lengths(runner, texts):
    return [len(x) for x in runner.token_ids(texts)]


def test_sentences_have_odd_lengths_across_buckets(tiny_dynamic_bundle):
    with get_runner(tiny_dynamic_bundle, runtime="onnx") as r:
        lengths = _token_lengths(r, ODD)
    assert sum(n % 2 for n in lengths) >= 4 and max(lengths) > 16 and min(lengths) < 8, lengths


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_exits_off_equal_the_static_bundle(tiny_dynamic_bundle, tiny_static_bundle, runtime):
    """Segments chained with no exit and no pruning give the static bundle's logits (and so does --static)."""
    with get_runner(tiny_static_bundle, runtime=runtime) as s:
        want = s.predict_logits(ODD)
    with get_runner(tiny_dynamic_bundle, runtime=runtime) as d:
        chained = d.predict_logits(ODD, exits=False, keep=1.0)
        details = d.predict_details(ODD, exits=False, keep=1.0)
        static = d.predict_logits(ODD, static=True)
    assert np.abs(chained - want).max() <= TOL
    assert np.abs(static - want).max() <= TOL
    assert all(p.exit_layer == 3 and p.tokens == [p.tokens[0]] * 3 for p in details)


@pytest.mark.parametrize("runtime", (*RUNTIMES, "eager"))
@pytest.mark.parametrize("rule, threshold", [("maxprob", 0.0), ("entropy", 1.0), ("patience", 1)])
def test_a_threshold_that_always_exits_stops_at_the_first_exit(tiny_dynamic_dir, tiny_dynamic_bundle, runtime, rule,
                                                                threshold):
    from edgenlp.dynamic.api import load_dynamic

    dyn = load_dynamic(tiny_dynamic_dir)
    runner = eager_runner(dyn) if runtime == "eager" else get_runner(tiny_dynamic_bundle, runtime=runtime)
    first = dyn.spec.exits[0]
    with runner:
        preds = runner.predict_details(ODD, rule=rule, exit_threshold=threshold, trace=True)
    ref = eager_runner(dyn).predict_details(ODD, exits=False, keep=1.0, trace=True)
    for p, r in zip(preds, ref):
        assert p.exit_layer == first and len(p.tokens) == first
        np.testing.assert_allclose(p.logits, r.exit_logits[first], atol=TOL)


@pytest.mark.parametrize("runtime", (*RUNTIMES, "eager"))
def test_keep_ratio_one_equals_no_pruning(tiny_dynamic_dir, tiny_dynamic_bundle, runtime):
    runner = eager_runner(tiny_dynamic_dir) if runtime == "eager" else get_runner(tiny_dynamic_bundle, runtime=runtime)
    with runner:
        lengths = _token_lengths(runner, ODD)
        kept = runner.predict_details(ODD, keep=1.0)
        unpruned = runner.predict_details(ODD, keep=1.0, exits=False)
        # the same sentences with exits only: a Settings without token pruning at all
        plain = [run_sentence(runner.backend, runner.segments, ids, Settings(False, True, runner.spec.rule,
                 runner.spec.threshold, "none", (), 1.0), mask_bias=runner.mask_bias, pad_id=runner.pad_id,
                 num_layers=3) for ids in runner.token_ids(ODD)]
    for p, q, n in zip(kept, plain, lengths):
        assert p.tokens == [n] * len(p.tokens) and p.exit_layer == q.exit_layer
        np.testing.assert_allclose(p.logits, q.logits, atol=1e-6)
    assert all(u.tokens == [n] * 3 for u, n in zip(unpruned, lengths))


def _masked_reference(dyn, runner, texts, settings: Settings):
    """Per sentence (alone, unpadded): exit layer, tokens per layer, kept positions and logits of the masked model."""
    out = []
    for ids in runner.token_ids(texts):
        x = torch.tensor([ids])
        t = dyn.masked_forward(x, torch.ones_like(x), tokens=settings.tokens, thresholds=settings.thresholds,
                               keep_ratio=settings.keep_ratio, trace=True)
        exits = dyn.spec.exits
        i = exit_fires(settings.rule, settings.threshold, [t.exit_logits[l][0] for l in exits]) if settings.exits else None
        layer = exits[i] if i is not None else exits[-1]
        kept = {l: v[0] for l, v in t.kept.items() if l < layer}
        out.append((layer, list(t.tokens[0, :layer]), kept, t.exit_logits[layer][0]))
    return out


@pytest.mark.parametrize("runtime", (*RUNTIMES, "eager"))
@pytest.mark.parametrize("tokens", ["keep", "ltp"])
def test_gathered_rebucketed_path_equals_the_masked_reference(tiny_dynamic_dir, tiny_dynamic_bundle, runtime, tokens):
    """Gathering the kept tokens and re-padding to a smaller bucket gives the masked model's decisions and logits."""
    from edgenlp.dynamic.api import load_dynamic

    dyn = load_dynamic(tiny_dynamic_dir)
    runner = eager_runner(dyn) if runtime == "eager" else get_runner(tiny_dynamic_bundle, runtime=runtime)
    # thresholds that drop about half the tokens: every sentence re-buckets at least once
    settings = Settings(False, True, "maxprob", 0.95, tokens, (1.0, 1.05, None), 0.55)
    want = _masked_reference(dyn, runner, ODD, settings)
    with runner:
        got = [run_sentence(runner.backend, runner.segments, ids, settings, mask_bias=runner.mask_bias,
                            pad_id=runner.pad_id, num_layers=3, trace=True) for ids in runner.token_ids(ODD)]
    assert any(len(p.tokens) > 1 and p.tokens[1] < p.tokens[0] for p in got), "nothing was pruned"
    lengths = _token_lengths(runner, ODD)
    for p, (layer, tokens_, kept, logits), n in zip(got, want, lengths):
        assert p.exit_layer == layer and p.tokens == tokens_
        assert all(v[0] == 0 and v[-1] == n - 1 for v in p.kept.values()), p.kept  # [CLS] and [SEP] stay
        assert {l: list(v) for l, v in p.kept.items()} == {l: list(v) for l, v in kept.items()}
        np.testing.assert_allclose(p.logits, logits, atol=TOL)


def test_each_segment_is_one_delegate_call_and_weights_are_stored_once(tiny_dynamic_bundle, tiny_static_bundle):
    b = Bundle.open(tiny_dynamic_bundle)
    d = b.manifest["dynamic"]
    methods = {m["name"]: m for m in d["pte"]["methods"]}
    segs = [name for s in d["segments"] for name in s["pte"].values()]
    assert len(segs) == 3 * len(DYN_BUCKETS)
    for name in segs:
        assert methods[name]["delegate_calls"] == 1 and methods[name]["non_delegated_ops"] == {}, methods[name]
    for name in d["embedding"]["pte"].values():  # the gather stays outside, as in the static program
        assert methods[name]["delegate_calls"] == 1
        assert set(methods[name]["non_delegated_ops"]) == {"aten.embedding.default"}
    # the static forward methods are all the static runtimes see
    assert [m["name"] for m in b.manifest["artifacts"]["pte"]["methods"]] == [f"forward_{s}" for s in DYN_BUCKETS]
    static = Bundle.open(tiny_static_bundle).manifest["sizes"]["model.pte"]
    heads = sum(p.numel() * 4 for p in __import__("edgenlp.dynamic.api", fromlist=["x"]).load_dynamic(
        b.manifest["model"]["source"]).exit_heads.parameters())
    assert b.manifest["sizes"]["model.pte"] <= 1.05 * static + heads, (b.manifest["sizes"]["model.pte"], static, heads)



def test_dynamic_onnx_files_store_each_weight_once(tiny_dynamic_bundle, tiny_static_bundle):
    """model.onnx and the segment files point into one model.onnx.data; every static weight is one the segments read
    too, so the ONNX side weighs about what a static bundle's model.onnx does plus the exit heads."""
    import onnx

    b = Bundle.open(tiny_dynamic_bundle)
    shared = b.manifest["artifacts"]["onnx"]["shared_weights"]
    files = ["model.onnx", b.manifest["dynamic"]["embedding"]["onnx"], *(s["onnx"] for s in b.manifest["dynamic"]["segments"])]
    spans = {}
    for f in files:
        for t in onnx.load(str(b.path / f), load_external_data=False).graph.initializer:
            if t.data_location == onnx.TensorProto.EXTERNAL:
                ext = {e.key: e.value for e in t.external_data}
                assert ext["location"] == shared["file"] == "model.onnx.data"
                spans.setdefault(f, set()).add((int(ext["offset"]), int(ext["length"])))
            else:
                assert len(t.raw_data) < 1024, (f, t.name)  # only small tensors stay inline
    assert spans["model.onnx"] <= set().union(*(spans[f] for f in files[1:]))
    assert b.manifest["sizes"][shared["file"]] == shared["bytes"] < shared["bytes_inline_before"]
    static = Bundle.open(tiny_static_bundle).manifest["sizes"]["model.onnx"]
    heads = sum(p.numel() * 4 for p in __import__("edgenlp.dynamic.api", fromlist=["x"]).load_dynamic(
        b.manifest["model"]["source"]).exit_heads.parameters())
    onnx_bytes = sum(n for f, n in b.manifest["sizes"].items() if f.endswith((".onnx", ".onnx.data")))
    assert onnx_bytes <= 1.1 * static + heads, (onnx_bytes, static, heads)
    assert b.manifest["parity"]["onnx"]["passed"] and b.manifest["dynamic"]["parity"]["onnx"]["passed"]


def test_manifest_records_segments_rule_and_thresholds(tiny_dynamic_bundle):
    b = Bundle.open(tiny_dynamic_bundle)
    d, entry = b.manifest["dynamic"], b.dynamic
    assert [s["layers"] for s in d["segments"]] == [[1, 1], [2, 2], [3, 3]]
    assert d["spec"]["exits"] == [1, 2, 3] and d["rule"]["name"] == "maxprob" and 0 <= d["rule"]["threshold"] <= 1
    assert d["tokens"]["mode"] == "ltp" and d["tokens"]["layers"] == [1, 2]
    assert len(d["tokens"]["thresholds"]) == 3 and d["tokens"]["thresholds"][2] is None
    assert entry.spec.threshold == d["rule"]["threshold"]
    assert all(p["passed"] for p in d["parity"].values())
    assert b.recipe[-2].type == "dynamic" and b.recipe[-1].type == "export"


def test_eval_json_reports_exits_tokens_and_latency(tiny_dynamic_bundle, dyn_task_dir):
    from click.testing import CliRunner

    from edgenlp.cli import main

    r = CliRunner().invoke(main, ["eval", str(tiny_dynamic_bundle), "--task", str(dyn_task_dir), "--json", "--keep", "0.6"])
    assert r.exit_code == 0, r.output
    report = json.loads(r.output)
    assert sum(report["exit_layers"].values()) == report["n"] and set(report["exit_layers"]) == {"1", "2", "3"}
    assert len(report["tokens_kept"]) == 3 and set(report["latency_ms"]) == {"mean", "p50", "p90", "max"}
    assert report["latency_ms"]["p50"] <= report["latency_ms"]["p90"] <= report["latency_ms"]["max"]
    r = CliRunner().invoke(main, ["run", str(tiny_dynamic_bundle), "great film", "--json", "--static"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)[0]["exit_layer"] == 3
    text = ODD[3]  # long enough to lose tokens at keep 0.5
    r = CliRunner().invoke(main, ["run", str(tiny_dynamic_bundle), text, "--json", "--exit-threshold", "0", "--keep", "1"])
    assert r.exit_code == 0, r.output
    got = json.loads(r.output)[0]
    assert got["exit_layer"] == 1 and len(got["tokens_kept"]) == 1  # max probability >= 0 stops at the first exit
    r = CliRunner().invoke(main, ["run", str(tiny_dynamic_bundle), text, "--json", "--exit-threshold", "1", "--keep", "0.5"])
    assert r.exit_code == 0, r.output
    got = json.loads(r.output)[0]
    n = got["tokens_kept"][0]
    assert got["exit_layer"] == 3 and got["tokens_kept"][1] == max(2, -(-n // 2)), got  # ceil(n / 2) after layer 1


def test_native_and_plain_runners_still_run_a_dynamic_bundle_statically(tiny_dynamic_bundle, tiny_static_bundle):
    """A runtime that does not know segments runs the static methods: old runners keep working."""
    from edgenlp.run.executorch import ExecuTorchRunner
    from edgenlp.run.onnx import OnnxRunner

    with get_runner(tiny_static_bundle, runtime="onnx") as s:
        want = s.predict_logits(ODD)
    for cls in (ExecuTorchRunner, OnnxRunner):
        with cls(tiny_dynamic_bundle) as r:
            assert np.abs(r.predict_logits(ODD) - want).max() <= TOL


def test_cls_pooled_exits_take_the_masked_references_decisions_in_one_delegate_call(tiny_dynamic_dir, dyn_task_dir,
                                                                                    tmp_path):
    """The other pooling than the fixture's (mean, the default: every runtime is tested on the session bundle above):
    exit heads that read [CLS] take the same decisions and logits in the masked reference, eagerly and through the
    lowered segments, and each segment still lowers to one XNNPACK delegate call (ExecuTorch, one bucket: the
    segments' ONNX graphs and the re-bucketing do not depend on the head, and lowering is the slow part)."""
    import shutil

    from edgenlp.data.tasks import load_task
    from edgenlp.dynamic.api import load_dynamic, write_dynamic
    from edgenlp.export.api import ExportConfig, export_bundle
    from edgenlp.models.registry import load_model

    mean = load_dynamic(tiny_dynamic_dir)
    assert {h.pooling for h in mean.exit_heads.values()} == {"mean"}  # the default
    folder = shutil.copytree(tiny_dynamic_dir, tmp_path / "cls")
    for head in mean.exit_heads.values():
        head.pooling = "cls"
    write_dynamic(folder, mean)
    cls = load_dynamic(folder)
    assert {h.pooling for h in cls.exit_heads.values()} == {"cls"}
    mean = load_dynamic(tiny_dynamic_dir)
    h = torch.randn(1, 5, mean.shape.hidden, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():  # the same weights: the mean of the tokens, or [CLS]
        assert not torch.allclose(mean.exit_heads["1"](h), cls.exit_heads["1"](h))
        torch.testing.assert_close(mean.exit_heads["1"](h), cls.exit_heads["1"](h.mean(1, keepdim=True)))
        torch.testing.assert_close(cls.exit_heads["1"](h), mean.exit_heads["1"](h[:, :1]))
    model, info = load_model(folder)
    bundle = export_bundle(model, info, tmp_path / "b", task=load_task(dyn_task_dir),
                           config=ExportConfig(formats=("pte",), max_seq_len=32, buckets=(32,)))
    d = bundle.manifest["dynamic"]
    methods = {m["name"]: m for m in d["pte"]["methods"]}
    for name in (name for s in d["segments"] for name in s["pte"].values()):
        assert methods[name]["delegate_calls"] == 1 and methods[name]["non_delegated_ops"] == {}, methods[name]
    layers = set()
    for runtime in ("executorch", "eager"):
        runner = eager_runner(cls) if runtime == "eager" else get_runner(bundle.path, runtime=runtime)
        # 0: every sentence stops at the first exit; 0.95: some go on, past layers that dropped tokens
        for threshold in (0.0, 0.95):
            settings = Settings(False, True, "maxprob", threshold, "keep", (None, None, None), 0.55)
            want = _masked_reference(cls, runner, ODD, settings)
            with runner:
                got = [run_sentence(runner.backend, runner.segments, ids, settings, mask_bias=runner.mask_bias,
                                    pad_id=runner.pad_id, num_layers=3, trace=True) for ids in runner.token_ids(ODD)]
            for p, (layer, tokens_, _, logits) in zip(got, want):
                assert p.exit_layer == layer and p.tokens == tokens_, (runtime, threshold)
                np.testing.assert_allclose(p.logits, logits, atol=TOL, err_msg=f"{runtime} at {threshold}")
                layers.add(layer)
            assert threshold or {p.exit_layer for p in got} == {1}
    assert layers - {1}, "no sentence went past the first exit"
