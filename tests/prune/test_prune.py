"""The methods end to end on a tiny model, the Lagrangian, the recipe step, and the CLI's errors."""

from __future__ import annotations

import json

import pytest
import torch
from click.testing import CliRunner

from edgenlp.cli import main
from edgenlp.data.tasks import load_task
from edgenlp.prune import CofiConfig, FastConfig, MaskDict, apply_masks, prune, prune_config


@pytest.fixture(scope="module")
def task(tiny_task_dir):
    return load_task(tiny_task_dir)


QUICK = dict(batch_size=2, finetune_epochs=1)
OWN = {"cofi": dict(epochs=2), "fast": dict(samples=8), "importance": dict(samples=8, iterations=2)}  # each method's own


def quick_config(method, **kw):
    return prune_config(method, **{**QUICK, **OWN[method], **kw})


@pytest.mark.parametrize("method, target", [("fast", "params"), ("importance", "params"), ("cofi", "params"),
                                            pytest.param("fast", "flops", marks=pytest.mark.slow),
                                            pytest.param("cofi", "flops", marks=pytest.mark.slow)])
def test_each_method_reaches_the_target_with_an_exact_smaller_model(method, target, task, tmp_path, make_finetuned):
    from edgenlp.models.registry import load_model

    model, info = make_finetuned(num_layers=3)
    quick = {**QUICK, "finetune_epochs": 0} if method == "importance" else QUICK  # importance: weights untouched
    cfg = quick_config(method, target_sparsity=0.5, target=target, seq_len=32, **quick)
    res = prune(model, info, task, cfg, progress=False)
    measure = "encoder_params" if target == "params" else "flops"
    assert res.report["achieved"][measure] >= 0.5 - 1e-9
    assert res.report["achieved"][measure] < 0.75  # reached, not overshot by much
    assert res.model.param_count() < model.param_count()
    assert res.info.recipe[-1].type == "prune" and res.info.recipe[-1].config == cfg
    out = res.save(tmp_path / "p")
    report = json.loads((out / "prune.json").read_text())
    assert report["shape"]["heads"] == list(res.model.shape.heads)
    # the saved masks rebuild the same structure; the saved directory is an ordinary model directory
    masks = MaskDict.load(out / "masks.json")
    assert masks.pruned_shape(model.shape).heads == res.model.shape.heads
    again, again_info = load_model(out)
    assert [s.type for s in again_info.recipe] == ["finetune", "prune"]
    ids = torch.randint(1, 1000, (2, 9))
    with torch.no_grad():
        assert torch.equal(again(ids, torch.ones_like(ids)), res.model(ids, torch.ones_like(ids)))
    if method == "importance":  # no weight changes: the pruned model is surgery of the original
        with torch.no_grad():
            direct = apply_masks(model, masks)
            assert torch.allclose(direct(ids, torch.ones_like(ids)), res.model(ids, torch.ones_like(ids)), atol=1e-5)


@pytest.mark.parametrize("method", ["fast", "cofi"])
def test_target_zero_is_the_identity(method, task, make_finetuned):
    model, info = make_finetuned()
    res = prune(model, info, task, quick_config(method, target_sparsity=0.0), progress=False)
    assert res.model.shape == model.shape
    ids = torch.randint(1, 1000, (2, 9))
    with torch.no_grad():
        assert torch.equal(res.model(ids, torch.ones_like(ids)), model(ids, torch.ones_like(ids)))
    assert res.report["achieved"]["encoder_params"] == 0.0


def test_lagrangian_moves_expected_sparsity_towards_the_target(make_finetuned):
    from edgenlp.prune.cofi import CofiGates, Lagrangian
    from edgenlp.prune.common import shape_size

    model, _ = make_finetuned()
    cfg = CofiConfig(target_sparsity=0.6)
    gates, lag = CofiGates(model.shape, droprate_init=0.1, hidden=True), Lagrangian()
    opt = torch.optim.AdamW([{"params": list(gates.parameters()), "lr": 0.05},
                             {"params": list(lag.parameters()), "lr": 0.05}], weight_decay=0.0)
    full = shape_size(model.shape, cfg)

    def expected():
        return 1.0 - gates.expected_size(cfg) / full

    start = float(expected())
    for _ in range(30):
        lag(expected(), cfg.target_sparsity).backward()
        lag.ascend()
        opt.step()
        opt.zero_grad()
    end = float(expected())
    assert start < 0.3 and abs(end - 0.6) < abs(start - 0.6) - 0.1, (start, end)
    assert float(lag.l1) < 0  # ascent: the multiplier grows against the gap (expected < target)


@pytest.mark.slow
def test_cofi_trace_moves_toward_the_target(task, make_finetuned):
    model, info = make_finetuned()
    cfg = CofiConfig(target_sparsity=0.5, batch_size=2, epochs=20, finetune_epochs=0, mask_lr=0.1, lagrangian_lr=0.1,
                     target_warmup=0.2)
    trace = prune(model, info, task, cfg, progress=False).report["details"]["trace"]
    assert trace[-1]["expected_sparsity"] > trace[0]["expected_sparsity"] + 0.02, trace
    assert trace[-1]["lambda1"] < 0 < trace[-1]["lambda2"]


def test_a_model_not_finetuned_for_the_task_is_refused(task, make_finetuned):
    from edgenlp.errors import EdgeNLPError
    from edgenlp_testing import tiny_model

    model, info = tiny_model()  # no finetune step
    with pytest.raises(EdgeNLPError, match="no finetune step"):
        prune(model, info, task, FastConfig(), progress=False)
    model, info = make_finetuned(labels=("a", "b", "c"))
    with pytest.raises(EdgeNLPError, match="labels"):
        prune(model, info, task, FastConfig(), progress=False)


def test_prune_dispatches_on_the_config_type(task, make_finetuned):
    """A method is a PruneConfig subclass plus a registered learn(); no method name is consulted."""
    from dataclasses import dataclass
    from typing import ClassVar

    from edgenlp.prune.api import PRUNE_METHODS, register_prune_method
    from edgenlp.prune.config import PruneConfig

    @dataclass(frozen=True)
    class DropLastLayerFfnConfig(PruneConfig):
        method: ClassVar[str] = "drop-last-ffn-test"

    @dataclass(frozen=True)
    class UnregisteredConfig(PruneConfig):
        method: ClassVar[str] = "unregistered-test"

    calls = []

    def learn(model, data, config, *, teacher, progress):
        calls.append((type(config), teacher is not None))
        full = MaskDict.full(model.shape, method=config.method)
        last = full.layers[-1]
        masks = MaskDict((*full.layers[:-1], type(last)(last.heads, ())), full.model, full.hidden, config.method)
        return masks, apply_masks(model, masks), {"called": True}

    model, info = make_finetuned()
    register_prune_method(DropLastLayerFfnConfig, learn)
    try:
        res = prune(model, info, task, DropLastLayerFfnConfig(target_sparsity=0.2), progress=False)
    finally:
        PRUNE_METHODS.pop(DropLastLayerFfnConfig)
    assert calls == [(DropLastLayerFfnConfig, True)]
    assert res.report["details"] == {"called": True} and res.report["method"] == "drop-last-ffn-test"
    assert res.model.shape.ffn[-1] == 0 and res.model.shape.ffn[0] == model.shape.ffn[0]
    assert res.info.recipe[-1].config == DropLastLayerFfnConfig(target_sparsity=0.2)
    with pytest.raises(TypeError, match="no pruning method is registered for UnregisteredConfig"):
        prune(model, info, task, UnregisteredConfig(), progress=False)
    with pytest.raises(TypeError, match="shared base"):
        PruneConfig()


def test_a_method_config_takes_only_its_own_settings():
    assert type(prune_config("cofi", epochs=1.0)) is CofiConfig
    with pytest.raises(ValueError, match="samples is not a setting of method 'cofi' \\(only of fast, importance\\)"):
        prune_config("cofi", samples=8)
    with pytest.raises(ValueError, match="method must be one of cofi, fast, importance"):
        prune_config("magic")


# --------------------------------------------------------------------------- CLI


def _run(*args):
    return CliRunner().invoke(main, ["prune", *map(str, args)])


def test_cli_prunes_and_writes_prune_json(finetuned_tiny_dir, tiny_task_dir, tmp_path):
    res = _run(finetuned_tiny_dir, "--task", tiny_task_dir, "--method", "fast", "--target-sparsity", "0.4",
               "--samples", "4", "--batch-size", "2", "--out", tmp_path / "o", "--json", tmp_path / "r.json", "-q")
    assert res.exit_code == 0, res.output
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["achieved"]["encoder_params"] >= 0.4 and report["method"] == "fast"
    assert (tmp_path / "o" / "prune.json").is_file() and (tmp_path / "o" / "masks.json").is_file()
    # re-applying the written masks reproduces the structure
    res = _run(finetuned_tiny_dir, "--task", tiny_task_dir, "--masks", tmp_path / "o" / "masks.json",
               "--out", tmp_path / "again", "-q")
    assert res.exit_code == 0, res.output
    again = json.loads((tmp_path / "again" / "prune.json").read_text())
    assert again["shape"] == report["shape"]


@pytest.mark.parametrize("args, message", [
    (["--target-sparsity", "1.0"], "target_sparsity must be in [0, 1)"),
    (["--target-sparsity", "1.5"], "target_sparsity must be in [0, 1)"),
    (["--target-sparsity", "-0.1"], "target_sparsity must be in [0, 1)"),
    (["--masks", "BADMASKS"], "masks were made for a model"),
    (["--task", "LABELS3"], "labels"),
    (["MODEL_NOT_FINETUNED"], "no finetune step"),
])
def test_cli_errors_are_one_line_and_write_nothing(args, message, finetuned_tiny_dir, tiny_task_dir, tmp_path):
    from edgenlp.models.registry import save_pretrained
    from edgenlp_testing import tiny_model, write_task_dir

    model_dir, task = finetuned_tiny_dir, tiny_task_dir
    if "BADMASKS" in args:
        other, _ = tiny_model(num_layers=2)
        MaskDict.full(other.shape).save(tmp_path / "bad.json")
        args = ["--masks", tmp_path / "bad.json"]
    if "LABELS3" in args:
        (tmp_path / "t3").mkdir()
        rows = [("x", "a"), ("y", "b"), ("z", "c")]
        task = write_task_dir(tmp_path / "t3", train=rows, dev=rows)
        args = []
    if "MODEL_NOT_FINETUNED" in args:
        m, i = tiny_model()
        model_dir = save_pretrained(m, i, tmp_path / "plain")
        args = []
    res = _run(model_dir, "--task", task, *args, "--samples", "4", "--out", tmp_path / "out", "-q")
    assert res.exit_code == 2, res.output
    lines = [l for l in res.output.splitlines() if l.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and message in lines[0], res.output
    assert not (tmp_path / "out").exists()


def test_fit_to_budget_trims_above_and_fills_below_by_score_per_size():
    from edgenlp.prune.common import UnitCosts, fit_to_budget

    costs = UnitCosts(head=10.0, neuron=1.0, fixed=0.0)
    scores_h = [torch.tensor([0.9, 0.1]), torch.tensor([0.5, 0.4])]
    scores_n = [torch.tensor([0.3, 0.02, 0.2]), torch.tensor([0.01, 0.25, 0.06])]

    # Over budget (all kept: 40 + 6 = 46 > 30): the lowest score per unit of size goes first.
    kh, kn = [[True, True], [True, True]], [[True] * 3, [True] * 3]
    fit_to_budget(kh, kn, scores_h, scores_n, costs, 30.0)
    # per unit of size: head 0/1 0.01, neuron 1/0 0.01, neuron 0/1 0.02, head 1/1 0.04 go (46 -> 24)
    assert kh == [[True, False], [True, False]] and kn == [[True, False, True], [False, True, True]]

    # Under budget (a mask that overshot the target): without fill nothing changes ...
    kh, kn = [[True, False], [False, False]], [[False] * 3, [False] * 3]
    fit_to_budget(kh, kn, scores_h, scores_n, costs, 24.5)
    assert kh == [[True, False], [False, False]] and not any(map(any, kn))
    # ... with fill the best score per size comes back while it fits: neurons (0.3, 0.25, 0.2, 0.06 per unit),
    # then head 1/0 (0.05: 14 -> 24); nothing else fits under 24.5.
    fit_to_budget(kh, kn, scores_h, scores_n, costs, 24.5, fill=True)
    assert kh == [[True, False], [True, False]] and kn == [[True, False, True], [False, True, True]]


def test_importance_normalization_keeps_heads_and_neurons_on_one_scale():
    from edgenlp.prune.importance import _normalized

    # Layer 0's gradients are 10x layer 1's; within a layer one head matters as much as 40 neurons together.
    heads = [torch.tensor([4.0, 0.0]), torch.tensor([0.4, 0.0])]
    neurons = [torch.full((40,), 0.1), torch.full((40,), 0.01)]
    h, n = _normalized(heads, neurons)
    assert torch.allclose(h[0], h[1]) and torch.allclose(n[0], n[1])  # layers made comparable
    assert float(h[0][0]) == pytest.approx(40 * float(n[0][0]))  # the head/neuron ratio survives


def test_importance_cuts_attention_and_ffn_by_the_same_fraction():
    from edgenlp.prune.common import UnitCosts
    from edgenlp.prune.importance import fit_each_to_budget

    # 2 layers x 4 heads (cost 10) and 2 x 10 neurons (cost 2): prunable 80 + 40, fixed 5 per layer.
    costs = UnitCosts(head=10.0, neuron=2.0, fixed=5.0)
    kh, kn = [[True] * 4, [True] * 4], [[True] * 10, [True] * 10]
    hs = [torch.tensor([0.9, 0.1, 0.8, 0.2]), torch.tensor([0.7, 0.3, 0.05, 0.6])]  # ranked across layers
    ns = [torch.arange(10.0), torch.arange(10.0) + 0.5]
    budget = 10 + 0.5 * 120  # half of the prunable size
    fit_each_to_budget(kh, kn, hs, ns, costs, budget)
    assert sum(map(sum, kh)) == 4 and sum(map(sum, kn)) == 10  # half of each, not all of the cheaper kind
    assert kh == [[True, False, True, False], [True, False, False, True]]  # the 4 best heads of either layer
    assert kn[1][5:] == [True] * 5 and kn[0][:5] == [False] * 5
    size = 10 + costs.head * sum(map(sum, kh)) + costs.neuron * sum(map(sum, kn))
    assert size <= budget


def test_snap_widths_keeps_multiples_within_the_budget_best_neurons_first():
    from edgenlp.prune.common import UnitCosts, snap_widths

    costs = UnitCosts(head=10.0, neuron=1.0, fixed=0.0)
    kh = [[True], [True]]
    # layer 0 keeps 7 of 12 (scores fall with the index), layer 1 keeps 3 of 12 (scores rise with the index)
    s0, s1 = torch.arange(11.0, -1.0, -1.0), torch.arange(12.0) / 10
    kn = [[j < 7 for j in range(12)], [j >= 9 for j in range(12)]]
    budget = 2 * 10 + 10.0  # heads + 10 neurons: the 7 + 3 kept fit exactly
    snap_widths(kh, kn, [s0, s1], costs, budget, 4)
    widths = [sum(k) for k in kn]
    assert all(w % 4 == 0 for w in widths), widths
    assert 20 + sum(widths) <= budget
    # floors are 4 and 0; the freed 6 buy back one block of 4 from layer 0 (scores 7..4 beat layer 1's best
    # 1.1..0.8), and the 2 left buy nothing (no whole block fits).
    assert widths == [8, 0] and kn[0] == [j < 8 for j in range(12)]
    assert kh == [[True], [True]]  # heads untouched

    # a layer may grow to its full width even when that is not a multiple; multiple 1 changes nothing
    kn = [[j < 9 for j in range(10)], [False] * 10]
    snap_widths(kh, kn, [s0, s1], costs, 20 + 10.0, 4)
    assert [sum(k) for k in kn] == [10, 0]
    before = [[j < 7 for j in range(12)], [j >= 9 for j in range(12)]]
    kn = [list(k) for k in before]
    snap_widths(kh, kn, [s0, s1], costs, budget, 1)
    assert kn == before


@pytest.mark.parametrize("method", ["fast", "importance", "cofi"])
def test_ffn_multiple_gives_divisible_widths_at_the_target(method, task, make_finetuned):
    model, info = make_finetuned(num_layers=3)
    cofi = {"prune_hidden": False} if method == "cofi" else {}
    cfg = quick_config(method, target_sparsity=0.4, ffn_multiple=16, finetune_epochs=0, **cofi)
    res = prune(model, info, task, cfg, progress=False)
    assert all(w % 16 == 0 for w in res.model.shape.ffn), res.model.shape.ffn
    assert res.report["achieved"]["encoder_params"] >= 0.4 - 1e-9


def test_invalid_ffn_multiple_is_refused():
    with pytest.raises(ValueError, match="ffn_multiple"):
        FastConfig(ffn_multiple=0)


def test_a_latency_target_prices_a_head_at_its_attention_core(task, make_finetuned):
    """``latency`` at weight 1 is the FLOPs measure; a heavier attention core makes ``fast`` give up heads for neurons at
    the same sparsity, and the report measures what the target asked for."""
    from edgenlp.prune.common import UnitCosts, size_fn

    model, info = make_finetuned(num_layers=3)
    s = model.shape
    flops = size_fn(quick_config("fast", target="flops", seq_len=64), s.head_dim)
    light = size_fn(quick_config("fast", target="latency", attention_weight=1.0, seq_len=64), s.head_dim)
    for heads, ffn in ((s.heads, s.ffn), ((1, 0, 2), (5, 0, 17))):
        assert light(s.hidden, heads, ffn) == flops(s.hidden, heads, ffn)
    heavy_cfg = quick_config("fast", target="latency", attention_weight=8.0, seq_len=64)
    heavy = UnitCosts.of(heavy_cfg, s.head_dim, s.hidden)
    plain = UnitCosts.of(quick_config("fast", target="flops", seq_len=64), s.head_dim, s.hidden)
    assert heavy.neuron == plain.neuron and heavy.head > plain.head

    kept = {}
    for name, cfg in (("flops", quick_config("fast", target="flops", target_sparsity=0.5, seq_len=64, finetune_epochs=0)),
                      ("latency", quick_config("fast", target="latency", attention_weight=8.0, target_sparsity=0.5,
                                               seq_len=64, finetune_epochs=0))):
        res = prune(model, info, task, cfg, progress=False)
        kept[name] = (sum(res.model.shape.heads), sum(res.model.shape.ffn))
        if name == "latency":
            assert res.report["achieved"]["latency"] >= 0.5 - 1e-9
            assert res.report["target"] == {"measure": "latency", "sparsity": 0.5, "seq_len": 64, "attention_weight": 8.0}
        else:
            assert "latency" not in res.report["achieved"]
    assert kept["latency"][0] < kept["flops"][0] and kept["latency"][1] > kept["flops"][1]


def test_attention_weight_is_validated():
    with pytest.raises(ValueError, match="attention_weight"):
        prune_config("fast", target="latency", attention_weight=0.0)
