"""Progress off a terminal: plain lines, throttled, and one when a task completes."""

from __future__ import annotations

import io

import pytest

from edgenlp.utils import LineProgress, progress_display


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def test_line_progress_throttles_and_reports_completion():
    out, clock = io.StringIO(), Clock()
    p = LineProgress(every_s=30, stream=out, clock=clock)
    t = p.add_task("full", total=300, loss=float("nan"), eps=0.0)
    for step in range(300):
        clock.t = step * 0.5  # 150 s in all
        p.update(t, advance=1, loss=0.5 - step / 1000, eps=64.0, description="full e1 learners")
    lines = out.getvalue().splitlines()
    assert len(lines) == 4 + 1, lines  # at 30, 60, 90 and 120 s (every 60 steps), then the completion line
    assert lines[0].startswith("full e1 learners: 61/300 (20%), loss 0.44, 64.0 ex/s, 0m30s elapsed"), lines[0]
    assert lines[-1].startswith("full e1 learners: 300/300 (100%)") and lines[-1].endswith("2m29s elapsed")
    p.advance(t)  # past the total: no second completion line
    assert len(out.getvalue().splitlines()) == 5


def test_progress_display_off_a_terminal_is_plain_lines(monkeypatch):
    import sys

    monkeypatch.setattr(sys, "stderr", io.StringIO())  # not a terminal
    assert isinstance(progress_display(True, lambda: "rich bar"), LineProgress)
    with progress_display(False, lambda: "rich bar") as bar:
        assert bar is None

    class Tty(io.StringIO):
        def isatty(self):
            return True

    monkeypatch.setattr(sys, "stderr", Tty())
    assert progress_display(True, lambda: "rich bar") == "rich bar"


class _Stop(Exception):
    pass


@pytest.mark.parametrize("quiet", [False, True], ids=["default", "quiet"])
@pytest.mark.parametrize("verb, target, flag", [
    ("finetune", "edgenlp.finetune.trainer.finetune", "show_progress"),
    ("prune", "edgenlp.prune.api.prune", "progress"),
    ("distill", "edgenlp.prune.recovery.distill", "progress"),
    ("sparsify", "edgenlp.prune.sparsity.sparsify", "progress"),
])
def test_long_verbs_show_progress_in_a_log_unless_quiet(verb, target, flag, quiet, monkeypatch, tiny_ft_dir,
                                                        dyn_task_dir, tmp_path):
    """Redirected to a file (click's runner: stderr is not a terminal), the long verbs still ask for progress, which
    :func:`edgenlp.utils.progress_display` then writes as plain lines; ``--quiet`` turns it off."""
    from click.testing import CliRunner

    from edgenlp.cli import main

    asked = {}

    def step(*args, **kwargs):
        asked["progress"] = kwargs[flag]
        raise _Stop

    monkeypatch.setattr(target, step)
    args = [verb, str(tiny_ft_dir), "--task", str(dyn_task_dir), "--out", str(tmp_path / "out")]
    args += ["--teacher", str(tiny_ft_dir)] if verb == "distill" else []
    r = CliRunner().invoke(main, args + (["--quiet"] if quiet else []))
    assert isinstance(r.exception, _Stop), r.output
    assert asked["progress"] is (not quiet)
