"""Synthetic cost tables for the targets tests: observations from known positive coefficients (no real calibration in CI)."""

from __future__ import annotations

import numpy as np

from edgenlp.models.encoder import EncoderShape
from edgenlp.targets.costmodel import COMPONENT_FEATURES, CostTable, Observation, features

# ms per unit of each feature; int8 runs its linears' FLOPs 2x faster than fp32 and costs no more elsewhere; int4 sits between
TRUTH = {
    "fp32": {"flops": 2.5e-8, "wbytes": 4e-8, "act": 2e-6, "probs": 5e-6, "calls": 4e-3, "one": 3e-2},
    "int8": {"flops": 1.25e-8, "wbytes": 4e-8, "act": 2e-6, "probs": 5e-6, "calls": 4e-3, "one": 3e-2},
    "int4": {"flops": 1.7e-8, "wbytes": 4e-8, "act": 2e-6, "probs": 5e-6, "calls": 4e-3, "one": 3e-2},
}
PARALLEL = {"flops": 0.9, "act": 0.6, "probs": 0.6, "wbytes": 0.5, "calls": 0.0, "one": 0.0}


def tiny_shape(heads, ffn, *, hidden=64, head_dim=16, vocab=500) -> EncoderShape:
    return EncoderShape(family="bert", vocab_size=vocab, hidden=hidden, heads=tuple(heads), head_dim=head_dim, ffn=tuple(ffn),
                        max_positions=128)  # fmt: skip


GRID = [((4, 4), (256, 256)), ((2, 2), (128, 128)), ((4, 1, 3), (256, 32, 0)), ((1,), (256,)), ((3, 0, 4, 2), (64, 256, 128, 0)),
        ((4,) * 4, (64,) * 4)]  # fmt: skip


def synthetic_observations(*, runtime="executorch", precisions=("fp32",), threads=(1, 2), seq_lens=(16, 64), noise=0.0, seed=0):
    rng = np.random.default_rng(seed)
    obs = []
    for heads, ffn in GRID:
        shape = tiny_shape(heads, ffn)
        for prec in precisions:
            for t in threads:
                for s in seq_lens:
                    comps = {}
                    for (comp, p), row in features(shape, seq_len=s, bits=prec).items():
                        truth = TRUTH[p]
                        comps[comp] = sum(truth[f] * v * ((1 - PARALLEL[f]) + PARALLEL[f] / t) for f, v in row.items())
                        comps[comp] *= 1 + noise * rng.standard_normal()
                    for comp in COMPONENT_FEATURES:
                        comps.setdefault(comp, 0.0)
                    obs.append(Observation(runtime, prec, t, s, shape.to_dict(), comps, sum(comps.values())))
    return obs


def synthetic_table() -> CostTable:
    return CostTable(synthetic_observations(precisions=("fp32",)) + synthetic_observations(runtime="onnx", precisions=("fp32", "int8")),
                     {"cpu": "synthetic"})  # fmt: skip
