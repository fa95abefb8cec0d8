"""Quantization: schemes vs fp32 (SNR), lowering (delegated ops), manifest round trip, trimming, guard, bad metadata.

Checked the way ExecuTorch's backend tests check: the lowered graph first
(one delegate call, every linear a quantized delegated op), then the numbers.
"""

import json
import shutil

import numpy as np
import pytest
import torch

from edgenlp_testing import _once, tiny_model, write_task_dir
from edgenlp.bundle import Bundle, finalize_manifest
from edgenlp.errors import BundleError, EdgeNLPError
from edgenlp.export.api import ExportConfig, export_bundle
from edgenlp.export.graph import example_inputs
from edgenlp.quantize.api import quantize_model
from edgenlp.quantize.config import QuantizeConfig
from edgenlp.quantize.schemes import fake_quantize, linear_names, resolve_bits, weight_bytes
from edgenlp.recipe import Step, parity_policy, recipe_from_list, recipe_to_list
from edgenlp.run.base import get_runner

EXPORT = ExportConfig(formats=("pte",), max_seq_len=32, buckets=(32,), parity_samples=8)  # one bucket: buckets have tests of their own


def snr_db(ref, got) -> float:
    ref, got = np.asarray(ref, dtype=np.float64), np.asarray(got, dtype=np.float64)
    return float(10 * np.log10((ref**2).sum() / ((ref - got) ** 2).sum()))


# -------------------------------------------------------------------- config


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(scheme="int2"), "scheme"),
        (dict(group_size=20), "group_size"),
        (dict(embeddings="fp16"), "embeddings"),
        (dict(layer_bits=(("layers.0.query", 6),)), "must be one of"),
        (dict(layer_bits=(("a", 8), ("a", 4))), "twice"),
        (dict(scheme="mixed"), "size_mb"),
        (dict(size_mb=0.0), "size_mb"),
        (dict(max_drop=-1.0), "max_drop"),
    ],
)
def test_config_validation(kwargs, message):
    with pytest.raises(ValueError, match=message):
        QuantizeConfig(**kwargs)


def test_config_in_the_recipe_round_trips_with_hooks():
    cfg = QuantizeConfig(scheme="mixed", layer_bits=(("layers.0.query", 4), ("pooler", 32)), embeddings="int4", size_mb=3.0)
    back = recipe_from_list(json.loads(json.dumps(recipe_to_list([Step("quantize", cfg)]))))[0].config
    assert back == cfg and back.layer_bits == (("layers.0.query", 4), ("pooler", 32))
    policy = parity_policy([Step("quantize", cfg)])
    assert policy.compare_fp32 and policy.rounding_reference is not None
    assert policy.tolerance_for("executorch", quant_error=1.0) < policy.tolerance_for("onnx", quant_error=1.0)
    storage = cfg.weight_storage()
    assert storage["layers.0.query"].bits == 4 and storage["layers.0.query"].group_size == 32
    assert "pooler" not in storage and storage["embeddings.word"].bits == 4


def test_linear_names_come_from_the_family_table_and_int4_falls_back_per_layer():
    model, _ = tiny_model()
    names = linear_names(model)
    assert names[:6] == tuple(f"layers.0.{p}" for p in ("query", "key", "value", "attn_out", "ffn_in", "ffn_out"))
    assert names[-2:] == ("pooler", "classifier") and len(names) == 2 * 6 + 2
    bits, fallbacks = resolve_bits(model, QuantizeConfig(scheme="int4", group_size=128))
    # in_features 64 (all but ffn_out) is not divisible by 128: those layers stay int8, and say so
    assert bits["layers.0.ffn_out"] == 4 and bits["layers.0.query"] == 8
    assert len(fallbacks) == len(names) - 2 and "not divisible by group 128" in fallbacks[0]
    with pytest.raises(ValueError, match="not a linear"):
        resolve_bits(model, QuantizeConfig(scheme="mixed", layer_bits=(("layers.9.query", 8),)))


def test_a_layer_pruned_to_one_ffn_neuron_keeps_that_linear_fp32_and_exports(tmp_path):
    """Structured pruning can leave one FFN neuron (ffn_out: [hidden, 1]); torchao cannot quantize a single input
    feature per channel, so that linear stays fp32 (recorded), the rest int8, and the bundle passes parity."""
    from dataclasses import replace

    from edgenlp.prune.masks import LayerMask, MaskDict
    from edgenlp.prune.surgery import apply_masks

    model, info = tiny_model()
    full = MaskDict.full(model.shape)
    last = full.layers[-1]
    masks = replace(full, layers=(*full.layers[:-1], LayerMask(last.heads, (3,))))
    pruned = apply_masks(model, masks)
    info = replace(info, shape=pruned.shape)
    assert pruned.shape.ffn[-1] == 1
    bits, fallbacks = resolve_bits(pruned, QuantizeConfig(scheme="int8"))
    name = f"layers.{pruned.shape.num_layers - 1}.ffn_out"
    assert bits[name] == 32 and sum(b == 32 for b in bits.values()) == 1
    assert any(f.startswith(name) and "kept fp32" in f for f in fallbacks)
    qmodel, qinfo = quantize_model(pruned, info, QuantizeConfig(scheme="int8"))
    b = export_bundle(qmodel, qinfo, tmp_path / "b", config=EXPORT)
    assert b.manifest["quantization"]["linears"][name] == 32
    assert all(p["passed"] for p in b.manifest["parity"].values())


@pytest.mark.parametrize("scheme, embeddings, min_snr", [("int8", None, 20.0), ("int8", "int8", 20.0), ("int4", None, 3.0),
                                                         ("int4", "int4", 3.0)])
def test_fake_quantized_model_snr_vs_fp32(scheme, embeddings, min_snr):
    """Eager fake-quantized logits against fp32 on random batches; the size prediction shrinks accordingly."""
    model, _ = tiny_model()
    cfg = QuantizeConfig(scheme=scheme, embeddings=embeddings)
    ids, mask = example_inputs(24, batch=16, vocab_size=model.shape.vocab_size, seed=1)
    with torch.no_grad():
        ref, got = model(ids, mask), fake_quantize(model, cfg)(ids, mask)
    assert snr_db(ref, got) >= min_snr
    bits, _ = resolve_bits(model, cfg)
    fp32 = weight_bytes(model, {n: 32 for n in bits}, group_size=32, embeddings=None)
    assert fp32 == sum(p.numel() * 4 for p in model.parameters())
    linear_w = sum(dict(model.named_modules())[n].weight.numel() * 4 for n in bits)
    word = model.embeddings.word.weight.numel() * 4
    saved = fp32 - weight_bytes(model, bits, group_size=32, embeddings=embeddings)
    assert saved >= 0.6 * linear_w + (0.6 * word if embeddings else 0)


# -------------------------------------------------------------------- lowered bundles


@pytest.fixture(scope="module")
def task(tmp_path_factory):
    from edgenlp.data.tasks import load_task

    d = tmp_path_factory.mktemp("qtask")
    train = [("a gripping , funny film", "pos"), ("dull and lifeless", "neg"), ("the worst film of the year", "neg"),
             ("a joy to watch from start to finish", "pos")]
    dev = [("a joy to watch", "pos"), ("tedious", "neg"), ("not good , not bad", "neg"), ("funny and moving", "pos")]
    return load_task(write_task_dir(d, train=train, dev=dev))


@pytest.fixture(scope="module")
def int8_bundle(tmp_path_factory, task):
    """int8 linears + int8 embeddings, ExecuTorch and ONNX."""
    def build():
        model, info = tiny_model()
        out = tmp_path_factory.mktemp("q") / "int8"
        cfg = ExportConfig(max_seq_len=32, buckets=(32,), parity_samples=8)
        export_bundle(*quantize_model(model, info, QuantizeConfig(scheme="int8", embeddings="int8")), out, task=task, config=cfg)
        return out

    return _once(tmp_path_factory, "quantize-int8", build)


MIXED_BITS = (("layers.0.query", 32), ("layers.0.ffn_in", 4), ("layers.1.ffn_out", 4), ("classifier", 32))


@pytest.fixture(scope="module")
def mixed_trimmed_bundle(tmp_path_factory, task):
    """Mixed per-layer bits (32/8/4), int4 embeddings, trimmed vocabulary; ExecuTorch only."""
    def build():
        model, info = tiny_model()
        out = tmp_path_factory.mktemp("q") / "mixed"
        qcfg = QuantizeConfig(scheme="mixed", layer_bits=MIXED_BITS, embeddings="int4", trim_vocab=True)
        export_bundle(*quantize_model(model, info, qcfg, task=task), out, task=task, config=EXPORT)
        return out

    return _once(tmp_path_factory, "quantize-mixed", build)


def test_int8_every_linear_is_a_quantized_delegated_op_in_one_call(int8_bundle):
    b = Bundle.open(int8_bundle)
    model, _ = tiny_model()
    for m in b.manifest["artifacts"]["pte"]["methods"]:
        assert m["delegate_calls"] == 1, m
        assert m["delegated_linears"] == {"int8": len(linear_names(model))}, m  # no fp32 linear left
        assert set(m["non_delegated_ops"]) == {"quantized_decomposed.embedding_byte.default",
                                               "dim_order_ops._to_dim_order_copy.default"}, m


def test_int8_bundle_parity_and_snr_through_both_runtimes(int8_bundle, task):
    b = Bundle.open(int8_bundle)
    p = b.manifest["parity"]
    # lowering error within the bound the gate applied (the reference's own activation rounding), recorded with why
    et = p["executorch"]
    assert et["passed"] and et["max_abs_diff"] <= et["tolerance"] == et["bound"]["tolerance"] and et["bound"]["why"]
    assert "fp32" in p["executorch"] and "fp32" in p["onnx"]  # quantization error reported
    model, info = tiny_model()
    texts = list(task.dev.texts + task.train.texts)
    with get_runner(int8_bundle, runtime="executorch") as r:
        ids = r.token_ids(texts)
        got_et = r.predict_logits(texts)
    with get_runner(int8_bundle, runtime="onnx") as r:
        got_ort = r.predict_logits(texts)
    with torch.no_grad():
        ref = np.stack([model(torch.tensor([x]), torch.ones(1, len(x), dtype=torch.long))[0].numpy() for x in ids])
    assert snr_db(ref, got_et) >= 20.0
    assert snr_db(ref, got_ort) >= 10.0


def test_onnx_passes_strict_shape_inference(int8_bundle, tiny_bundle):
    """Both bundles' model.onnx pass the checker and strict shape inference; the int8 one quantizes every linear."""
    from collections import Counter

    import onnx

    for path in (tiny_bundle / "model.onnx", int8_bundle / "model.onnx"):
        proto = onnx.load(path)
        onnx.checker.check_model(proto)
        onnx.shape_inference.infer_shapes(proto, check_type=True, strict_mode=True)
    ops = Counter(n.op_type for n in onnx.load(int8_bundle / "model.onnx").graph.node)
    assert ops["MatMulInteger"] == len(linear_names(tiny_model()[0])) and "Gemm" not in ops, ops


def test_ort_quantize_dynamic_quantizes_every_linear_of_the_fp32_bundle(tiny_bundle, tmp_path):
    """ONNX Runtime's own quantize_dynamic on the fp32 bundle's model.onnx (the known snag): it runs, and what it
    writes has every linear (the head's included) as an integer matmul and the fp32 model's logits within int8 noise."""
    from collections import Counter

    import onnx
    import onnxruntime as ort
    from onnxruntime.quantization import QuantType, quantize_dynamic

    quantize_dynamic(tiny_bundle / "model.onnx", tmp_path / "q.onnx", per_channel=True, weight_type=QuantType.QInt8)
    model, _ = tiny_model()
    quantized = Counter(n.op_type for n in onnx.load(tmp_path / "q.onnx").graph.node)
    assert quantized["MatMulInteger"] == len(linear_names(model)), quantized
    ids, mask = example_inputs(24, batch=8, vocab_size=model.shape.vocab_size, seed=3)
    feeds = {"input_ids": ids.numpy(), "attention_mask": mask.numpy()}
    ref = ort.InferenceSession(str(tiny_bundle / "model.onnx")).run(None, feeds)[0]
    got = ort.InferenceSession(str(tmp_path / "q.onnx")).run(None, feeds)[0]
    assert got.shape == ref.shape and snr_db(ref, got) >= 6.0  # int8 noise on a random tiny model: ~11 dB; broken: < 3


def test_per_layer_bits_round_trip_through_the_manifest(mixed_trimmed_bundle):
    from edgenlp.profile.api import _bundle_model
    from edgenlp.profile.storage import describe_storage

    b = Bundle.open(mixed_trimmed_bundle)
    model, _ = tiny_model()
    step = [s for s in b.recipe if s.type == "quantize"][-1]
    bits = dict(step.config.layer_bits)
    assert set(bits) == set(linear_names(model)) and b.manifest["quantization"]["linears"] == bits
    for name, want in MIXED_BITS:
        assert bits[name] == want
    assert bits["layers.0.key"] == 8  # unnamed linears: the 8-bit default of "mixed"
    m = b.manifest["artifacts"]["pte"]["methods"][0]
    assert m["delegate_calls"] == 1
    assert m["delegated_linears"] == {"fp32": 2, "int4": 2, "int8": len(bits) - 4}
    assert "quantized_decomposed.embedding_4bit.default" in m["non_delegated_ops"]
    # the profiler reads the same bits back from the recipe
    shaped = dict(_bundle_model(b).named_modules())
    assert describe_storage(shaped["layers.0.ffn_in"]).format == "int4-g32"
    assert describe_storage(shaped["layers.0.key"]).format == "int8"
    assert describe_storage(shaped["layers.0.query"]).format == "fp32"
    assert describe_storage(shaped["embeddings.word"]).format == "int4"


def test_trimmed_vocabulary_keeps_training_predictions(mixed_trimmed_bundle, task):
    """Training sentences: identical ids (remapped) and logits as the untrimmed quantized model; unseen words -> [UNK]."""
    b = Bundle.open(mixed_trimmed_bundle)
    id_map = b.id_map
    assert b.manifest["model"]["shape"]["vocab_size"] == len(id_map) < 60
    model, info = tiny_model()
    step = [s for s in b.recipe if s.type == "quantize"][-1]
    untrimmed = fake_quantize(model, step.config)
    texts = list(task.train.texts)
    with get_runner(mixed_trimmed_bundle, runtime="executorch") as r:
        got = r.predict_logits(texts)
        unseen = r.token_ids(["zebra"])[0]
        full = [r._tok(t)["input_ids"] for t in texts]
    assert unseen[1] == id_map.unk_id and id_map.kept[id_map.unk_id] == r._tok.unk_token_id
    with torch.no_grad():
        ref = np.stack([untrimmed(torch.tensor([x]), torch.ones(1, len(x), dtype=torch.long))[0].numpy() for x in full])
    assert (got.argmax(-1) == ref.argmax(-1)).all()
    assert np.abs(got - ref).max() < 2e-2  # the int4 lowering tolerance


# -------------------------------------------------------------------- guard and errors


@pytest.fixture(scope="module")
def boundary_task(tmp_path_factory):
    """Dev sentences on which the fp32 tiny model is right but barely: int4 noise flips some."""
    from edgenlp.data.tasks import load_task
    from edgenlp.models.registry import default_vocab_file
    from edgenlp.models.tokenizer import build_tokenizer, encode

    model, info = tiny_model()
    words = [w for w in default_vocab_file().read_text().split("\n")[2000:2600] if w.isalpha()]
    rng = np.random.default_rng(0)
    texts = [" ".join(rng.choice(words, size=6)) for _ in range(400)]
    tok = build_tokenizer(info.vocab_file, info.tokenizer)
    ids, mask = encode(tok, texts, max_len=32)
    with torch.no_grad():
        logits = model(torch.from_numpy(ids), torch.from_numpy(mask))
    margin = (logits[:, 0] - logits[:, 1]).abs()
    order = margin.argsort()[:24].tolist()
    labels = ["neg" if logits[i, 0] > logits[i, 1] else "pos" for i in order]
    rows = [(texts[i], lab) for i, lab in zip(order, labels)]
    return load_task(write_task_dir(tmp_path_factory.mktemp("boundary"), train=rows, dev=rows))


@pytest.mark.slow  # several full int4 exports; the guard's refusal paths below run in CI
def test_guard_raises_precision_until_the_drop_limit_holds(boundary_task, tmp_path):
    from edgenlp.compress.guard import quantize_bundle

    model, info = tiny_model()
    res = quantize_bundle(model, info, tmp_path / "g", QuantizeConfig(scheme="int4", embeddings=None, max_drop=0.0),
                   task=boundary_task, export_config=ExportConfig(formats=("pte",), max_seq_len=32, buckets=(32,)), progress=False)
    attempts = res.report["guard"]["attempts"]
    assert attempts[0]["drop_points"] > 0, "precondition: int4 flips a boundary prediction"
    assert len(attempts) > 1 and attempts[-1]["drop_points"] <= 0.0
    final = dict(res.config.layer_bits)
    assert any(b > 4 for b in final.values()) and final == res.bundle.manifest["quantization"]["linears"]
    assert (tmp_path / "g" / "quantize.json").is_file() and Bundle.open(tmp_path / "g")


def test_impossible_size_budget_writes_nothing(task, tmp_path):
    from edgenlp.compress.guard import QuantizeError, quantize_bundle

    model, info = tiny_model()
    with pytest.raises(QuantizeError, match="cannot be met"):
        quantize_bundle(model, info, tmp_path / "never", QuantizeConfig(scheme="mixed", size_mb=0.1), task=task,
                 export_config=EXPORT, progress=False)
    assert not (tmp_path / "never").exists() and not list(tmp_path.iterdir())


@pytest.mark.parametrize("corrupt, message", [
    (lambda m, d: m["quantization"]["linears"].update({"layers.0.query": 4}), "disagrees with the recipe"),
    (lambda m, d: m["quantization"]["linears"].pop("classifier"), "disagrees"),
    (lambda m, d: m["quantization"].update(embeddings="int8"), "embeddings disagrees"),
    (lambda m, d: (d / "vocab_map.json").write_text('{"format": "edgenlp-vocab-map", "version": 1, "source_vocab_size": 30522, '
                                                    '"unk_id": 0, "kept": [0, 100, 101]}'), "keeps 3 tokens"),
    (lambda m, d: (d / "vocab_map.json").write_text("[1, 2"), "unreadable vocabulary map"),
])
def test_corrupted_quantization_metadata_is_one_error_line(mixed_trimmed_bundle, tmp_path, corrupt, message):
    from click.testing import CliRunner

    from edgenlp.cli import main

    d = tmp_path / "b"
    shutil.copytree(mixed_trimmed_bundle, d)
    manifest = json.loads((d / "manifest.json").read_text())
    corrupt(manifest, d)
    finalize_manifest(d, manifest)  # re-signed: the metadata itself is wrong, not the checksums
    with pytest.raises(BundleError, match=message):
        Bundle.open(d)
    res = CliRunner().invoke(main, ["inspect", str(d)])
    assert res.exit_code == 2
    lines = res.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and "Traceback" not in res.output


def test_inspect_shows_per_layer_bits(mixed_trimmed_bundle):
    from click.testing import CliRunner

    from edgenlp.cli import main

    res = CliRunner().invoke(main, ["inspect", str(mixed_trimmed_bundle)])
    assert res.exit_code == 0, res.output
    assert "query=fp32" in res.output and "ffn_in=int4" in res.output and "embeddings int4" in res.output


def test_trim_vocab_needs_a_task():
    model, info = tiny_model()
    with pytest.raises(EdgeNLPError, match="needs --task"):
        quantize_model(model, info, QuantizeConfig(trim_vocab=True))
