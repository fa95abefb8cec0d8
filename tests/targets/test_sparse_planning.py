"""Block sparsity in the planner: measured accuracy rows, measured kernel ratios, and nothing priced where nothing was timed."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from edgenlp.errors import EdgeNLPError
from edgenlp.targets.costmodel import MINILM_L6, CostModel
from edgenlp.targets.costmodel import tables as cost_tables
from edgenlp.targets.costmodel.sparse import load_sparse_ratios, sparse_ratio
from edgenlp.targets.planner import Candidate, SearchSpace, plan
from edgenlp.targets.prior import SPARSIFY, AccuracyModel
from edgenlp.targets.target import load_target

RATIOS = load_sparse_ratios()


@pytest.fixture
def on_the_measured_machine(monkeypatch):
    """This process runs on the machine kind the sparse ratios were measured on (whatever the test host is)."""
    key = {**cost_tables.cpu_key(), "cpu": RATIOS["machine"]["cpu"], "isa": list(RATIOS["machine"]["isa"])}
    monkeypatch.setattr(cost_tables, "cpu_key", lambda: key)


@pytest.fixture
def elsewhere(monkeypatch):
    key = {**cost_tables.cpu_key(), "cpu": "Some Other CPU", "isa": ["sse2"]}
    monkeypatch.setattr(cost_tables, "cpu_key", lambda: key)


def test_the_ratios_are_the_benchmarks():
    import importlib.util
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    spec = importlib.util.spec_from_file_location("sparse_ratios", repo / "tools" / "targets" / "sparse_ratios.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert RATIOS == mod.build()  # targets/sparse-ratios.json is what the results file gives today, no number by hand
    assert sparse_ratio(RATIOS, "int8", 0.75) == pytest.approx((RATIOS["ratios"]["int8"]["0.7"] + RATIOS["ratios"]["int8"]["0.8"]) / 2)
    assert sparse_ratio(RATIOS, "int8", 0.95) is None and sparse_ratio(RATIOS, "int4", 0.8) is None  # never extrapolated


@pytest.mark.parametrize("precision,sparsity", [("int8", 0.5), ("int8", 0.8), ("fp32", 0.9)])
def test_a_sparse_model_is_priced_at_the_measured_ratio(on_the_measured_machine, precision, sparsity):
    """On the shape, length and threads the ratio was measured at, the whole prediction moves by exactly that ratio."""
    cm = CostModel.for_target(load_target("host"))
    dense = cm.predict(MINILM_L6, bits=precision, seq_len=RATIOS["seq_len"], threads=RATIOS["threads"])
    sparse = cm.predict(MINILM_L6, bits=precision, seq_len=RATIOS["seq_len"], threads=RATIOS["threads"], block_sparsity=sparsity)
    assert sparse.latency_ms / dense.latency_ms == pytest.approx(RATIOS["ratios"][precision][f"{sparsity:g}"], rel=1e-6)
    assert sparse.size_mb < dense.size_mb and sparse.peak_memory_mb < dense.peak_memory_mb
    assert "block-sparse" in sparse.basis
    for comp in ("embedding", "attn_core", "other"):  # only the linears change
        assert sparse.components_ms[comp] == pytest.approx(dense.components_ms[comp])


def test_sparse_kernels_are_priced_where_they_were_timed_only(on_the_measured_machine):
    host = CostModel.for_target(load_target("host"))
    assert host.sparse_factor("int8", 0.8)[0] < 1.0
    assert host.sparse_factor("fp32", 0.7) == (1.0, pytest.approx(host.sparse_factor("fp32", 0.7)[1]))  # dense below 80%
    assert host.sparse_factor("int4", 0.8)[0] is None  # no int4 kernel
    assert host.sparse_factor("int8", 0.97)[0] is None  # beyond the measured sparsities
    assert CostModel.for_target(load_target("host"), runtime="onnx").sparse_factor("int8", 0.8)[0] is None  # ORT runs it dense
    phone = CostModel.for_target(load_target("pixel-7"))
    factor, why = phone.sparse_factor("int8", 0.8)
    assert factor is None and "pixel-7" in why
    with pytest.raises(EdgeNLPError, match="cannot price block sparsity"):
        phone.predict(MINILM_L6, bits="int8", block_sparsity=0.8)


def test_another_host_kind_gets_no_sparse_price(elsewhere):
    factor, why = CostModel.for_target(load_target("host")).sparse_factor("int8", 0.8)
    assert factor is None and RATIOS["machine"]["cpu"] in why


def test_block_sparsity_accuracy_comes_from_measured_rows_only():
    acc = AccuracyModel()
    rows = {float(r["block_sparsity"]): float(r["drop"]) for r in acc.table["block_sparsity"]}
    assert rows and acc.block_sparsities() == tuple(sorted(rows))
    lo, hi = sorted(rows)[:2]
    assert acc.block_point(lo).basis == "measured" and acc.block_point(lo).drop == rows[lo]
    mid = acc.block_point((lo + hi) / 2)
    assert mid.basis == "interpolated" and mid.drop == pytest.approx((rows[lo] + rows[hi]) / 2)
    assert acc.block_point(max(rows) + 0.05).basis == "unmeasured"  # never extrapolated
    # composed with the rest of a candidate: drops add
    c = Candidate(bits="int8", block_sparsity=lo)
    assert acc.explain(c).drop == pytest.approx(acc.explain(Candidate(bits="int8")).drop + rows[lo])
    # at a sparsify budget nobody measured: no rows
    other = AccuracyModel(budgets={SPARSIFY: {"block": "1x4", "max_steps": 1}})
    assert other.block_sparsities() == () and other.explain(c).basis == "unmeasured"


def test_candidates_say_what_block_sparsity_combines_with():
    assert "block_sparsity" not in Candidate(bits="int8").to_dict()  # a dense candidate reads as before
    c = Candidate(bits="int8", block_sparsity=0.8)
    assert Candidate.from_dict(c.to_dict()) == c and "80% blocks zero" in c.label
    for bad in (dict(bits="int4", block_sparsity=0.8), dict(bits="mixed", block_sparsity=0.8),
                dict(bits="int8", block_sparsity=0.8, exits=True), dict(bits="int8", block_sparsity=1.0)):
        with pytest.raises(ValueError):
            Candidate(**bad)
    space = SearchSpace(methods=(), sparsities=(0.0,), bits=("fp32", "int8", "int4"), embeddings=(None,), trim_vocab=(False,),
                        block_sparsities=(0.0, 0.8))
    assert {(c.bits, c.block_sparsity) for c in space.candidates()} == {
        ("fp32", 0.0), ("int8", 0.0), ("int4", 0.0), ("fp32", 0.8), ("int8", 0.8)}


def test_the_plan_chooses_block_sparsity_on_the_machine_it_was_timed_on(on_the_measured_machine):
    space = SearchSpace(methods=(), sparsities=(0.0,), bits=("int8",), embeddings=(None,), trim_vocab=(False,),
                        block_sparsities=(0.0, 0.7, 0.8))
    host = load_target("host")
    budgets = host.budgets.override(size_mb=1e3)
    acc = AccuracyModel(baseline=90.0)
    loose = plan(host, budgets, space=space, accuracy_model=acc, max_drop=20.0)
    assert loose.chosen.block_sparsity == 0.8  # the fastest that keeps the (loose) bound
    strict = plan(host, budgets, space=space, accuracy_model=acc, max_drop=1.0)
    assert strict.chosen.block_sparsity == 0.0
    assert {c.candidate.block_sparsity: c.violations for c in strict.considered}[0.7] == ("accuracy",)
    phone = load_target("pixel-7")
    p = plan(phone, phone.budgets.override(latency_ms=1e3, size_mb=1e3), space=space, accuracy_model=acc, max_drop=20.0)
    assert p.chosen.block_sparsity == 0.0 and {c.block_sparsity for c in p.not_offered} == {0.7, 0.8}


def test_compress_offers_the_measured_block_sparsities(on_the_measured_machine):
    from edgenlp.compress.config import PRESETS
    from edgenlp.compress.planning import plan_for_compress, resolve_budgets
    from edgenlp.prune.config import SparsifyConfig

    preset = PRESETS["quick"]
    acc = AccuracyModel(budgets=preset.prune_budget_map())
    assert acc.block_sparsities()  # the preset spends the budget the rows were measured at
    cfg = preset.sparsify_config(0.8)
    assert isinstance(cfg, SparsifyConfig) and {k: getattr(cfg, k) for k in acc.block_budget()} == acc.block_budget()
    host = load_target("host")
    doc = plan_for_compress(host, resolve_budgets(host, latency_ms=1e3), shape=MINILM_L6, num_labels=2, preset=preset,
                            excluded=[], task=SimpleNamespace(name="sst2"), max_drop=100.0)  # fmt: skip
    blocks = {c["candidate"].get("block_sparsity", 0.0) for c in doc["considered"]}
    assert blocks == {0.0, *acc.block_sparsities()} and doc["prior"]["block_sparsities_offered"] == list(acc.block_sparsities())
    assert not any(c["candidate"].get("block_sparsity") and c["candidate"]["bits"] not in ("fp32", "int8") for c in doc["considered"])


def test_a_built_sparse_bundle_is_priced_as_its_recipe_says(on_the_measured_machine, sparse_bundles):
    """predict_bundle reads the sparsify step: block-sparse where the kernels were timed, else dense and marked so."""
    from edgenlp.bundle import Bundle
    from edgenlp.models.encoder import EncoderShape

    b = Bundle.open(sparse_bundles["int8"], verify=False)
    shape = EncoderShape.from_dict(b.manifest["model"]["shape"])
    host = CostModel.for_target(load_target("host"))
    dense = host.predict(shape, bits="int8", seq_len=32, num_labels=len(b.labels))
    got = host.predict_bundle(b, seq_len=32)
    assert got.latency_ms < dense.latency_ms and "block-sparse int8 linears at 80%" in got.basis
    phone = CostModel.for_target(load_target("pixel-7")).predict_bundle(b, seq_len=32)
    assert phone.estimated and "priced dense" in phone.basis
