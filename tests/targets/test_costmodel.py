"""Cost model on synthetic tables: the fit recovers known coefficients, predictions are monotone, transfer is labelled.

Expected features, sizes and latencies are worked out by hand from the shape
(FLOPs also by ``FlopCounterMode``), not by ``features()``: the synthetic tables
are generated with it, so a wrong feature shows up as a wrong prediction.
"""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch
from costmodel_testing import GRID, synthetic_observations, tiny_shape

from edgenlp.models.encoder import EncoderClassifier
from edgenlp.targets.costmodel import CostModel, CostTable, features, size_bytes
from edgenlp.targets.target import load_target


@pytest.fixture
def host():
    return load_target("host")


def hand_features(shape, *, seq_len: int, num_labels: int = 2) -> dict[str, dict[str, float]]:
    """fp32 features written out from their definitions (module docstring), for truth that does not come from ``features()``."""
    s, H, d = seq_len, shape.hidden, shape.head_dim
    rows: dict[str, dict[str, float]] = {}

    def add(comp, **vals):
        row = rows.setdefault(comp, {})
        for k, v in vals.items():
            row[k] = row.get(k, 0) + v

    add("embedding", act=s * H, one=1)
    for h, F in zip(shape.heads, shape.ffn):
        A = h * d
        if A:  # Q, K, V: H -> A each, out: A -> H; fp32 weights and biases, 4 bytes each
            add("attn_qkv", flops=3 * 2 * s * H * A, wbytes=3 * 4 * (H * A + A), calls=3)
            add("attn_out", flops=2 * s * A * H, wbytes=4 * (A * H + H), calls=1)
            add("attn_core", flops=2 * s * s * d * h + 2 * s * s * d * h, probs=h * s * s, calls=1)  # QK^T and AV
        if F:
            add("ffn", flops=2 * s * H * F + 2 * s * F * H, wbytes=4 * (H * F + F) + 4 * (F * H + H), act=s * F, calls=2)
        add("other", act=2 * s * H, calls=1)  # two norms per layer
    add("other", flops=2 * H * H + 2 * H * num_labels)  # pooler and classifier on the [CLS] token
    add("runtime_overhead", one=1, calls=shape.num_layers)
    return rows


def test_fit_recovers_unseen_shapes(synthetic_table, host):
    """Exact synthetic data: a shape outside the grid is predicted within 1% (the form interpolates)."""
    cm = CostModel(host, synthetic_table, host=host)
    unseen = tiny_shape((3, 2, 1), (200, 96, 160))
    import costmodel_testing as conftest

    for t in (1, 2):
        pred = cm.predict(unseen, bits="fp32", seq_len=40, threads=t)
        exact = 0.0
        for row in hand_features(unseen, seq_len=40).values():
            exact += sum(conftest.TRUTH["fp32"][f] * v * ((1 - conftest.PARALLEL[f]) + conftest.PARALLEL[f] / t) for f, v in row.items())
        assert pred.latency_ms == pytest.approx(exact, rel=0.01)
        assert pred.estimated is False  # host, measured precision and thread count


@pytest.mark.parametrize("heads, ffn", [((3, 2, 1), (200, 96, 160)), ((4, 0, 2), (256, 64, 0)), ((1,), (0,))])
def test_fp32_features_match_their_definitions(heads, ffn):
    shape = tiny_shape(heads, ffn)
    assert features(shape, seq_len=24, bits="fp32", num_labels=3) == {(c, "fp32"): row for c, row in hand_features(shape, seq_len=24,
                                                                                                                   num_labels=3).items()}


def test_mixed_precision_features_by_hand():
    """Layer 0: 4 heads at int8, no FFN; layer 1: no heads, FFN 32 at int4 (hidden 64, head_dim 16, 10 tokens, 3 labels)."""
    shape = tiny_shape((4, 0), (0, 32))
    feats = features(shape, seq_len=10, bits=("int8", "int4"), num_labels=3)
    int8_64x64 = 64 * 64 + 64 * 4 + 64 * 4  # int8 weight, a scale per output channel, fp32 bias
    assert feats == {
        ("embedding", "int4"): {"act": 10 * 64, "one": 1},  # int8 and int4 tie: the narrower one prices the rest
        ("attn_qkv", "int8"): {"flops": 3 * 2 * 10 * 64 * 64, "wbytes": 3 * int8_64x64, "calls": 3},
        ("attn_out", "int8"): {"flops": 2 * 10 * 64 * 64, "wbytes": int8_64x64, "calls": 1},
        ("attn_core", "int4"): {"flops": 2 * 2 * 4 * 10 * 10 * 16, "probs": 4 * 10 * 10, "calls": 1},
        # ffn_in 64 -> 32: 2 groups of 32 inputs per row; ffn_out 32 -> 64: one group per row
        ("ffn", "int4"): {"flops": 2 * 2 * 10 * 64 * 32, "act": 10 * 32, "calls": 2,
                          "wbytes": (64 * 32 // 2 + 32 * 2 * 4 + 32 * 4) + (32 * 64 // 2 + 64 * 1 * 4 + 64 * 4)},
        ("other", "int4"): {"act": 2 * (2 * 10 * 64), "flops": 2 * 64 * 64 + 2 * 64 * 3, "calls": 2},
        ("runtime_overhead", "int4"): {"one": 1, "calls": 2},
    }  # fmt: skip
    assert features(shape, seq_len=10, bits=("int8", "int4"), num_labels=3, group_size=64)[("ffn", "int4")]["wbytes"] == \
        (64 * 32 // 2 + 32 * 1 * 4 + 32 * 4) + (32 * 64 // 2 + 64 * 1 * 4 + 64 * 4)


def test_feature_flops_are_what_torch_counts():
    """The FLOPs features of every component add up to FlopCounterMode's count of the real module (batch 1)."""
    from torch.utils.flop_counter import FlopCounterMode

    shape = tiny_shape((3, 0, 2), (100, 64, 0))
    model = EncoderClassifier(shape, 3).init_weights(seed=0).eval()
    ids = torch.randint(0, shape.vocab_size, (1, 20))
    counter = FlopCounterMode(display=False)
    with torch.inference_mode(), counter:
        model(ids, torch.ones_like(ids))
    feats = features(shape, seq_len=20, bits="fp32", num_labels=3)
    assert sum(row.get("flops", 0.0) for row in feats.values()) == counter.get_total_flops()


@pytest.mark.parametrize("group, total", [(32, 87_508), (64, 86_088)])
def test_size_by_hand(group, total):
    """int4 linears, int8 word embeddings: layer 0 has 4 heads and no FFN, layer 1 no heads and FFN 32 (vocab 500, hidden 64)."""
    shape = tiny_shape((4, 0), (0, 32))

    def int4(fin, fout):  # half a byte per weight, a fp32 scale per `group` inputs of each row, fp32 bias
        return fin * fout // 2 + fout * -(-fin // group) * 4 + fout * 4

    embeddings = (500 * 64 + 500 * 4) + 4 * (128 + 2) * 64 + 4 * 2 * 64  # int8 words + a scale per row; fp32 positions, types, norm
    layer0 = 4 * int4(64, 64) + 4 * 64 + 2 * 4 * 2 * 64  # Q, K, V, out; the removed FFN's output bias; two norms
    layer1 = 4 * 64 + int4(64, 32) + int4(32, 64) + 2 * 4 * 2 * 64  # the removed attention's output bias; FFN; two norms
    head = int4(64, 64) + int4(64, 3)
    assert embeddings + layer0 + layer1 + head == total
    assert size_bytes(shape, bits="int4", embeddings="int8", num_labels=3, group_size=group) == total



@pytest.mark.parametrize("embeddings", [None, "int8", "int4"])
@pytest.mark.parametrize("bits", ["int8", "int4"])
def test_size_is_what_the_quantizer_stores(bits, embeddings):
    """The planner's size of an uneven shape equals the quantizer's own weight count for the same model: the word table
    at one scale per row at int8 and int4 (a scale per group of 32 once overcounted an int4 table by 44 bytes a row)."""
    from edgenlp.quantize.schemes import weight_bytes

    shape = tiny_shape((4, 0, 2), (256, 64, 0))
    model = EncoderClassifier(shape, 3)
    linears = {n: {"int8": 8, "int4": 4}[bits] for n, m in model.named_modules()
               if isinstance(m, torch.nn.Linear) and m.weight.numel()}
    assert size_bytes(shape, bits=bits, embeddings=embeddings, num_labels=3) == \
        weight_bytes(model, linears, group_size=32, embeddings=embeddings)


def _shrinks(shape):
    """Shapes with one fewer head or a narrower FFN in one layer, or one layer fewer."""
    for i in range(shape.num_layers):
        if shape.heads[i]:
            yield dataclasses.replace(shape, heads=shape.heads[:i] + (shape.heads[i] - 1,) + shape.heads[i + 1 :])
        if shape.ffn[i]:
            yield dataclasses.replace(shape, ffn=shape.ffn[:i] + (shape.ffn[i] // 2,) + shape.ffn[i + 1 :])
    if shape.num_layers > 1:
        yield dataclasses.replace(shape, heads=shape.heads[:-1], ffn=shape.ffn[:-1])


@pytest.mark.parametrize("target_name", ["host", "pixel-7", "raspberry-pi-4"])
@pytest.mark.parametrize("runtime", ["executorch", "onnx"])
def test_monotone_in_heads_ffn_layers_and_bits(synthetic_table, host, target_name, runtime):
    target = load_target(target_name)
    cm = CostModel(target, synthetic_table, host=host, runtime=runtime)
    noisy = CostModel(target, CostTable(synthetic_observations(runtime=runtime, precisions=("fp32", "int8") if runtime == "onnx" else ("fp32",),
                                                              noise=0.1, seed=3), {}), host=host, runtime=runtime)  # fmt: skip
    for model in (cm, noisy):
        for heads, ffn in GRID + [((4, 3, 2), (200, 100, 50))]:
            shape = tiny_shape(heads, ffn)
            for threads in (1, 2):
                for seq in (16, 48):
                    by_bits = [model.predict(shape, bits=b, seq_len=seq, threads=threads).latency_ms for b in ("fp32", "int8", "int4")]
                    assert by_bits[0] >= by_bits[1] >= by_bits[2], (shape, by_bits)
                    base = model.predict(shape, bits="int8", seq_len=seq, threads=threads).latency_ms
                    for smaller in _shrinks(shape):
                        assert model.predict(smaller, bits="int8", seq_len=seq, threads=threads).latency_ms <= base + 1e-12, smaller
                    mixed = ("int8",) + ("int4",) * (shape.num_layers - 1)
                    assert model.predict(shape, bits=mixed, seq_len=seq, threads=threads).latency_ms <= base + 1e-12


def test_transfer_is_estimated_and_scales_with_throughput(synthetic_table, host):
    pi4 = CostModel(load_target("raspberry-pi-4"), synthetic_table, host=host)
    px7 = CostModel(load_target("pixel-7"), synthetic_table, host=host)
    shape = tiny_shape((4, 4), (256, 256))
    a = pi4.predict(shape, bits="fp32", seq_len=64, threads=1)
    b = px7.predict(shape, bits="fp32", seq_len=64, threads=1)
    assert a.estimated and b.estimated and "transferred" in a.basis
    assert a.latency_ms > b.latency_ms  # an A72 is slower than an X1
    # measured host int8 rows are used as measured; host int4 is derived (estimated)
    h = CostModel(host, synthetic_table, host=host, runtime="onnx")
    assert not h.predict(shape, bits="int8", seq_len=64, threads=1).estimated
    assert h.predict(shape, bits="int4", seq_len=64, threads=1).estimated


def test_measured_device_table_replaces_transfer(synthetic_table, host, tmp_path):
    target = load_target("pixel-7")
    dev = CostTable(synthetic_observations(threads=(1, 2)), {"device": "adb"}, device="pixel-7")
    cm = CostModel(target, synthetic_table, host=host, device_table=dev)
    p = cm.predict(tiny_shape((4, 4), (256, 256)), bits="fp32", seq_len=64, threads=2)
    assert not p.estimated and "measured on pixel-7" in p.basis
    # a thread count beyond the measured ones is interpolated, hence estimated
    assert cm.predict(tiny_shape((4, 4), (256, 256)), bits="fp32", seq_len=64, threads=4).estimated
    # tables round-trip through JSON
    path = dev.save(tmp_path / "pixel-7.measured.json")
    again = CostTable.load(path)
    assert json.loads(path.read_text())["schema"] == "edgenlp.costtable/1"
    assert again.fits.keys() == dev.fits.keys()


def test_size_matches_the_profiler_counts():
    """Size = the profiler's stored weight bytes: 4 per parameter in fp32, its int8/int4 storage markers on every linear."""
    from torch import nn

    from edgenlp.profile.analytic import analyze
    from edgenlp.profile.storage import StorageMarker, mark_storage

    shape = tiny_shape((4, 1, 2), (256, 32, 64))  # no empty linears (the profiler counts scales for a 0-width weight)
    for bits, marker in (("fp32", None), ("int8", StorageMarker(8)), ("int4", StorageMarker(4, group_size=32))):
        with torch.device("meta"):
            model = EncoderClassifier(shape, 3)
        if marker is not None:
            for m in model.modules():
                if isinstance(m, nn.Linear):
                    mark_storage(m, marker)
        total = analyze(model, seq_len=16).total
        assert size_bytes(shape, bits=bits, embeddings=None, num_labels=3) == total.weight_bytes, bits
        if bits == "fp32":
            assert total.weight_bytes == 4 * total.params
    pruned = tiny_shape((4, 0, 2), (256, 64, 0))
    with torch.device("meta"):
        model = EncoderClassifier(pruned, 3)
    assert size_bytes(pruned, bits="fp32", embeddings=None, num_labels=3) == 4 * analyze(model, seq_len=16).total.params


def test_memory_and_size_shrink_with_bits(synthetic_table, host):
    cm = CostModel(host, synthetic_table, host=host)
    shape = tiny_shape((4, 4), (256, 256))
    preds = [cm.predict(shape, bits=b, embeddings=e, seq_len=64) for b, e in (("fp32", None), ("int8", None), ("int8", "int8"), ("int4", "int4"))]
    sizes = [p.size_mb for p in preds]
    mems = [p.peak_memory_mb for p in preds]
    assert sizes == sorted(sizes, reverse=True) and len(set(sizes)) == 4
    assert mems == sorted(mems, reverse=True)


def test_bundle_precision_reads_the_quantize_step():
    from types import SimpleNamespace

    from edgenlp.targets.costmodel import bundle_precision

    assert bundle_precision((), 3) == ("fp32", None)
    step = SimpleNamespace(type="quantize", config={"scheme": "int8", "embeddings": "int4",
                                                    "layer_bits": [["layers.1.query", 4], ["layers.1.key", 4], ["layers.1.value", 4],
                                                                   ["layers.1.attn_out", 4], ["layers.1.ffn_in", 4], ["layers.2.ffn_out", 32]]})  # fmt: skip
    assert bundle_precision((SimpleNamespace(type="finetune", config={}), step), 3) == (("int8", "int4", "int8"), "int4")


def test_observation_from_profile_scales_components_to_the_fastest_run():
    from edgenlp.targets.costmodel import Observation

    shape = tiny_shape((2,), (64,))
    comps = {"embedding": 0.1, "attn_qkv": 0.3, "attn_core": 0.2, "attn_out": 0.1, "ffn": 0.5, "other": 0.3}
    doc = {"threads": 1, "seq_len": 32, "shape": {"num_labels": 2},
           "components": [{"name": k, "latency_ms": {"onnx": v}} for k, v in comps.items()],
           "total": {"latency_ms": {"onnx": 2.0}, "latency_min_ms": {"onnx": 1.5}, "unattributed_ms": {"onnx": 0.5}}}  # fmt: skip
    ob = Observation.from_profile(doc, runtime_key="onnx", runtime="onnx", precision="fp32", model_shape=shape)
    assert ob.total_ms == 1.5 and sum(ob.components.values()) == pytest.approx(1.5)
    assert ob.components["ffn"] / ob.components["attn_qkv"] == pytest.approx(0.5 / 0.3)
    med = Observation.from_profile(doc, runtime_key="onnx", runtime="onnx", precision="fp32", model_shape=shape, statistic="median")
    assert med.total_ms == 2.0 and med.components["runtime_overhead"] == 0.5
    assert Observation.from_dict(json.loads(json.dumps(ob.to_dict()))) == ob


def test_a_runtime_without_rows_borrows_another_and_says_so(host):
    only_onnx = CostTable(synthetic_observations(runtime="onnx"), {})
    p = CostModel(host, only_onnx, host=host, runtime="executorch").predict(tiny_shape((4,), (64,)), seq_len=32)
    assert p.estimated and "onnx rows stand in" in p.basis
    same = CostModel(host, only_onnx, host=host, runtime="onnx").predict(tiny_shape((4,), (64,)), seq_len=32)
    assert not same.estimated and same.latency_ms == pytest.approx(p.latency_ms)


def test_shipped_reference_table_prices_every_target(tmp_path, monkeypatch):
    """Without a calibration of this machine, the shipped reference table prices every target, labelled estimated."""
    from edgenlp.targets import cost_model_for
    from edgenlp.targets.planner import MINILM_L6
    from edgenlp.targets.target import list_targets

    monkeypatch.setenv("EDGENLP_CACHE_DIR", str(tmp_path))
    for entry in list_targets():
        t = load_target(entry.name)
        p = [cost_model_for(t).predict(MINILM_L6, bits=b, seq_len=128, threads=t.budgets.threads) for b in ("fp32", "int4")]
        assert all(x.estimated and x.latency_ms > 0 for x in p) and p[1].size_mb < p[0].size_mb, entry.name


@pytest.mark.parametrize("precision", ["int8", pytest.param("int4", marks=pytest.mark.slow)])
def test_calibration_measures_executorch_quantized_programs(tmp_path, precision):
    """ExecuTorch int8/int4 rows are measured on a program whose linears really are quantized (a quarter of the weight bytes or less).

    CI runs int8; int4 (the same path with another weight config, one more lowering) runs with ``-m slow``.
    """
    from edgenlp.targets.calibrate import measure_shape

    shape = tiny_shape((4,), (256,), hidden=128, vocab=16)  # one layer: every kind of linear, the least lowering
    kw = dict(runtime="executorch", seq_lens=(8,), threads=(1,), runs=2, warmup=1)
    fp32 = measure_shape(shape, precision="fp32", workdir=tmp_path / "fp32", **kw)
    pte_fp32 = (tmp_path / "fp32" / "model.pte").stat().st_size
    for precision in (precision,):
        quant = measure_shape(shape, precision=precision, workdir=tmp_path / precision, **kw)
        assert [o.precision for o in quant] == [precision] and quant[0].total_ms > 0
        assert set(quant[0].components) == set(fp32[0].components)
        pte_q = (tmp_path / precision / f"model.{precision}.pte").stat().st_size
        assert pte_q < 0.45 * pte_fp32, (precision, pte_q, pte_fp32)


def test_merging_a_calibration_rescales_it_to_the_base_tables_speed_and_replaces_its_rows(host):
    """A later calibration of some precisions joins an older table as if measured at the older table's machine speed."""
    from edgenlp.errors import EdgeNLPError
    from edgenlp.targets.calibrate import merge_tables

    key = {"cpu": "test"}
    base = CostTable(synthetic_observations(precisions=("fp32", "int8")), key, "host", {"reference_ms": 4.0, "measured": []})
    slower = [dataclasses.replace(o, total_ms=o.total_ms * 2, components={k: v * 2 for k, v in o.components.items()})
              for o in synthetic_observations(precisions=("int8", "int4"))]
    new = CostTable(slower, key, "host", {"reference_ms": 8.0, "runs": 5})  # the machine ran at half speed
    merged = merge_tables(base, new)
    by = lambda t, p: sorted(o.total_ms for o in t.observations if o.precision == p)  # noqa: E731
    assert by(merged, "fp32") == by(base, "fp32")
    assert by(merged, "int8") == pytest.approx(by(base, "int8"))  # replaced by the new rows, rescaled to the base speed
    assert len(by(merged, "int4")) == len(by(new, "int4")) and merged.notes["measured"] == ["executorch/fp32", "executorch/int4", "executorch/int8"]
    assert merged.notes["merged"][-1]["scaled_by"] == 0.5
    assert CostTable.from_dict(json.loads(json.dumps(merged.to_dict()))).notes["merged"]
    p = CostModel(host, merged, host=host, runtime="executorch").predict(tiny_shape((4,), (64,)), bits="int4", seq_len=32)
    assert not p.estimated and "host calibration" in p.basis  # int4 is priced from its own rows
    with pytest.raises(EdgeNLPError, match="different machines"):
        merge_tables(base, CostTable(new.observations, {"cpu": "other"}, "host", {}))


def test_device_int4_carries_the_hosts_measured_int4_penalty(host):
    """int4 measured slower than int8 on the host (TRUTH: 1.36x the FLOP cost) stays slower on a device estimate."""
    from costmodel_testing import synthetic_observations

    from edgenlp.targets.costmodel import CostTable

    measured = CostTable(synthetic_observations(precisions=("fp32", "int8", "int4")), {"cpu": "synthetic"},
                         notes={"measured": ["executorch/fp32", "executorch/int8", "executorch/int4"]})
    px7 = CostModel(load_target("pixel-7"), measured, host=host, runtime="executorch")
    shape = tiny_shape((4, 4), (256, 256))
    int8, int4 = (px7.predict(shape, bits=b, seq_len=64, threads=1) for b in ("int8", "int4"))
    assert px7.kernel_penalty("int4") > 1.0 and int4.latency_ms > int8.latency_ms
    assert int4.estimated and "measured int4 : int8 ratio" in int4.basis
    # without int4 rows on the host, int4 is derived from int8 and never predicted slower
    only8 = CostTable(synthetic_observations(precisions=("fp32", "int8")), {"cpu": "synthetic"},
                      notes={"measured": ["executorch/fp32", "executorch/int8"]})
    cm = CostModel(load_target("pixel-7"), only8, host=host, runtime="executorch")
    assert cm.kernel_penalty("int4") == 1.0
    assert cm.predict(shape, bits="int4", seq_len=64, threads=1).latency_ms <= cm.predict(shape, bits="int8", seq_len=64,
                                                                                          threads=1).latency_ms


def test_cost_table_sources_follow_calibration_and_device_tables(tmp_path, monkeypatch):
    """What a plan's fingerprint names: a device its measured table, else the shipped reference; the host its calibration."""
    import shutil

    from edgenlp.targets.costmodel import cost_table_sources, device_table_cache_path, host_table_path, reference_table_path

    monkeypatch.setenv("EDGENLP_CACHE_DIR", str(tmp_path))
    host_t, pixel = load_target("host"), load_target("pixel-7")
    assert cost_table_sources(host_t) == [reference_table_path()]
    assert cost_table_sources(pixel) == [reference_table_path()]
    host_table_path().parent.mkdir(parents=True)
    shutil.copy(reference_table_path(), host_table_path())  # this machine calibrated
    assert cost_table_sources(host_t) == [host_table_path()]
    assert cost_table_sources(pixel) == [reference_table_path()]  # this machine's calibration never prices a device
    shutil.copy(reference_table_path(), device_table_cache_path("pixel-7"))  # pixel-7 measured over a transport
    assert cost_table_sources(pixel) == [device_table_cache_path("pixel-7")]
    assert cost_table_sources(load_target("pixel-8")) == [reference_table_path()]
