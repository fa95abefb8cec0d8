"""Progress off a terminal: plain lines, throttled, and one when a task completes."""

from __future__ import annotations

import io

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
