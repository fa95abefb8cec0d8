"""A pruned tiny model (zero-head layer, zero-width FFN, pruned hidden dims) exports and runs everywhere."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch

from edgenlp.prune.masks import LayerMask, MaskDict, shape_summary
from edgenlp.prune.surgery import apply_masks


@pytest.fixture(scope="module")
def pruned_bundle(tmp_path_factory, tiny_task_dir, make_finetuned):
    from edgenlp.data.tasks import load_task
    from edgenlp.export.api import ExportConfig, export_bundle
    from edgenlp.prune.config import FastConfig
    from edgenlp.recipe import Step

    model, info = make_finetuned(num_layers=3)
    layers = (LayerMask((), tuple(range(0, 128, 3))),  # no heads: attention skipped
              LayerMask((1, 2), ()),  # no FFN
              LayerMask((0, 3), tuple(range(40)), attention=True, ffn=True))
    masks = MaskDict(layers, shape_summary(model.shape), tuple(range(0, 64, 2)) + (1, 3, 5), "test")
    pruned = apply_masks(model, masks).eval()
    info = replace(info, shape=pruned.shape)
    data = load_task(tiny_task_dir)
    out = tmp_path_factory.mktemp("pruned-bundles") / "b"
    step = Step("prune", FastConfig(target_sparsity=0.5), {})
    bundle = export_bundle(pruned, replace(info, recipe=(*info.recipe, step)), out, task=data,
                           config=ExportConfig(max_seq_len=32, buckets=(32,)))
    return pruned, bundle, data


def test_pruned_model_exports_to_pte_and_onnx_with_parity(pruned_bundle):
    pruned, bundle, _ = pruned_bundle
    manifest = bundle.manifest
    assert set(manifest["parity"]) == {"executorch", "onnx"}, sorted(manifest["parity"])  # both formats checked
    assert all(p["passed"] for p in manifest["parity"].values()), manifest["parity"]
    assert manifest["model"]["shape"]["heads"] == [0, 2, 2] and manifest["model"]["shape"]["ffn"][1] == 0
    assert [s["step"] for s in manifest["applied"]] == ["finetune", "prune", "export"]


@pytest.mark.native
def test_pruned_bundle_runs_through_the_native_runtime(pruned_bundle):
    from edgenlp.run.base import get_runner
    from edgenlp.run.native import library_path

    if not library_path().is_file():
        pytest.skip("native runtime not built (bash runtime/build.sh)")
    pruned, bundle, data = pruned_bundle
    texts = list(data.dev.texts)
    with get_runner(bundle.path, runtime="native", threads=1) as native, \
            get_runner(bundle.path, runtime="executorch", threads=1) as et:
        got, ref = native.predict_logits(texts), et.predict_logits(texts)
    assert np.abs(got - ref).max() < 1e-4
