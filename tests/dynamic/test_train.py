"""Training and calibration (edgenlp.dynamic.api / train): frozen backbone, soft masks, splits, the CLI verb."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from edgenlp.data.tasks import load_task
from edgenlp.dynamic.api import load_dynamic, make_dynamic, split_rows
from edgenlp.dynamic.config import DynamicConfig
from edgenlp.models.registry import load_model


def test_frozen_backbone_leaves_the_static_model_exactly(tiny_ft_dir, tiny_dynamic_dir):
    base, _ = load_model(tiny_ft_dir)
    dyn = load_dynamic(tiny_dynamic_dir)
    for k, v in base.state_dict().items():
        assert torch.equal(v, dyn.base.state_dict()[k]), k
    ids = torch.randint(1, 1000, (2, 9))
    assert torch.equal(dyn(ids, torch.ones_like(ids)), base(ids, torch.ones_like(ids)))


def test_recipe_and_report_record_the_calibration(tiny_dynamic_dir):
    _, info = load_model(tiny_dynamic_dir)
    step = info.recipe[-1]
    assert step.type == "dynamic" and step.config.tokens == "ltp"
    spec = load_dynamic(tiny_dynamic_dir).spec
    assert step.result["spec"] == spec.to_dict()
    assert step.result["split"]["val_source"] == "train split"
    report = json.loads((tiny_dynamic_dir / "dynamic-report.json").read_text())
    assert set(report["validation"]["curves"]) == {"maxprob", "entropy", "patience"}
    chosen = report["validation"]["chosen"]
    assert chosen["threshold"] == spec.threshold and (chosen["drop"] <= 5.0 or not chosen["within_max_drop"])
    losses = [h["loss_per_exit"] for h in report["exit_training"]["history"]]
    assert all(losses[-1][l] < losses[0][l] for l in losses[0]), losses  # distillation made progress


def test_validation_rows_come_from_train_rows_the_finetuning_did_not_use(dyn_task_dir):
    from dataclasses import replace

    from edgenlp.finetune.config import FinetuneConfig
    from edgenlp.recipe import Step
    from edgenlp_testing import tiny_finetuned

    task = load_task(dyn_task_dir)
    _, info = tiny_finetuned()
    info = replace(info, recipe=(Step("finetune", FinetuneConfig(train_limit=40, subset_seed=3)),))
    train, val, note = split_rows(task, info, DynamicConfig(val_rows=20, train_limit=50))
    seen = set(task.train.sample_indices(40, seed=3))
    assert note["val_unseen_by_finetuning"] and not set(val) & seen and not set(val) & set(train)
    assert len(val) == 20 and len(train) == 50 and max(train + val) < len(task.train)


def test_validation_rows_can_come_from_long_training_rows_only(dyn_task_dir):
    from edgenlp.errors import EdgeNLPError
    from edgenlp_testing import tiny_finetuned

    task = load_task(dyn_task_dir)
    _, info = tiny_finetuned()
    words = [len(t.split()) for t in task.train.texts]
    w = sorted(words)[len(words) // 2]
    assert min(words) < w  # the filter has something to leave out
    train, val, note = split_rows(task, info, DynamicConfig(val_rows=10, train_limit=50, val_min_words=w))
    assert len(val) == 10 and all(words[i] >= w for i in val) and not set(val) & set(train)
    assert note["val_min_words"] == w
    with pytest.raises(EdgeNLPError, match=f"at least {max(words) + 1} words"):
        split_rows(task, info, DynamicConfig(val_rows=10, val_min_words=max(words) + 1))
    old = {k: v for k, v in DynamicConfig().to_dict().items() if k != "val_min_words"} | {"version": 1}
    assert DynamicConfig.from_dict(old).val_min_words == 0  # a version-1 step drew from every row
    v2 = {k: v for k, v in DynamicConfig().to_dict().items() if k != "margin_se"} | {"version": 2}
    assert DynamicConfig.from_dict(v2).margin_se == 0.0  # a version-2 step held the measured drop alone
    assert DynamicConfig().margin_se == 1.0
    for bad in (-0.5, 11.0, True, "1"):
        with pytest.raises(ValueError, match="margin_se"):
            DynamicConfig(margin_se=bad)


def test_quantize_verb_writes_the_recalibrated_threshold_into_the_bundle(tiny_dynamic_dir, dyn_task_dir, tmp_path):
    """edgenlp quantize on a dynamic model: the quantize step records the threshold calibrated on the int8 model, the
    bundle's manifest carries it, and the command says so."""
    from click.testing import CliRunner

    from edgenlp.bundle import Bundle
    from edgenlp.cli import main

    task = own_predictions_task(tiny_dynamic_dir, dyn_task_dir, tmp_path / "task")
    r = CliRunner().invoke(main, ["quantize", str(tiny_dynamic_dir), "--scheme", "int8", "--task", str(task),
                                  "--format", "onnx", "--seq-len", "32", "--out", str(tmp_path / "q")])
    assert r.exit_code == 0, r.output
    b = Bundle.open(tmp_path / "q")
    exits = next(s for s in b.recipe if s.type == "quantize").result["exits"]
    assert exits["threshold_before"] == load_dynamic(tiny_dynamic_dir).spec.threshold and "reach" in exits
    assert exits["threshold"] != exits["threshold_before"]  # (else the next line could not tell them apart)
    assert b.dynamic.spec.threshold == exits["threshold"]
    assert f"-> {exits['threshold']:.4g}, calibrated again on the quantized model" in r.output


def test_soft_mask_hardens_into_the_masked_model():
    """At a vanishing temperature the soft-masked forward is the hard threshold model."""
    from edgenlp.dynamic.model import DynamicModel
    from edgenlp.dynamic.spec import DynamicSpec
    from edgenlp.dynamic.train import soft_pass
    from edgenlp_testing import tiny_finetuned

    model, _ = tiny_finetuned()
    ids = torch.randint(1, 1000, (3, 13), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    mask[1, 9:] = 0
    theta = torch.tensor([0.93, 1.1])
    spec = DynamicSpec(num_layers=3, exits=(3,), tokens="ltp", token_layers=(1, 2), token_thresholds=(0.93, 1.1, None))
    hard = DynamicModel(model, spec, {}).masked_forward(ids, mask).exit_logits[3]
    with torch.no_grad():
        soft, frac = soft_pass(model, ids, mask, theta, (1, 2), 1e-5)
    assert float(frac[-1]) < 0.9  # tokens were dropped
    np.testing.assert_allclose(soft.numpy(), hard, atol=1e-3)


def test_the_sparsity_weight_raises_the_thresholds(tiny_ft_dir, dyn_task_dir):
    from edgenlp.dynamic.train import learn_token_thresholds, static_logits
    from edgenlp.finetune.trainer import encode_split, load_tokenizer

    model, info = load_model(tiny_ft_dir)
    task = load_task(dyn_task_dir)
    data = encode_split(load_tokenizer(info), task.train, task.labels, max_len=32)
    teacher = static_logits(model, data, pad_id=0)
    got = {}
    for lam in (0.0, 5.0):
        cfg = DynamicConfig(tokens="ltp", token_lambda=lam, token_epochs=2, batch_size=16)
        got[lam], _ = learn_token_thresholds(model, data, teacher, cfg, token_layers=(1, 2), pad_id=0)
    assert all(t >= 0 for t in got[0.0] + got[5.0])
    assert sum(got[5.0]) > sum(got[0.0]) + 0.1, got


def test_joint_training_changes_the_backbone_and_keeps_exits_consistent(tiny_ft_dir, dyn_task_dir):
    model, info = load_model(tiny_ft_dir)
    cfg = DynamicConfig(exits=(1, 3), joint=True, epochs=1, val_rows=20, train_limit=40, max_seq_len=32, batch_size=16,
                        threshold=0.9)
    res = make_dynamic(model, info, load_task(dyn_task_dir), cfg, device="cpu")
    assert not torch.equal(res.model.base.layers[0].query.weight, model.layers[0].query.weight)
    assert res.model.spec.threshold == 0.9 and res.model.spec.exits == (1, 3)
    assert "static_accuracy_after_joint" in res.report["validation"]


def test_joint_token_pruning_alone_trains_past_the_budget_then_calibrates_again(tiny_ft_dir, dyn_task_dir):
    """No exits, LTP, --joint: the backbone trains through the pruning at the scale that costs joint_token_drop on the
    frozen model; the shipped scale is calibrated again, on the trained model, to max_drop."""
    model, info = load_model(tiny_ft_dir)
    cfg = DynamicConfig(exits=(), tokens="ltp", joint=True, joint_token_drop=40.0, max_drop=0.0, margin_se=0.0,
                        epochs=1, token_epochs=1, val_rows=20, train_limit=40, max_seq_len=32, batch_size=16)
    res = make_dynamic(model, info, load_task(dyn_task_dir), cfg, device="cpu")
    assert not torch.equal(res.model.base.layers[0].query.weight, model.layers[0].query.weight)  # it trained
    report = res.report
    assert report["exit_training"]["mode"] == "joint"
    first, after = report["token_calibration"], report["token_calibration_after_joint"]
    assert first["budget_points"] == 40.0 and after["budget_points"] == 0.0
    assert first["scale"] > 0  # 40 points on the frozen model buy some pruning to train at
    learned = report["token_training"]["learned"]
    layers = res.model.spec.token_layers
    got = [res.model.spec.token_thresholds[l - 1] for l in layers]
    np.testing.assert_allclose(got, [t * after["scale"] for t in learned], rtol=1e-6)  # the recalibrated scale ships
    point = next(c for c in after["curve"] if c["scale"] == after["scale"])
    assert point["drop"] <= 0.0 + 1e-9  # it fits the budget on the trained model


def test_joint_token_drop_trains_at_its_scale_and_ships_the_scale_calibrated_after(tiny_ft_dir, dyn_task_dir,
                                                                                     monkeypatch):
    """The wiring, with the calibration replaced by a stand-in that answers a scale per call: the backbone trains at
    the first scale (budget joint_token_drop, frozen backbone), the second call sees the trained backbone and the
    max_drop budget, and its scale is the one shipped."""
    import edgenlp.dynamic.api as api
    import edgenlp.dynamic.train as T

    model, info = load_model(tiny_ft_dir)
    original = model.layers[0].query.weight.clone()
    calls, trained_at = [], []

    def calibrate(dyn, val, labels, static_right, s_cost, budget, **kw):
        calls.append((budget, torch.equal(dyn.base.layers[0].query.weight, original), kw.get("stop_early", True)))
        return (2.0 if len(calls) == 1 else 0.5), []

    real_joint = T.train_joint

    def joint(dyn, *a, **kw):
        trained_at.append(dyn.spec.token_thresholds)
        return real_joint(dyn, *a, **kw)

    monkeypatch.setattr(api, "_calibrate_token_scale", calibrate)
    monkeypatch.setattr(T, "train_joint", joint)
    cfg = DynamicConfig(exits=(), tokens="ltp", joint=True, joint_token_drop=7.0, max_drop=1.0, epochs=1,
                        token_epochs=1, val_rows=20, train_limit=40, max_seq_len=32, batch_size=16)
    res = make_dynamic(model, info, load_task(dyn_task_dir), cfg, device="cpu")
    learned = res.report["token_training"]["learned"]
    layers = res.model.spec.token_layers
    # frozen at joint_token_drop; then on the trained backbone, at max_drop, over the whole grid (not monotone there)
    assert calls == [(7.0, True, True), (1.0, False, False)]
    np.testing.assert_allclose([trained_at[0][l - 1] for l in layers], [2.0 * t for t in learned], rtol=1e-6)
    np.testing.assert_allclose([res.model.spec.token_thresholds[l - 1] for l in layers], [0.5 * t for t in learned],
                               rtol=1e-6)


def test_layers_without_heads_never_drop_tokens():
    """A pruned layer with no attention heads cannot rank tokens: it is not a token layer, and decisions still match."""
    from edgenlp.dynamic.api import token_layers_of
    from edgenlp.dynamic.model import DynamicModel, ExitHead
    from edgenlp.dynamic.spec import DynamicSpec
    from edgenlp.models.encoder import EncoderClassifier, EncoderShape
    from edgenlp.run.dynamic import eager_runner

    shape = EncoderShape(family="bert", vocab_size=30522, hidden=32, heads=(2, 0, 2), head_dim=16, ffn=(64, 32, 0),
                         max_positions=64)
    model = EncoderClassifier(shape, 2, labels=("neg", "pos")).init_weights(std=0.2, seed=1).eval()
    assert token_layers_of(shape) == (1,)
    spec = DynamicSpec(num_layers=3, exits=(1, 2, 3), threshold=0.99, tokens="keep", token_layers=(1,), keep_ratio=0.5)
    dyn = DynamicModel(model, spec, {1: ExitHead.like(model), 2: ExitHead.like(model)})
    with pytest.raises(ValueError, match="no attention heads"):
        DynamicModel(model, DynamicSpec(num_layers=3, exits=(3,), tokens="keep", token_layers=(2,), keep_ratio=0.5), {})
    runner = eager_runner(dyn)
    texts = ["a fine film , really a fine one", "dull"]
    got = runner.predict_details(texts, exits=False)
    for p, ids in zip(got, runner.token_ids(texts)):
        x = torch.tensor([ids])
        ref = dyn.masked_forward(x, torch.ones_like(x))
        assert p.tokens == list(ref.tokens[0])
        np.testing.assert_allclose(p.logits, ref.exit_logits[3][0], atol=1e-5)


def test_dynamic_verb_writes_a_model_directory(tiny_ft_dir, dyn_task_dir, tmp_path):
    from click.testing import CliRunner

    from edgenlp.cli import main

    out = tmp_path / "dyn"
    r = CliRunner().invoke(main, ["dynamic", str(tiny_ft_dir), "--task", str(dyn_task_dir), "--exits", "1,2",
                                  "--rule", "entropy", "--tokens", "keep:0.7", "--max-drop", "2", "--val-rows", "20",
                                  "--train-limit", "40", "--epochs", "1", "--max-seq-len", "32", "--device", "cpu",
                                  "--out", str(out), "--json-out", str(tmp_path / "r.json")])
    assert r.exit_code == 0, r.output
    dyn = load_dynamic(out)
    assert dyn.spec.exits == (1, 2, 3) and dyn.spec.rule == "entropy" and dyn.spec.keep_ratio == 0.7
    assert 0.0 <= dyn.spec.threshold <= 1.0
    assert json.loads((tmp_path / "r.json").read_text())["spec"] == dyn.spec.to_dict()
    # the verbs chained: export the directory, then eval the bundle with the dynamic report keys
    bundle = tmp_path / "bundle"
    r = CliRunner().invoke(main, ["export", str(out), "--task", str(dyn_task_dir), "--format", "onnx", "--seq-len", "32",
                                  "--out", str(bundle)])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(main, ["eval", str(bundle), "--task", str(dyn_task_dir), "--runtime", "onnx", "--json"])
    assert r.exit_code == 0, r.output
    report = json.loads(r.output)
    assert set(report["exit_layers"]) == {"1", "2", "3"} and sum(report["exit_layers"].values()) == report["n"]
    assert len(report["tokens_kept"]) == 3 and set(report["latency_ms"]) == {"mean", "p50", "p90", "max"}
    r = CliRunner().invoke(main, ["eval", str(bundle), "--task", str(dyn_task_dir), "--runtime", "onnx", "--json",
                                  "--static"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["exit_layers"] == {"1": 0, "2": 0, "3": report["n"]}


def test_eager_segments_with_exits_off_equal_the_static_model(tiny_ft_dir, tiny_dynamic_dir):
    """The dynamic model run segment by segment (eager), no exit and keep 1, gives the static model's logits."""
    from edgenlp.run.dynamic import eager_runner

    base, _ = load_model(tiny_ft_dir)
    runner = eager_runner(tiny_dynamic_dir, max_seq_len=32)
    texts = ["great", "the film was really great and a story", "dull plot and acting , the film was weak and flat"]
    got = runner.predict_logits(texts, exits=False, keep=1.0)
    with torch.no_grad():
        want = np.concatenate([base(torch.tensor([ids]), torch.ones(1, len(ids), dtype=torch.long)).numpy()
                               for ids in runner.token_ids(texts)])
    assert np.abs(got - want).max() <= 1e-5, np.abs(got - want).max()


def own_predictions_task(model_dir, task_dir, folder):
    """``task_dir`` with its training rows labelled by the static predictions of the dynamic model at ``model_dir``.

    The tiny model is at chance on its task, where exiting at once always pays (threshold 0 on every model);
    labelled with its own predictions, early exits cost accuracy, and the calibrated threshold lands inside the
    range, apart for the fp32 and the int8 model.
    """
    from edgenlp.dynamic.api import trace_split
    from edgenlp.finetune.trainer import encode_split, load_tokenizer
    from edgenlp_testing import write_task_dir

    dyn = load_dynamic(model_dir)
    _, info = load_model(model_dir)
    task = load_task(task_dir)
    data = encode_split(load_tokenizer(info), task.train, task.labels, max_len=info.recipe[-1].config.max_seq_len)
    with torch.no_grad():
        own = trace_split(dyn, data, pad_id=0, tokens="none").exit_logits[dyn.spec.num_layers].argmax(-1)
    folder.mkdir(parents=True, exist_ok=True)
    return write_task_dir(folder, train=[(x, task.labels[y]) for x, y in zip(task.train.texts, own)],
                          dev=list(zip(task.dev.texts, task.dev.labels)))


def test_quantize_calibrates_the_exit_threshold_again_on_the_quantized_model(tiny_dynamic_dir, dyn_task_dir, tmp_path):
    """The quantize step records a threshold chosen on the int8 model's own exit logits (the same validation rows and
    maximum drop), and export reads it; ``exit_calibration="fp32"`` keeps the fp32 threshold."""
    from edgenlp.compress.guard import exits_calibrated
    from edgenlp.dynamic.api import exit_threshold_of, trace_split
    from edgenlp.dynamic.calibrate import choose, exit_curve, static_cost
    from edgenlp.export.segments import as_dynamic
    from edgenlp.finetune.trainer import encode_split, load_tokenizer
    from edgenlp.quantize.api import quantize_model
    from edgenlp.quantize.config import QuantizeConfig
    from edgenlp.quantize.schemes import quantize_exit_heads

    model, info = load_model(tiny_dynamic_dir)
    cfg = info.recipe[-1].config
    fp32 = load_dynamic(tiny_dynamic_dir)
    tokenizer = load_tokenizer(info)
    task = load_task(own_predictions_task(tiny_dynamic_dir, dyn_task_dir, tmp_path / "task"))
    qmodel, qinfo = quantize_model(model, info, QuantizeConfig(scheme="int8"))
    got = exits_calibrated(qmodel, qinfo, info, task)
    exits = got.recipe[-1].result["exits"]
    assert got.recipe[-1].type == "quantize" and exits["threshold_before"] == fp32.spec.threshold

    # The threshold, worked out here from the int8 model's traces on the validation rows make_dynamic held out.
    q = load_dynamic(tiny_dynamic_dir, base=qmodel)
    q = q.with_heads(quantize_exit_heads(q.exit_heads))  # the int8 heads that ship (QuantizeConfig.exit_heads)
    _, val_idx, _ = split_rows(task, info, cfg)
    val = encode_split(tokenizer, task.train.take(val_idx), task.labels, max_len=cfg.max_seq_len)
    labels = np.asarray(val.labels)
    with torch.no_grad():
        trace, static = trace_split(q, val, pad_id=0), trace_split(q, val, pad_id=0, tokens="none")
    static_right = static.exit_logits[q.spec.num_layers].argmax(-1) == labels
    acc = float(static_right.mean())
    want, _ = choose(exit_curve(q.spec.rule, trace, labels, q.spec.exits, shape=q.shape, static_accuracy=acc,
                                static_cost=static_cost(q.shape, static.tokens[:, 0], q.num_labels),
                                reference_right=static_right), cfg.max_drop, cfg.margin_se)
    assert 0.0 < want.threshold < 1.0 and cfg.margin_se == 1.0
    assert exits["threshold"] == want.threshold and exits["static_accuracy"] == acc
    assert exits["drop"] == pytest.approx(want.drop) and len(exits["reach"]) == q.spec.num_layers
    lowered = as_dynamic(qmodel.eval(), got, got.recipe)
    assert lowered.spec.threshold == exits["threshold"]  # what export lowers,
    assert not any(m.training for m in lowered.modules())  # in eval mode, as its base (a fresh module trains)

    kept = quantize_model(model, info, QuantizeConfig(scheme="int8", exit_calibration="fp32"))[1]
    assert exits_calibrated(qmodel, kept, info, task) == kept
    assert as_dynamic(qmodel, kept, kept.recipe).spec.threshold == fp32.spec.threshold
    assert exit_threshold_of((*got.recipe, info.recipe[-1])) is None  # a later dynamic step starts over


def test_exit_heads_ship_int8_on_a_quantized_base(tiny_dynamic_dir):
    """``QuantizeConfig.exit_heads="int8"`` (the default): export lowers the exit heads' linears as int8 (per-channel
    weights, dynamic activations), within int8 rounding of the fp32 heads, and the ONNX segments quantize the same
    linears by name; ``"fp32"`` keeps them as trained."""
    import onnx

    from edgenlp.export.segments import as_dynamic, to_onnx_segments, with_quantized_exits
    from edgenlp.quantize.api import quantize_model
    from edgenlp.quantize.config import QuantizeConfig
    from edgenlp.quantize.rounding import quantized_linears

    model, info = load_model(tiny_dynamic_dir)
    qmodel, qinfo = quantize_model(model, info, QuantizeConfig(scheme="int8"))
    dyn = as_dynamic(qmodel, qinfo, qinfo.recipe)
    lowered = with_quantized_exits(dyn, qmodel.quantization)
    assert set(quantized_linears(lowered.exit_heads)) == {f"{l}.{p}" for l in dyn.exit_heads for p in ("pooler", "classifier")}
    assert not quantized_linears(dyn.exit_heads)  # the trained heads are left as they were
    assert lowered.spec == dyn.spec and lowered.base is dyn.base
    x = torch.randn(3, 7, dyn.shape.hidden, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        for l in dyn.exit_heads:
            want, got = dyn.exit_heads[l](x), lowered.exit_heads[l](x)
            assert not torch.equal(want, got)  # really int8,
            assert torch.allclose(want, got, atol=0.05 * float(want.abs().max()) + 1e-4)  # within its rounding

    fp32 = quantize_model(model, info, QuantizeConfig(scheme="int8", exit_heads="fp32"))[0]
    assert with_quantized_exits(dyn, fp32.quantization) is dyn

    files, _ = to_onnx_segments(dyn.with_base(qmodel.quantization.source), max_seq_len=16, quant=qmodel.quantization)
    for k, segment in enumerate(dyn.segments()):
        ops = [n.op_type for n in onnx.load_from_string(files[f"model.seg{k}.onnx"]).graph.node]
        linears = sum(n.startswith(f"layers.{i}.") for n in qmodel.quantization.bits for i in segment.layer_indices)
        linears += 2 * segment.has_exit  # the exit head's, or the model's own pooler and classifier at the last layer
        assert ops.count("MatMulInteger") == linears, (k, ops.count("MatMulInteger"), linears)


@pytest.mark.slow
def test_quantized_base_lowers_to_one_delegate_call_per_segment(tiny_dynamic_dir, tmp_path):
    """int8 linears in every segment; the segment parity (gated inside export) passes at the quantized tolerance."""
    from edgenlp.bundle import Bundle
    from edgenlp.export.api import ExportConfig, export_bundle
    from edgenlp.quantize.api import quantize_model
    from edgenlp.quantize.config import QuantizeConfig

    model, info = load_model(tiny_dynamic_dir)
    qmodel, qinfo = quantize_model(model, info, QuantizeConfig(scheme="int8"))
    b = export_bundle(qmodel, qinfo, tmp_path / "q", config=ExportConfig(formats=("pte",), max_seq_len=16, buckets=(8, 16)))
    d = b.manifest["dynamic"]
    seg = [m for m in d["pte"]["methods"] if m["name"].startswith("seg")]
    assert all(m["delegate_calls"] == 1 and m["delegated_linears"].get("int8", 0) >= 4 for m in seg), seg
    # the exit heads are int8 too (QuantizeConfig.exit_heads): no segment keeps an fp32 linear
    assert all(set(m["delegated_linears"]) == {"int8"} for m in seg), seg
    kept = quantize_model(model, info, QuantizeConfig(scheme="int8", exit_heads="fp32"))
    f = export_bundle(*kept, tmp_path / "f", config=ExportConfig(formats=("pte",), max_seq_len=16, buckets=(16,)))
    early = [m for m in f.manifest["dynamic"]["pte"]["methods"] if m["name"].startswith("seg")][:-1]
    assert early and all(m["delegated_linears"].get("fp32") == 2 for m in early), early
    assert d["parity"]["executorch"]["passed"]
    assert Bundle.open(b.path).dynamic.spec == load_dynamic(tiny_dynamic_dir).spec


@pytest.mark.slow
def test_a_sharp_exit_head_is_gated_by_its_own_rounding_error(tiny_dynamic_dir, tmp_path):
    """An exit head 30x sharper than the final classifier carries 30x the activation-rounding error: the int8
    segments reproduce it, and the segment gate's limit is that head's own bound, not the final logits'."""
    import copy
    import shutil

    from edgenlp.dynamic.api import write_dynamic
    from edgenlp.export.api import ExportConfig, export_bundle
    from edgenlp.export.segments import as_dynamic, check_segment_parity, with_quantized_exits
    from edgenlp.models.tokenizer import build_tokenizer
    from edgenlp.quantize.api import quantize_model
    from edgenlp.quantize.config import QuantizeConfig
    from edgenlp.quantize.rounding import without_activation_rounding
    from edgenlp.recipe import parity_policy

    sharp = shutil.copytree(tiny_dynamic_dir, tmp_path / "sharp")
    dyn = load_dynamic(sharp)
    first = str(dyn.spec.exits[0])
    with torch.no_grad():
        dyn.exit_heads[first].classifier.weight.mul_(30.0)
    write_dynamic(sharp, dyn)
    model, info = load_model(sharp)
    qmodel, qinfo = quantize_model(model, info, QuantizeConfig(scheme="int8"))
    b = export_bundle(qmodel, qinfo, tmp_path / "q", config=ExportConfig(formats=("pte",), max_seq_len=16, buckets=(16,)))
    p = b.manifest["dynamic"]["parity"]["executorch"]
    static_tol = b.manifest["parity"]["executorch"]["tolerance"]
    assert p["passed"] and p["exit_bound"]["applied"] == "activation-rounding"
    assert p["tolerance"] == p["exit_bound"]["tolerance"] > static_tol
    assert p["exit_logits_rms_diff"] <= p["exit_bound"]["rms_limit"]

    # A lowering that moved that exit's logits (its bias, by twice the limit) still fails the gate.
    policy = parity_policy(qinfo.recipe)
    shifted = copy.deepcopy(policy.reference_model(with_quantized_exits(as_dynamic(qmodel, qinfo, qinfo.recipe),
                                                                        qmodel.quantization)))
    with torch.no_grad():
        shifted.exit_heads[first].classifier.bias[0] += 2 * p["tolerance"]
    got = check_segment_parity(b.path, shifted, formats=("pte",), texts=["a fine film", "dull"],
                               tokenizer=build_tokenizer(qinfo.vocab_file, qinfo.tokenizer), max_len=16,
                               tolerances={"executorch": static_tol}, policy=policy,
                               rounding_model=without_activation_rounding(shifted))["executorch"]
    assert not got["passed"] and got["exit_logits_max_abs_diff"] > got["tolerance"]


@pytest.mark.slow
def test_token_importance_is_gated_by_its_own_rounding_bound_and_a_wrong_head_mean_still_fails(tiny_dynamic_dir, tmp_path,
                                                                                               monkeypatch):
    """The int8 segments' importance (attention summed over the queries: it grows with the length, and a sharp softmax
    moves with its logits' rounding) is checked at its own activation-rounding bound, max and RMS, recorded in the
    manifest. A reference whose importance leaves one head out of the mean (the lowered segments average every head)
    fails that gate."""
    from edgenlp.dynamic import model as dyn_model
    from edgenlp.export.api import ExportConfig, export_bundle
    from edgenlp.export.segments import as_dynamic, check_segment_parity, with_quantized_exits
    from edgenlp.models.tokenizer import build_tokenizer
    from edgenlp.quantize.api import quantize_model
    from edgenlp.quantize.config import QuantizeConfig
    from edgenlp.quantize.rounding import without_activation_rounding
    from edgenlp.recipe import parity_policy

    model, info = load_model(tiny_dynamic_dir)
    assert load_dynamic(tiny_dynamic_dir).spec.token_layers
    qmodel, qinfo = quantize_model(model, info, QuantizeConfig(scheme="int8"))
    b = export_bundle(qmodel, qinfo, tmp_path / "q", config=ExportConfig(formats=("pte",), max_seq_len=16, buckets=(16,)))
    p = b.manifest["dynamic"]["parity"]["executorch"]
    ib = p["importance_bound"]
    assert p["passed"] and ib["terms"]["activation_rounding_error"] > 0 and ib["rms_limit"] > 0
    assert p["importance_max_abs_diff"] <= p["importance_tolerance"] and p["importance_rms_diff"] <= ib["rms_limit"]

    policy = parity_policy(qinfo.recipe)
    reference = policy.reference_model(with_quantized_exits(as_dynamic(qmodel, qinfo, qinfo.recipe), qmodel.quantization))
    args = dict(formats=("pte",), texts=["a fine film", "dull", "the plot is thin but the acting is good"],
                tokenizer=build_tokenizer(qinfo.vocab_file, qinfo.tokenizer), max_len=16,
                tolerances={"executorch": b.manifest["parity"]["executorch"]["tolerance"]}, policy=policy)
    assert check_segment_parity(b.path, reference, rounding_model=without_activation_rounding(reference),
                                **args)["executorch"]["passed"]

    right = dyn_model.weighted_importance

    def one_head_short(probs, weights):  # an off-by-one in the head mean: the first head left out
        return right(probs[:, 1:], weights)

    monkeypatch.setattr(dyn_model, "weighted_importance", one_head_short)
    got = check_segment_parity(b.path, reference, rounding_model=without_activation_rounding(reference), **args)
    got = got["executorch"]
    assert not got["passed"] and got["exit_logits_max_abs_diff"] <= got["tolerance"]
    assert (got["importance_max_abs_diff"] > got["importance_tolerance"]
            or got["importance_rms_diff"] > got["importance_bound"]["rms_limit"])


def test_token_scale_is_bisected_between_the_last_grid_scale_within_the_budget_and_the_first_past_it(monkeypatch):
    """Tokens fall with the scale and the accuracy breaks past 1.37: the grid alone stops at 1.25 (0.69x the FLOPs of
    1.0's) and 1.5 is past the budget; the bisections find the scale within 1/16 of a grid step below 1.37."""
    from types import SimpleNamespace

    from edgenlp.dynamic import api

    L, n, rows, breaks = 2, 100, 50, 1.37
    labels = np.zeros(rows, dtype=int)

    def fake_trace(dyn, val, *, pad_id, device, thresholds):
        scale = thresholds[0]
        kept = max(2.0, n * (1 - 0.5 * scale))  # tokens per layer: fewer as the scale grows
        wrong = 0 if scale <= breaks else rows // 5
        logits = np.zeros((rows, 2))
        logits[:, 0] = 1.0
        logits[:wrong, 1] = 2.0
        return SimpleNamespace(exit_logits={L: logits}, tokens=np.full((rows, L), kept))

    monkeypatch.setattr(api, "trace_split", fake_trace)
    monkeypatch.setattr(api, "layer_flops", lambda shape, tokens: tokens.astype(float))
    dyn = SimpleNamespace(spec=SimpleNamespace(token_thresholds=(1.0, None), num_layers=L), shape=None)
    static_right = np.ones(rows, dtype=bool)
    scale, curve = api._calibrate_token_scale(dyn, None, labels, static_right, float(n * L), 1.0, pad_id=0, device="cpu")
    assert 1.25 < scale <= breaks and breaks - scale <= 0.25 / 16, scale
    refined = [c for c in curve if c.get("refined")]
    assert len(refined) == 4 and all(1.25 < c["scale"] < 1.5 for c in refined)
    chosen = next(c for c in curve if c["scale"] == scale)
    assert chosen["drop"] <= 1.0 and chosen["cost"] == min(c["cost"] for c in curve if c["drop"] <= 1.0)


def test_token_scale_keeps_margin_se_standard_errors_to_spare(monkeypatch):
    """From scale 1.0 on, 2 of 100 rows go wrong: a drop of 2 points measured to +-1.4. Within a 3-point budget
    alone it fits (the scale reaches the break at 1.37); with one standard error to spare (3.4 > 3) it does not, and
    the scale stays below 1.0."""
    from types import SimpleNamespace

    from edgenlp.dynamic import api

    L, n, rows, breaks = 2, 100, 100, 1.37
    labels = np.zeros(rows, dtype=int)

    def fake_trace(dyn, val, *, pad_id, device, thresholds):
        scale = thresholds[0]
        wrong = 0 if scale < 1.0 else (2 if scale <= breaks else rows // 5)
        logits = np.zeros((rows, 2))
        logits[:, 0] = 1.0
        logits[:wrong, 1] = 2.0
        return SimpleNamespace(exit_logits={L: logits}, tokens=np.full((rows, L), max(2.0, n * (1 - 0.5 * scale))))

    monkeypatch.setattr(api, "trace_split", fake_trace)
    monkeypatch.setattr(api, "layer_flops", lambda shape, tokens: tokens.astype(float))
    dyn = SimpleNamespace(spec=SimpleNamespace(token_thresholds=(1.0, None), num_layers=L), shape=None)
    right = np.ones(rows, dtype=bool)
    bare, _ = api._calibrate_token_scale(dyn, None, labels, right, float(n * L), 3.0, pad_id=0, device="cpu")
    assert 1.25 < bare <= breaks
    scale, curve = api._calibrate_token_scale(dyn, None, labels, right, float(n * L), 3.0, margin_se=1.0, pad_id=0,
                                              device="cpu")
    assert 0.75 <= scale < 1.0, scale
    at_one = next(c for c in curve if c["scale"] == 1.0)
    assert at_one["drop"] == pytest.approx(2.0) and at_one["drop_se"] == pytest.approx(100 * np.sqrt(0.02 * 0.98 / rows))


def test_token_pruning_models_get_finer_default_buckets():
    """Exported without --buckets, a model that prunes tokens gets every max/8 from 64 (its re-padded lengths land
    between powers of two); exits alone and static models keep the powers of two; explicit buckets win."""
    from edgenlp.dynamic.model import DynamicModel, ExitHead
    from edgenlp.dynamic.spec import DynamicSpec
    from edgenlp.export.segments import default_buckets
    from edgenlp.models.encoder import EncoderClassifier, EncoderShape

    shape = EncoderShape(family="bert", vocab_size=100, hidden=32, heads=(2, 2), head_dim=16, ffn=(64, 64),
                         max_positions=512)
    model = EncoderClassifier(shape, 2, labels=("neg", "pos")).init_weights(std=0.2, seed=1).eval()
    ltp = DynamicModel(model, DynamicSpec(num_layers=2, exits=(1, 2), threshold=0.9, tokens="ltp", token_layers=(1,),
                                          token_thresholds=(0.1, None)), {1: ExitHead.like(model)})
    exits = DynamicModel(model, DynamicSpec(num_layers=2, exits=(1, 2), threshold=0.9), {1: ExitHead.like(model)})
    assert default_buckets(ltp, 128) == (16, 32, 64, 80, 96, 112, 128)
    assert default_buckets(ltp, 256) == (16, 32, 64, 96, 128, 160, 192, 224, 256)
    assert default_buckets(ltp, 64) == (16, 32, 64)
    assert default_buckets(exits, 128) == (16, 32, 64, 128)
    assert default_buckets(model, 128) == (16, 32, 64, 128)


def test_a_quantized_word_table_reaches_the_dynamic_onnx_files(tiny_dynamic_dir, tmp_path):
    """``embeddings`` int8 on a dynamic bundle: model.onnx and the embedding segment look words up in the int8 table,
    as a static bundle's model.onnx does (no fp32 copy of the table left), and the ONNX parity gates still pass."""
    import onnx

    from edgenlp.export.api import ExportConfig, export_bundle
    from edgenlp.export.segments import EMBED_ONNX
    from edgenlp.quantize.api import quantize_model
    from edgenlp.quantize.config import QuantizeConfig

    model, info = load_model(tiny_dynamic_dir)
    qmodel, qinfo = quantize_model(model, info, QuantizeConfig(scheme="int8", embeddings="int8"))
    b = export_bundle(qmodel, qinfo, tmp_path / "q", config=ExportConfig(formats=("onnx",), max_seq_len=16, buckets=(16,)))
    table = (qmodel.quantization.source.shape.vocab_size, qmodel.quantization.source.shape.hidden)
    for name in ("model.onnx", EMBED_ONNX):
        kinds = {t.data_type for t in onnx.load(str(b.path / name)).graph.initializer if tuple(t.dims) == table}
        assert kinds == {onnx.TensorProto.INT8}, (name, kinds)
    assert b.manifest["parity"]["onnx"]["passed"] and b.manifest["dynamic"]["parity"]["onnx"]["passed"]
