"""User-facing errors.

Every error a user can cause (missing file, malformed TSV, unknown model, bad
option, corrupted artifact) is raised as :class:`EdgeNLPError`. The CLI prints
its message on one line and exits non-zero; no traceback is shown.
"""

from __future__ import annotations

import enum


class ExitCode(enum.IntEnum):
    """Exit statuses of ``edgenlp`` and ``edgenlp-run`` (runtime/tools/edgenlp_run.cpp uses the same numbers)."""

    OK = 0
    FAILURE = 1  # not the user's fault: a runtime or model failure, a bug
    USER_ERROR = 2  # bad input the user can fix: one ``error:`` line
    INTERRUPTED = 130


class EdgeNLPError(Exception):
    """An error caused by input the user can fix; the message is one line."""

    exit_code = ExitCode.USER_ERROR

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(str(message).split()))


class DataError(EdgeNLPError):
    """A task folder or TSV file that cannot be read."""


class BundleError(EdgeNLPError):
    """A bundle that is missing files, corrupted or inconsistent."""


class ParityError(EdgeNLPError):
    """A lowered model whose outputs differ from eager PyTorch beyond tolerance."""
