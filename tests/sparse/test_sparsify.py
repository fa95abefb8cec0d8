"""The ``sparsify`` step (block GMP under distillation) and a block-sparse bundle through every runtime."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from edgenlp_testing import synthetic_sentiment, tiny_model
from edgenlp.prune.config import SparsifyConfig
from edgenlp.prune.sparsity import (apply_block_masks, block_masks, encoder_linears, gmp_sparsity, measured_sparsity,
                                    sparsify)
from edgenlp.recipe import recipe_from_list, recipe_to_list
from edgenlp.run.executorch import ops_library_path
from edgenlp.sparse.convert import SparsePlan, sparse_plan, to_sparse_ops
from edgenlp.sparse.ops import SparseLinear, SparseLinearQD8


@pytest.mark.parametrize("bad", [dict(sparsity=0.0), dict(sparsity=1.0), dict(block="2x2"), dict(prune_fraction=0.0),
                                 dict(mask_updates=0)])
def test_config_refuses_bad_values(bad):
    with pytest.raises(ValueError):
        SparsifyConfig(**bad)


def test_gmp_schedule_rises_to_the_target_and_stays():
    vals = [gmp_sparsity(s, 100, 0.8, 0.7) for s in range(101)]
    assert vals[0] == 0.0 and all(b >= a for a, b in zip(vals, vals[1:]))
    assert vals[70] == pytest.approx(0.8) and vals[100] == pytest.approx(0.8) and vals[35] < 0.8


@pytest.mark.parametrize("block", ["1x4", "1x8", "4x1"])
def test_masks_zero_the_smallest_blocks_of_every_encoder_linear(block):
    model, _ = tiny_model()
    masks = block_masks(model, 0.75, block)
    assert sorted(masks) == sorted(encoder_linears(model)) and "classifier" not in masks
    before = {n: m.weight.detach().clone() for n, m in model.named_modules() if n in masks}
    apply_block_masks(model, masks)
    for name, sp in measured_sparsity(model, block).items():
        assert sp >= 0.75 - 1e-6, (name, sp)
        w = dict(model.named_modules())[name].weight.detach()
        kept, dropped = before[name][masks[name]], before[name][~masks[name]]
        assert torch.equal(w[masks[name]], kept) and not w[~masks[name]].any()
        # the blocks kept have larger norms than the ones dropped
        assert kept.abs().mean() > dropped.abs().mean()


@pytest.fixture(scope="module")
def task(tmp_path_factory):
    from edgenlp.data.tasks import load_task

    return load_task(synthetic_sentiment(tmp_path_factory.mktemp("sparse-task"), rows=48))


@pytest.fixture(scope="module")
def sparse_result(task):
    model, info = tiny_model(labels=tuple(task.labels), num_layers=1)
    cfg = SparsifyConfig(sparsity=0.8, block="1x4", epochs=1.0, max_steps=6, batch_size=8, max_seq_len=32, mask_updates=3,
                         threads=1)
    return model, sparsify(model, info, task, cfg, device="cpu")


def test_sparsify_reaches_its_sparsity_and_records_the_step(sparse_result, tmp_path):
    dense, res = sparse_result
    assert res.report["mean_sparsity"] >= 0.8 - 1e-3
    assert all(sp >= 0.8 - 1e-3 for sp in res.report["linears"].values())
    assert [u["sparsity"] for u in res.report["mask_updates"]] == sorted(u["sparsity"] for u in res.report["mask_updates"])
    step = res.info.recipe[-1]
    assert step.type == "sparsify" and step.config.block == "1x4" and step.result["linears"] == sorted(res.report["linears"])
    assert recipe_from_list(recipe_to_list(res.info.recipe))[-1] == step
    assert sparse_plan(res.info.recipe) == SparsePlan("1x4", tuple(sorted(res.report["linears"])))
    # the dense model is untouched, the head is dense
    assert measured_sparsity(dense, "1x4")["layers.0.ffn_in"] < 0.1
    assert (res.model.classifier.weight != 0).all()
    out = res.save(tmp_path / "m")
    assert json.loads((out / "sparsify.json").read_text())["block"] == "1x4"


def test_sparse_ops_model_equals_the_masked_model(sparse_result):
    """pruned == masked: the ops on packed blocks compute what the dense model with zeros computes."""
    from edgenlp.export.graph import example_inputs
    from edgenlp.quantize.api import quantize_model
    from edgenlp.quantize.config import QuantizeConfig

    _, res = sparse_result
    plan = sparse_plan(res.info.recipe)
    ids, mask = example_inputs(16, vocab_size=res.model.shape.vocab_size)
    ops_model, report = to_sparse_ops(res.model, plan)
    assert all(r["op"] == "edgenlp::sparse_linear" for r in report.values())
    assert sum(isinstance(m, SparseLinear) for m in ops_model.modules()) == len(plan.linears)
    with torch.no_grad():
        torch.testing.assert_close(ops_model(ids, mask), res.model(ids, mask), atol=1e-5, rtol=1e-5)
    qmodel, _ = quantize_model(res.model, res.info, QuantizeConfig(scheme="int8"))
    qops, qreport = to_sparse_ops(qmodel, plan)
    assert all(r["op"] == "edgenlp::sparse_linear_qd8" for r in qreport.values())
    assert sum(isinstance(m, SparseLinearQD8) for m in qops.modules()) == len(plan.linears)
    with torch.no_grad():
        want, got = qmodel(ids, mask), qops(ids, mask)
    assert float((got - want).abs().max()) < 0.05 * max(1.0, float(want.abs().max()))
    # below the sparsity where the kernel pays, a linear stays dense
    _, dense_report = to_sparse_ops(res.model, plan, min_sparsity={"fp32": 0.95})
    assert all(r["op"] is None and "0.95" in r["reason"] for r in dense_report.values())


@pytest.mark.native
@pytest.mark.skipif(not ops_library_path().is_file(), reason="libedgenlp_ops.so not built (bash runtime/build.sh)")
@pytest.mark.parametrize("precision", ["fp32", "int8"])
def test_sparse_bundle_runs_the_ops_in_executorch_and_natively_and_dense_in_onnx(sparse_bundles, dyn_task_dir, precision):
    """The session's sparse bundles (edgenlp_testing.session_sparse_bundles: query and FFN linears at 80% of 1x4)."""
    from edgenlp.bundle import Bundle
    from edgenlp.data.tasks import load_task
    from edgenlp.run.base import get_runner

    out = sparse_bundles[precision]
    b = Bundle.open(out)
    sparse = b.manifest["sparse"]
    op = {"fp32": "edgenlp::sparse_linear", "int8": "edgenlp::sparse_linear_qd8"}[precision]
    assert sparse["ops"] == [op] and sparse["ops_library"] == "libedgenlp_ops.so"
    assert sorted(n for n, r in sparse["linears"].items() if r["op"]) == ["layers.0.ffn_in", "layers.0.ffn_out",
                                                                          "layers.0.query"]
    assert all(r["sparsity"] >= 0.8 - 1e-3 and r["precision"] == precision for r in sparse["linears"].values())
    assert "dense" in sparse["onnx"]
    (method,) = b.manifest["artifacts"]["pte"]["methods"]
    assert method["non_delegated_ops"].get(op.replace("::", ".") + ".default") == 3
    if precision == "int8":  # the other linears are XNNPACK's quantized GEMMs
        assert method["delegated_linears"].get("int8") == 3 + 2  # key, value, attn_out + pooler, classifier
    assert all(p["passed"] for p in b.manifest["parity"].values())
    texts = list(load_task(dyn_task_dir).dev.texts[:6])
    logits = {}
    for rt in ("executorch", "onnx", "native"):
        with get_runner(out, runtime=rt) as r:
            logits[rt] = r.predict_logits(texts)
    np.testing.assert_allclose(logits["native"], logits["executorch"], atol=1e-5)
    if precision == "fp32":
        np.testing.assert_allclose(logits["onnx"], logits["executorch"], atol=1e-4)


@pytest.mark.parametrize("precision", ["fp32", "int8"])
def test_profiler_counts_the_kept_blocks_of_sparse_linears(sparse_bundles, precision):
    """The analytic rows count what the sparse ops compute and store; every other linear counts as before."""
    from edgenlp.bundle import Bundle
    from edgenlp.profile.analytic import analyze
    from edgenlp.profile.api import _bundle_model

    b = Bundle.open(sparse_bundles[precision])
    sparse = b.manifest["sparse"]["linears"]
    model = _bundle_model(b)
    del b.manifest["sparse"]
    dense_model = _bundle_model(b)  # the same bundle read as if every linear were dense
    got, want = analyze(model, seq_len=16), analyze(dense_model, seq_len=16)
    modules = dict(model.named_modules())
    saved_flops = saved_params = 0
    for name, rec in sparse.items():
        if not rec["op"]:
            continue
        m = modules[name]
        saved_flops += round(2 * 16 * m.in_features * m.out_features * rec["sparsity"])
        saved_params += round(m.weight.numel() * rec["sparsity"])
    assert want.total.flops - got.total.flops == pytest.approx(saved_flops, abs=len(sparse))
    assert want.total.params - got.total.params == pytest.approx(saved_params, abs=len(sparse))
    ffn = got.layers[0]["ffn"]  # ffn_in and ffn_out, both sparse: their packed arrays
    assert ffn.formats == {"sparse-" + precision}
    assert ffn.weight_bytes == sparse["layers.0.ffn_in"]["packed_bytes"] + sparse["layers.0.ffn_out"]["packed_bytes"]
