"""Resumable stages: skip finished ones, redo changed ones, never leave a half-written stage."""

from __future__ import annotations

import json

import pytest

from edgenlp.compress.stages import RECORD, StageRunner


def make_stage(calls, name, payload):
    def fn(tmp):
        calls.append(name)
        (tmp / "out.txt").write_text(payload)
        return {"payload": payload}

    return fn


def pipeline(workdir, calls, *, a="A", b="B"):
    runner = StageRunner(workdir)
    ra = runner.run("first", make_stage(calls, "first", a), inputs={"a": a})
    rb = runner.run("second", make_stage(calls, "second", b), inputs={"b": b}, upstream=(ra,))
    return runner, ra, rb


def test_rerun_skips_finished_stages(tmp_path):
    calls = []
    _, ra, rb = pipeline(tmp_path, calls)
    assert calls == ["first", "second"] and not ra.skipped
    assert json.loads((tmp_path / "second" / RECORD).read_text())["result"] == {"payload": "B"}
    _, ra2, rb2 = pipeline(tmp_path, calls)
    assert calls == ["first", "second"] and ra2.skipped and rb2.skipped
    assert rb2.fingerprint == rb.fingerprint and rb2.result == {"payload": "B"}


def test_changed_input_redoes_that_stage_and_everything_downstream(tmp_path):
    calls = []
    pipeline(tmp_path, calls)
    pipeline(tmp_path, calls, b="B2")
    assert calls == ["first", "second", "second"]
    assert (tmp_path / "second" / "out.txt").read_text() == "B2"
    pipeline(tmp_path, calls, a="A2", b="B2")  # upstream change invalidates the second stage too
    assert calls[-2:] == ["first", "second"]


def test_interrupted_stage_leaves_nothing_and_the_next_run_redoes_it(tmp_path):
    calls = []
    runner = StageRunner(tmp_path)
    runner.run("first", make_stage(calls, "first", "A"), inputs={"a": "A"})

    def dies(tmp):
        (tmp / "partial.bin").write_bytes(b"\0" * 10)
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        runner.run("second", dies, inputs={"b": "B"})
    assert not (tmp_path / "second").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["first"]
    _, _, rb = pipeline(tmp_path, calls)
    assert not rb.skipped and (tmp_path / "second" / "out.txt").read_text() == "B"


def test_stale_temporary_folders_are_removed_at_start(tmp_path):
    stale = tmp_path / ".second.tmp-abc"
    stale.mkdir()
    (stale / "junk").write_text("x")
    StageRunner(tmp_path)
    assert not stale.exists()


def test_a_corrupt_record_counts_as_unfinished(tmp_path):
    calls = []
    pipeline(tmp_path, calls)
    (tmp_path / "first" / RECORD).write_text("{not json")
    pipeline(tmp_path, calls)
    assert calls == ["first", "second", "first", "second"]
