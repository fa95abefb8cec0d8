"""Every quantized path through both runtimes on this host's ISA (issue: lowering that holds on every host).

The linears' scheme (int8, int4, mixed) x the word table (fp32, int8, int4) x vocabulary trimming,
in a pairwise covering set: every pair of choices appears in some row (9 rows instead of 18), each
exported to ExecuTorch and ONNX on a tiny model. A host whose kernels round differently fails here,
in CI, and not in a user's hands: the parity gate must pass with its bound recorded, and the bundle,
run as a user runs it (tokenizer + runtime), must match the eager quantized model within that bound.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from edgenlp_testing import tiny_model, write_task_dir
from edgenlp.bundle import Bundle
from edgenlp.export.api import ExportConfig, export_bundle
from edgenlp.quantize.api import quantize_model
from edgenlp.quantize.config import QuantizeConfig
from edgenlp.run.base import get_runner

MIXED_BITS = (("layers.0.query", 32), ("layers.0.ffn_in", 4), ("layers.1.ffn_out", 4))
SCHEMES, TABLES, TRIM = ("int8", "int4", "mixed"), (None, "int8", "int4"), (False, True)
ROWS = [("int8", None, False), ("int8", "int8", True), ("int8", "int4", False),
        ("int4", None, True), ("int4", "int8", False), ("int4", "int4", True),
        ("mixed", None, False), ("mixed", "int8", True), ("mixed", "int4", False)]
# The suite runs three rows in which every choice of each factor appears (about 15 s a row); `-m slow` runs all nine.
IN_CI = {("int8", "int8", True), ("int4", "int4", True), ("mixed", None, False)}
EXPORT = ExportConfig(max_seq_len=16, buckets=(16,), parity_samples=6)


def test_the_rows_cover_every_pair():
    for i, values in enumerate((SCHEMES, TABLES, TRIM)):
        assert {r[i] for r in IN_CI} == set(values)  # every choice in the suite's rows too
    for (a, va), (b, vb) in itertools.combinations(enumerate((SCHEMES, TABLES, TRIM)), 2):
        for x, y in itertools.product(va, vb):
            assert any(r[a] == x and r[b] == y for r in ROWS), (x, y)


@pytest.fixture(scope="module")
def task(tmp_path_factory):
    from edgenlp.data.tasks import load_task

    train = [("a gripping , funny film", "pos"), ("dull and lifeless", "neg"), ("the worst film of the year", "neg"),
             ("a joy to watch from start to finish", "pos"), ("funny and moving", "pos"), ("tedious", "neg")]
    dev = [("a joy to watch", "pos"), ("not good , not bad", "neg"), ("the film was funny", "pos")]
    return load_task(write_task_dir(tmp_path_factory.mktemp("every-path"), train=train, dev=dev))


@pytest.mark.parametrize("scheme, table, trim", [r if r in IN_CI else pytest.param(*r, marks=pytest.mark.slow) for r in ROWS],
                         ids=[f"{s}-table_{t or 'fp32'}{'-trimmed' if v else ''}" for s, t, v in ROWS])
def test_quantized_path_through_both_runtimes(scheme, table, trim, task, tmp_path):
    model, info = tiny_model()
    cfg = QuantizeConfig(scheme=scheme, embeddings=table, trim_vocab=trim,
                         layer_bits=MIXED_BITS if scheme == "mixed" else ())
    qmodel, qinfo = quantize_model(model, info, cfg, task=task)
    out = export_bundle(qmodel, qinfo, tmp_path / "b", task=task, config=EXPORT).path
    b = Bundle.open(out)
    assert b.manifest["quantization"]["embeddings"] == table and bool(b.manifest["tokenizer"].get("id_map")) == trim
    texts = list(task.train.texts + task.dev.texts)
    for runtime in ("executorch", "onnx"):
        p = b.manifest["parity"][runtime]
        assert p["passed"] and p["bound"]["applied"] and p["bound"]["why"], (runtime, p)
        assert p["max_abs_diff"] <= p["tolerance"]
        with get_runner(out, runtime=runtime) as r:
            ids = r.token_ids(texts)
            got = r.predict_logits(texts)
        with torch.no_grad():
            ref = np.stack([qmodel(torch.tensor([x]), torch.ones(1, len(x), dtype=torch.long))[0].numpy() for x in ids])
        # the runtime as a user runs it matches the eager quantized model within the bound its gate applied
        assert np.abs(got - ref).max() <= p["tolerance"], (runtime, np.abs(got - ref).max(), p["tolerance"])
