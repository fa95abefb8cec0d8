"""The parity gate of a quantized program: another kernel's rounding passes, a wrong lowering fails.

XNNPACK's QD8 kernels round activations per ISA (AVX2, AVX-512 VNNI, NEON
dot-product); this host runs one family. The others stand in as the reference
with every activation re-rounded at random (``with_kernel_rounding``: jitter
0.25 of a step, and 0.5, a rounding that agrees with the reference's no better
than chance), run eagerly through the same gate. Defects are put into the
weights a kernel reads, as a broken lowering would: a scale x2, output rows
swapped, a square weight transposed (one linear each), every bias dropped,
int4 scales read for twice their group. Each must fail with the host's exact
rounding and with the worst-case rounding of another ISA on top; on this host
a real lowering passes and a lowered defect fails.
"""

import dataclasses

import numpy as np
import pytest

from edgenlp_testing import tiny_model
from lowering_testing import EagerProgram, with_biases, with_defect
from edgenlp.export.api import ExportConfig, check_parity, export_bundle, parity_texts
from edgenlp.export.executorch import xnnpack_kernel_family
from edgenlp.models.tokenizer import build_tokenizer
from edgenlp.quantize.api import quantize_model
from edgenlp.quantize.config import QuantizeConfig
from edgenlp.quantize.rounding import with_kernel_rounding
from edgenlp.recipe import parity_policy

MAX_LEN = 32
SENTENCES = [
    "a gripping , funny and moving film .", "the plot is thin and the acting is worse .", "ok", "tedious",
    "I lost my card yesterday, can you freeze it?", "why was I charged twice for the same coffee this morning",
    "a joy to watch from start to finish", "not good , not bad , just there", "how do I top up with a transfer",
    "the worst film of the year , and the longest", "my pin is blocked", "what is the exchange rate for euros",
    "an hour of nothing , beautifully shot", "can I get a virtual card for online shopping please", "dull",
    "it works , mostly , if you squint at the ending",
]
SCHEMES = {"int8+emb8": QuantizeConfig(scheme="int8", embeddings="int8"), "int4": QuantizeConfig(scheme="int4")}
# (defect, linear): one linear where a single wrong weight is the defect, every applicable linear otherwise.
DEFECTS = [("scale-x2", "layers.0.query"), ("swapped-rows", "layers.1.ffn_out"), ("transposed", "layers.0.query"),
           ("dropped-bias", None), ("wrong-group-size", None)]


@pytest.fixture(scope="module", params=sorted(SCHEMES))
def quantized(request):
    model, info = tiny_model()
    with_biases(model)  # init_weights zeroes biases; a trained model's are not
    q, qinfo = quantize_model(model, info, SCHEMES[request.param])
    tok = build_tokenizer(info.vocab_file, info.tokenizer)
    texts = parity_texts(SENTENCES, tok, buckets=(16, MAX_LEN), samples=len(SENTENCES))
    return request.param, q, qinfo, tok, texts


def gate(q, qinfo, tok, texts, program) -> dict:
    """``check_parity`` of ``program`` (a model run eagerly in place of a lowered one) against ``q``."""
    run = EagerProgram(program, tok, max_len=MAX_LEN)
    return check_parity(None, q, parity_policy(qinfo.recipe), formats=("pte",), texts=texts, tokenizer=tok,
                        max_len=MAX_LEN, runner_factory=run.factory)["executorch"]


@pytest.mark.parametrize("jitter, seed", [(0.25, 0), (0.25, 1), (0.5, 0), (0.5, 1), (0.5, 2)])
def test_another_isas_rounding_passes(quantized, jitter, seed):
    _, q, qinfo, tok, texts = quantized
    p = gate(q, qinfo, tok, texts, with_kernel_rounding(q, jitter=jitter, seed=seed))
    assert p["passed"], p
    assert p["max_abs_diff"] > 10 * 1e-3 * np.abs(p["bound"]["terms"]["reference_scale"])  # the old relative bound fails it
    assert p["bound"]["applied"] == "activation-rounding" and p["rms_diff"] > 0


@pytest.mark.parametrize("jitter", [0.0, 0.5])
@pytest.mark.parametrize("defect, where", DEFECTS, ids=[d for d, _ in DEFECTS])
def test_lowering_defect_fails_under_any_isas_rounding(quantized, defect, where, jitter):
    name, q, qinfo, tok, texts = quantized
    if defect == "wrong-group-size" and not name.startswith("int4"):
        pytest.skip("group sizes exist in int4 only")
    if defect == "transposed" and name.startswith("int4"):
        pytest.skip("an int4 weight is group-wise: transposing it is a wrong group layout, checked as such")
    program = with_kernel_rounding(with_defect(q, defect, where=where), jitter=jitter, seed=0)
    p = gate(q, qinfo, tok, texts, program)
    assert not p["passed"], p


def test_bound_is_recorded_in_the_manifest_and_a_lowered_defect_fails(tmp_path):
    """Real lowering on this host's kernels: the program passes with the bound recorded; a lowered defect fails."""
    model, info = tiny_model(num_layers=1)
    with_biases(model)
    q, qinfo = quantize_model(model, info, QuantizeConfig(scheme="int8", embeddings="int8"))
    cfg = ExportConfig(formats=("pte",), max_seq_len=MAX_LEN, buckets=(MAX_LEN,), parity_samples=len(SENTENCES))
    b = export_bundle(q, qinfo, tmp_path / "ok", config=cfg, sample_texts=SENTENCES)
    p = b.manifest["parity"]["executorch"]
    assert p["passed"] and p["kernel_family"] == xnnpack_kernel_family()
    assert p["bound"]["applied"] in ("activation-rounding", "relative") and p["bound"]["why"]
    assert p["rms_diff"] <= p["bound"]["rms_limit"] and p["activation_rounding_error"] > 0
    assert set(b.manifest["export"]["stages"]) >= {"quantize", "pte_edge_lower_partition", "parity_executorch", "total"}

    broken = with_defect(q, "scale-x2", where="layers.0.query")
    bad = export_bundle(broken, qinfo, tmp_path / "bad", config=dataclasses.replace(cfg, parity_tolerance=1e9),
                        sample_texts=SENTENCES)
    tok = build_tokenizer(info.vocab_file, info.tokenizer)
    texts = parity_texts(SENTENCES, tok, buckets=(MAX_LEN,), samples=len(SENTENCES))
    p = check_parity(bad.path, q, parity_policy(qinfo.recipe), formats=("pte",), texts=texts, tokenizer=tok,
                     max_len=MAX_LEN)["executorch"]
    assert not p["passed"], p
