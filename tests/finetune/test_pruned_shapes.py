"""Every fine-tuning method and the export graph work on pruned (uneven, partly empty) layers."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from edgenlp.finetune import FarConfig, FinetuneConfig, LearnerConfig, finetune
from edgenlp.finetune import far
from edgenlp.finetune.learner import add_learners, merge_and_unload
from edgenlp.models.encoder import EncoderClassifier, EncoderShape, ModelInfo

# layer 0: no attention heads; layer 1: no FFN neurons; layer 2: both present
SHAPE = EncoderShape(family="bert", vocab_size=30522, hidden=48, heads=(0, 2, 3), head_dim=16, ffn=(32, 0, 24), max_positions=64)


def pruned_model():
    from edgenlp.models.registry import DEFAULT_TOKENIZER, default_vocab_file

    model = EncoderClassifier(SHAPE, 2, labels=("neg", "pos")).init_weights(std=0.05, seed=3)
    return model, ModelInfo("pruned", "test", SHAPE, False, str(default_vocab_file()), dict(DEFAULT_TOKENIZER))


@pytest.mark.parametrize(
    "config",
    [
        FinetuneConfig(method="full"),
        FinetuneConfig(method="bitfit"),
        FinetuneConfig(method="freeze-ffn"),
        FinetuneConfig(method="learner", learner=LearnerConfig(rank=4, priming_steps=2)),
        FinetuneConfig(method="learner", learner=LearnerConfig(rank="auto", priming_steps=2)),
        FinetuneConfig(method="far", far=FarConfig(keep=0.25)),
    ],
    ids=["full", "bitfit", "freeze-ffn", "learner", "learner-rank-auto", "far"],
)
def test_methods_train_a_model_with_empty_sublayers(synth_task, config):
    model, info = pruned_model()
    config = FinetuneConfig.from_dict({**config.to_dict(), "epochs": 1, "max_steps": 6, "batch_size": 16})
    result = finetune(model, info, synth_task, config, show_progress=False)
    out = result.model
    assert out.shape == SHAPE
    assert all(type(m) in (nn.Linear,) for layer in out.layers for m in (layer.query, layer.ffn_in, layer.ffn_out))
    assert [l.query.out_features for l in out.layers] == [0, 32, 48] and [l.ffn_in.out_features for l in out.layers] == [32, 0, 24]
    ids = torch.randint(1000, 2000, (2, 7))
    with torch.no_grad():
        assert torch.isfinite(out(ids, torch.ones_like(ids))).all()


def test_learners_skip_zero_width_linears_and_merge_exactly():
    model, _ = pruned_model()
    model.eval()
    paths = {f"layers.{i}.{p}": 4 for i in range(3) for p in ("query", "attn_out", "ffn_in", "ffn_out")}
    added = add_learners(model, paths, seed=0)
    assert "layers.0.query" not in added and "layers.1.ffn_in" not in added  # 0 outputs / 0 neurons
    assert "layers.1.ffn_out" not in added and "layers.0.attn_out" not in added  # 0 inputs
    assert "layers.2.query" in added
    with torch.no_grad():
        for layer in added.values():
            layer.learner_p2.normal_(0, 0.1)
        ids = torch.randint(1000, 2000, (2, 9))
        mask = torch.ones_like(ids)
        unmerged = model(ids, mask)
        merge_and_unload(model)
        assert (model(ids, mask) - unmerged).abs().max().item() <= 1e-5


@pytest.mark.parametrize("keep", [[], [0, 5], list(range(24))])
def test_far_split_of_any_width_equals_the_layer(keep):
    model, _ = pruned_model()
    model.eval()
    ids = torch.randint(1000, 2000, (2, 9))
    mask = torch.ones_like(ids)
    with torch.no_grad():
        ref = model(ids, mask)
        far.reconfigure(model.layers[2], torch.tensor(keep, dtype=torch.long))
        far.reconfigure(model.layers[1], torch.zeros(0, dtype=torch.long))  # zero-width FFN
        torch.testing.assert_close(model(ids, mask), ref, rtol=0, atol=1e-5)
        for layer in model.layers:
            far.fold_back(layer)
        assert torch.equal(model(ids, mask), ref)


def test_graph_preparation_works_on_any_layer_class():
    """Layer norms are replaced as modules, so subclasses and foreign containers are handled too."""
    from edgenlp.export.graph import DecomposedLayerNorm, prepare

    class Wrapped(nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner, self.norm = inner, nn.LayerNorm(48, eps=1e-6)

        def forward(self, x, bias):
            return self.norm(self.inner(x, bias))

    model, _ = pruned_model()
    model.layers[2] = Wrapped(model.layers[2])
    with torch.no_grad():
        model.layers[2].norm.weight.uniform_(0.5, 1.5)
    model.eval()
    prepared = prepare(model)
    norms = [m for m in prepared.modules() if isinstance(m, nn.LayerNorm)]
    assert len(norms) == 1 + 2 * 3 + 1 and all(isinstance(m, DecomposedLayerNorm) for m in norms)
    ids = torch.randint(1000, 2000, (2, 9))
    mask = torch.ones_like(ids)
    with torch.no_grad():
        assert (prepared(ids, mask) - model(ids, mask)).abs().max().item() < 1e-5
