"""Surgery is exact: the pruned model computes what the masked model computes."""

from __future__ import annotations

import json
import random

import pytest
import torch

from edgenlp_testing import tiny_model
from edgenlp.prune.masks import Gates, LayerMask, MaskDict, MaskError, masked_forward, shape_summary
from edgenlp.prune.surgery import apply_masks


def random_masks(shape, seed: int, *, hidden: bool, empty_heads: int | None = None, empty_ffn: int | None = None,
                 sublayer_off: bool = False) -> MaskDict:
    r = random.Random(seed)
    layers = []
    for i, (h, f) in enumerate(zip(shape.heads, shape.ffn)):
        heads = () if i == empty_heads else tuple(sorted(r.sample(range(h), r.randint(1, h))))
        neurons = () if i == empty_ffn else tuple(sorted(r.sample(range(f), r.randint(1, f))))
        attn = not (sublayer_off and i == 0)  # a dropped sublayer whose heads are still listed
        ffn = not (sublayer_off and i == shape.num_layers - 1)
        layers.append(LayerMask(heads, neurons, attention=attn, ffn=ffn))
    kept = tuple(sorted(r.sample(range(shape.hidden), shape.hidden // 2 + 3))) if hidden else None
    return MaskDict(tuple(layers), shape_summary(shape), kept, "test")


def batch(seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, 1000, (3, 11), generator=gen)
    mask = torch.ones_like(ids)
    mask[1, 7:] = 0
    mask[2, 4:] = 0
    return ids, mask


CASES = [
    dict(hidden=False),
    dict(hidden=True),
    dict(hidden=False, empty_heads=0),
    dict(hidden=True, empty_heads=1, empty_ffn=2),
    dict(hidden=True, empty_ffn=0, sublayer_off=True),
    dict(hidden=False, empty_heads=2, empty_ffn=2),
]


SMALL_VOCAB = dict(vocab_size=1000)  # surgery does not care about the vocabulary; small models build fast


@pytest.mark.parametrize("family", ["bert", "distilbert"])
@pytest.mark.parametrize("case", range(len(CASES)))
def test_pruned_logits_equal_masked_logits(family, case):
    seed = case
    model, _ = tiny_model(family=family, num_layers=3, seed=seed, **SMALL_VOCAB)
    masks = random_masks(model.shape, seed, **CASES[case])
    pruned = apply_masks(model, masks)
    assert pruned.shape == masks.pruned_shape(model.shape)
    assert pruned.param_count() < model.param_count()
    ids, mask = batch(seed)
    with torch.no_grad():
        want = masked_forward(model, ids, mask, Gates.from_masks(masks, model.shape))
        got = pruned(ids, mask)
    assert (got - want).abs().max().item() < 1e-5, CASES[case]


def test_uneven_shapes_come_out_of_the_masks():
    model, _ = tiny_model(num_layers=3, **SMALL_VOCAB)
    masks = random_masks(model.shape, 3, hidden=True, empty_heads=1, empty_ffn=2)
    s = apply_masks(model, masks).shape
    assert s.heads[1] == 0 and s.ffn[2] == 0
    assert s.hidden == len(masks.hidden) and s.pooler == model.shape.hidden


def test_full_masks_are_the_identity():
    model, _ = tiny_model(**SMALL_VOCAB)
    masks = MaskDict.full(model.shape)
    pruned = apply_masks(model, masks)
    ids, mask = batch()
    with torch.no_grad():
        assert torch.equal(pruned(ids, mask), model(ids, mask))
        assert torch.allclose(masked_forward(model, ids, mask, Gates.ones(model.shape, hidden=True)), model(ids, mask),
                              atol=1e-5)


def test_a_pruned_model_saves_and_loads_losslessly(tmp_path):
    from edgenlp.models.registry import load_model, save_pretrained

    model, info = tiny_model(num_layers=3, **SMALL_VOCAB)
    masks = random_masks(model.shape, 5, hidden=True, empty_heads=0, empty_ffn=1)
    pruned = apply_masks(model, masks)
    from dataclasses import replace

    save_pretrained(pruned, replace(info, shape=pruned.shape), tmp_path / "m")
    again, again_info = load_model(tmp_path / "m")
    assert again_info.shape == pruned.shape
    ids, mask = batch()
    with torch.no_grad():
        assert torch.equal(again(ids, mask), pruned(ids, mask))


def test_mask_dict_round_trips_through_json(tmp_path):
    model, _ = tiny_model(num_layers=3, **SMALL_VOCAB)
    masks = random_masks(model.shape, 2, hidden=True, empty_heads=0, sublayer_off=True)
    again = MaskDict.from_dict(json.loads(json.dumps(masks.to_dict())))
    assert again == masks
    masks.save(tmp_path / "masks.json")
    assert MaskDict.load(tmp_path / "masks.json") == masks


@pytest.mark.parametrize("edit, message", [
    (lambda d: d["model"].update(hidden=32), "made for a model"),
    (lambda d: d["layers"][0]["heads"].append(99), "out of range"),
    (lambda d: d["layers"][1]["neurons"].extend([3, 3]), "repeated"),
    (lambda d: d.update(hidden=[]), "no hidden"),
    (lambda d: d.update(model={}, layers=d["layers"][:1]), "layers, the model has"),
])
def test_masks_that_do_not_fit_are_refused(edit, message):
    model, _ = tiny_model(num_layers=3, **SMALL_VOCAB)
    d = MaskDict.full(model.shape).to_dict()
    d["layers"][1]["neurons"] = [0, 1, 2]
    edit(d)
    with pytest.raises(MaskError, match=message):
        apply_masks(model, MaskDict.from_dict(d))


@pytest.mark.parametrize("case", [1, 3, 4])
def test_folding_soft_gates_then_surgery_equals_the_soft_masked_model(case):
    """CoFi keeps the learned gate values of the kept units: folded into the weights, surgery stays exact."""
    import copy

    from edgenlp.prune.masks import fold_gates

    model, _ = tiny_model(num_layers=3, seed=case, **SMALL_VOCAB)
    masks = random_masks(model.shape, case, **CASES[case])
    gates = Gates.from_masks(masks, model.shape)
    gen = torch.Generator().manual_seed(case)
    for t in (*gates.head, *gates.neuron, gates.attn, gates.ffn, gates.hidden):
        t.mul_(0.2 + 0.8 * torch.rand(t.shape, generator=gen))  # soft values where kept, 0 where removed
    ids, mask = batch(case)
    with torch.no_grad():
        want = masked_forward(model, ids, mask, gates)
        got = apply_masks(fold_gates(copy.deepcopy(model), gates), masks)(ids, mask)
    assert (got - want).abs().max().item() < 1e-5


def test_size_measures_match_the_profiler_closed_forms_for_bert_base():
    """The sparsity measures count what the profiler counts (bert-base, seq 128: README's profile table)."""
    from edgenlp.models.encoder import EncoderShape
    from edgenlp.prune.masks import encoder_flops, encoder_params

    s = EncoderShape.uniform(num_layers=12, hidden=768, num_heads=12, ffn=3072)
    qkv, out, ffn, norms = 21_261_312, 7_087_104, 56_669_184, 12 * 2 * 2 * 768
    assert encoder_params(s.hidden, s.head_dim, s.heads, s.ffn) == qkv + out + ffn + norms
    assert encoder_flops(s.hidden, s.head_dim, s.heads, s.ffn, seq_len=128) == 22_347_251_712
    # one head less in one layer removes its Q/K/V/out slices, its attention FLOPs and nothing else
    heads = (11,) + s.heads[1:]
    assert encoder_params(s.hidden, s.head_dim, s.heads, s.ffn) - encoder_params(s.hidden, s.head_dim, heads, s.ffn) \
        == 4 * 768 * 64 + 3 * 64
