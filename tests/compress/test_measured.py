"""Measured planning (edgenlp.compress.measured): the validation split, the choice among built candidates, the cache."""

from __future__ import annotations

import json

import pytest

from edgenlp.compress.config import PRESETS, CompressConfig
from edgenlp.compress.measured import add_to_cache, cache_rows, choose_measured, validation_rows
from edgenlp.compress.planning import plan_for_compress
from edgenlp.data.tasks import Split, TaskData
from edgenlp.errors import DataError


def _task(n_train=50, overlap=("shared one", "shared two")):
    texts = [f"train sentence {i}" for i in range(n_train)] + list(overlap) + ["twice", "twice"]
    labels = [("pos", "neg")[i % 2] for i in range(n_train)] + ["pos"] * len(overlap) + ["neg", "neg"]
    dev = Split(tuple(overlap) + ("only in dev",), ("pos",) * len(overlap) + ("neg",), "dev.tsv")
    return TaskData("t", ("neg", "pos"), Split(tuple(texts), tuple(labels), "train.tsv"), dev)


def test_validation_split_is_disjoint_from_dev_and_from_what_is_tuned_on():
    task = _task()
    for seed in range(20):
        tuning, val = task.hold_out(10, seed=seed)
        assert len(val) == 10
        assert not set(val.texts) & set(task.dev.texts)  # never a dev sentence
        assert not set(zip(val.texts, val.labels)) & set(zip(tuning.train.texts, tuning.train.labels))
        assert tuning.dev == val and tuning.labels == task.labels  # the tuning task evaluates on validation
        held = set(zip(val.texts, val.labels))
        # every train row is either tuned on or held out (a duplicate of a held-out row goes with it)
        assert len(tuning.train) + sum(row in held for row in zip(task.train.texts, task.train.labels)) == len(task.train)
    assert task.hold_out(10, seed=3)[1] == task.hold_out(10, seed=3)[1]  # seeded
    assert task.hold_out(10, seed=3)[1] != task.hold_out(10, seed=4)[1]
    with pytest.raises(DataError, match="too few"):
        _task(n_train=3).hold_out(10, seed=0)
    with pytest.raises(ValueError):
        task.hold_out(0, seed=0)
    assert [validation_rows(n) for n in (67349, 9003, 64, 4)] == [1000, 900, 6, 1]


def _row(drop, *, fails=(), label="c"):
    return {"candidate": {"bits": label}, "measured_drop": drop, "fails": list(fails), "meets": not fails}


def test_the_first_candidate_meeting_every_bound_as_measured_wins():
    rows = [_row(2.5, fails=["accuracy"], label="a"), _row(0.4, label="b"), _row(0.1, label="c")]
    i, why = choose_measured(rows)
    assert i == 1 and "#1 (accuracy)" in why  # the plan's order decides among those that meet the bounds
    assert choose_measured([_row(0.3), _row(0.1)])[0] == 0
    assert choose_measured([_row(0.9, fails=["size"]), _row(0.2)])[0] == 1  # a measured size miss counts too
    i, why = choose_measured([_row(3.0, fails=["accuracy"]), _row(1.5, fails=["accuracy"]), _row(2.0, fails=["accuracy"])])
    assert i == 1 and "no candidate met" in why  # none meets: the smallest measured drop, for verify to judge
    with pytest.raises(ValueError):
        choose_measured([])


def test_measurements_are_cached_per_model_task_and_finetuning(tmp_path):
    path = tmp_path / "cache.json"
    key = {"model": {"name": "m"}, "data": {"task": "t"}, "finetune": {"method": "learner"}, "seed": 0}
    assert cache_rows(key, path) == []
    add_to_cache(key, [{"candidate": {"bits": "int8"}, "drop": 0.4}], path)
    add_to_cache({**key, "seed": 1}, [{"candidate": {"bits": "int4"}, "drop": 1.2}], path)
    rows = cache_rows(key, path)
    assert [(r["candidate"], r["drop"]) for r in rows] == [({"bits": "int8"}, 0.4)] and "when" in rows[0]
    path.write_text("{not json")
    assert cache_rows(key, path) == []  # unreadable: planned as if empty, then rewritten
    add_to_cache(key, [{"candidate": {"bits": "int8"}, "drop": 0.5}], path)
    assert [r["drop"] for r in cache_rows(key, path)] == [0.5]
    path.write_text(json.dumps({"version": 1, "rows": [{"key": key, "candidate": {"bits": "x"}, "drop": float("nan")}]}))
    assert cache_rows(key, path) == []  # a row without a finite drop is ignored



def test_inputs_are_keyed_by_content_not_by_path_or_time(tmp_path):
    """The data set copied elsewhere or touched keeps its key (so its stages and measured rows); one byte changed
    does not."""
    import os

    from edgenlp.compress.pipeline import file_key, model_key

    a = tmp_path / "a" / "train.tsv"
    a.parent.mkdir()
    a.write_text("sentence\tlabel\ngood\t1\n")
    key = file_key(a)
    b = tmp_path / "b" / "train.tsv"
    b.parent.mkdir()
    b.write_bytes(a.read_bytes())
    os.utime(a, ns=(1, 1))
    assert file_key(a) == file_key(b) == key
    a.write_text("sentence\tlabel\ngood\t0\n")
    assert file_key(a) != key and file_key(a)["bytes"] == key["bytes"]
    (tmp_path / "a" / "config.json").write_text("{}")
    (tmp_path / "b" / "config.json").write_text("{}")
    assert model_key(str(tmp_path / "b")) == model_key(str(tmp_path / "a"))  # a model directory: its files' content
    (tmp_path / "b" / "config.json").write_text('{"hidden": 8}')
    assert model_key(str(tmp_path / "b")) != model_key(str(tmp_path / "a"))


@pytest.fixture(scope="module")
def planned():
    from edgenlp.compress.planning import load_target, resolve_budgets
    from edgenlp.targets.costmodel import MINILM_L6

    target = load_target("pixel-7")
    budgets = resolve_budgets(target)
    task = _task()

    def run(**kw):
        return plan_for_compress(target, budgets, shape=MINILM_L6, num_labels=2, preset=PRESETS["quick"], excluded=[],
                                 task=task, max_drop=1.0, **kw)

    return run


def test_the_shortlist_is_the_plans_ranking(planned):
    doc = planned(measure=3)
    short = doc["shortlist"]
    assert len(short) == 3 and short[0]["candidate"] == doc["chosen"]
    assert all(p["fits"] for p in short) and len({json.dumps(p["candidate"], sort_keys=True) for p in short}) == 3
    assert [p["candidate"] for p in planned(measure=1)["shortlist"]] == [doc["chosen"]]
    # its head measured far over the bound: the plan's choice is the ranking's best candidate not pruned like it
    # (those share its pruned model, so its measured loss; tests/targets/test_prior.py checks the shift itself)
    second = planned(measure=1, measured=[{"candidate": doc["chosen"], "drop": 50.0}])
    pruning = lambda c: (c.get("prune_method"), c.get("sparsity", 0.0), c.get("block_sparsity", 0.0))  # noqa: E731
    assert pruning(second["chosen"]) != pruning(doc["chosen"]) and second["chosen"] == short[1]["candidate"]


def test_the_shortlist_tries_another_pruning_before_another_quantization(planned):
    """Slot 2 holds the best-ranked candidate pruned otherwise than slot 1 (they share no pruned model), and the
    shortlist's prunings come in rank order before any pruning repeats."""
    pruning = lambda c: (c.get("prune_method"), c.get("sparsity", 0.0), c.get("block_sparsity", 0.0))  # noqa: E731
    doc = planned(measure=4)
    short = [p["candidate"] for p in doc["shortlist"]]
    keys = [pruning(c) for c in short]
    distinct = len({pruning(p["candidate"]) for p in doc["considered"] if p["fits"]})
    assert len(set(keys[: min(4, distinct)])) == min(4, distinct), short
    assert distinct >= 2 and keys[0] != keys[1]


def test_a_measured_drop_replaces_the_priors_for_that_candidate(planned):
    doc = planned(measure=2)
    first = doc["shortlist"][0]
    again = planned(measure=2, measured=[{"candidate": first["candidate"], "drop": 0.03, "source": "run x"}])
    point = next(p for p in again["considered"] if p["candidate"] == first["candidate"])
    assert point["predicted_drop"] == pytest.approx(0.03)
    assert point["prior"]["basis"] == "measured" and point["prior"]["sources"] == ["run x"]
    assert again["measured_rows_used"] == 1
    # candidates pruned otherwise keep the prior's drop where the measured one lost less than predicted
    pruning = lambda c: (c.get("prune_method"), c.get("sparsity", 0.0), c.get("block_sparsity", 0.0))  # noqa: E731
    before = {json.dumps(p["candidate"], sort_keys=True): p["predicted_drop"] for p in doc["considered"]}
    residual = 0.03 - before[json.dumps(first["candidate"], sort_keys=True)]
    for p in again["considered"]:
        if p["candidate"] == first["candidate"]:
            continue
        was = before[json.dumps(p["candidate"], sort_keys=True)]
        alike = pruning(p["candidate"]) == pruning(first["candidate"])
        assert p["predicted_drop"] == pytest.approx(was + residual if alike else was), p["candidate"]


def test_measure_is_validated():
    assert CompressConfig().measure == 2
    for bad in (0, -1, 17, 1.5, True):
        with pytest.raises(ValueError, match="measure"):
            CompressConfig(measure=bad)


def test_measure_zero_is_one_error_line():
    from click.testing import CliRunner

    from edgenlp.cli import main

    r = CliRunner().invoke(main, ["compress", "--measure", "0", "--out", "/tmp/never-written-measure-0"])
    assert r.exit_code == 2
    lines = [x for x in r.output.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and "measure" in lines[0], r.output


def test_trimmed_candidates_are_priced_on_the_tasks_own_table(planned):
    """With the task's kept-token count, a trimmed candidate's predicted size shrinks by exactly the rows it does not
    keep (at its table's precision); untrimmed candidates do not move. Without it the planner's prior share holds."""
    from edgenlp.targets.costmodel import MINILM_L6
    from edgenlp.targets.planner import TRIM_PRIOR

    prior_rows = round(MINILM_L6.vocab_size * TRIM_PRIOR)
    base = {json.dumps(c["candidate"], sort_keys=True): c for c in planned()["considered"]}
    own = {json.dumps(c["candidate"], sort_keys=True): c for c in planned(trimmed_vocab_size=11575)["considered"]}
    assert base.keys() == own.keys()
    from edgenlp.models.arithmetic import weight_bytes

    def table(rows: int, emb: str | None) -> float:  # one scale per row, as the quantizer stores the table
        return weight_bytes(rows, MINILM_L6.hidden, {"int4": 4, "int8": 8, None: 32}[emb])

    checked = set()
    for key, c in base.items():
        cand = c["candidate"]
        saved = (c["predicted_size_mb"] - own[key]["predicted_size_mb"]) * 1e6  # MB of 10^6 bytes
        if not cand["trim_vocab"]:
            assert saved == 0
        else:
            assert saved == pytest.approx(table(prior_rows, cand["embeddings"]) - table(11575, cand["embeddings"])), cand
            checked.add(cand["embeddings"])
    assert checked >= {"int4", "int8"}


def test_a_pruning_built_before_is_priced_on_the_shape_it_had(planned, tmp_path):
    """`fast` keeps more heads than neurons: once a candidate of that pruning is built, the cache keeps its heads and
    FFN per layer, and every candidate of the same pruning is priced on that shape (other prunings stay nominal)."""
    import dataclasses

    from edgenlp.compress.measured import recalled, remember
    from edgenlp.compress.planning import load_target, resolve_budgets
    from edgenlp.targets.costmodel import MINILM_L6, CostModel
    from edgenlp.targets.planner import resolve_bits

    heads, ffn = [12, 9, 7, 8, 1, 11], [1414, 1275, 716, 238, 169, 18]  # fast 50% on SST-2, as built
    cand = {"prune_method": "fast", "sparsity": 0.5, "bits": "int8", "embeddings": "int4", "trim_vocab": True}
    row = {"candidate": cand, "measured_drop": 0.8, "val_rows": 1000, "heads": heads, "ffn": ffn}
    key = {"model": {"name": "m"}, "data": {"task": "t"}, "finetune": {}, "seed": 0}
    remember(key, [row], source="test", path=tmp_path / "cache.json")
    measured = recalled(key, tmp_path / "cache.json")
    assert measured[0]["heads"] == heads and measured[0]["ffn"] == ffn
    base = {json.dumps(c["candidate"], sort_keys=True): c for c in planned()["considered"]}
    built = {json.dumps(c["candidate"], sort_keys=True): c for c in planned(measured=measured)["considered"]}
    target = load_target("pixel-7")
    cm, budgets = CostModel.for_target(target), resolve_budgets(target)
    moved = 0
    for k, c in built.items():
        cd = c["candidate"]
        if (cd["prune_method"], cd["sparsity"]) == ("fast", 0.5):
            assert c["shape"] == "as built"
            if not cd.get("exits") and not cd.get("block_sparsity") and not cd["trim_vocab"]:
                real = dataclasses.replace(MINILM_L6, heads=tuple(heads), ffn=tuple(ffn))
                want = cm.predict(real, bits=resolve_bits(cd["bits"], 6), embeddings=cd["embeddings"],
                                  seq_len=budgets.seq_len, threads=budgets.threads)
                assert c["predicted_latency_ms"] == pytest.approx(want.latency_ms)
                assert c["predicted_latency_ms"] > base[k]["predicted_latency_ms"]  # more heads: more attention
                moved += 1
        else:
            assert c["shape"] in ("nominal", "unpruned") and c["predicted_latency_ms"] == base[k]["predicted_latency_ms"]
    assert moved
