"""Errors a user can cause on a board: each names the device and the step that failed.

The CLI prints them as one line, e.g.::

    error: ssh://pi@raspberrypi.local: connect: cannot reach the host (ssh: Could not resolve hostname ...)
    error: qemu:cortex-a53: run: edgenlp-run was killed (SIGKILL), most likely by the out-of-memory killer ...
"""

from __future__ import annotations

from edgenlp.errors import EdgeNLPError


class BoardError(EdgeNLPError):
    """Something went wrong on a board; ``device`` is its URI and ``step`` what edgenlp was doing."""

    def __init__(self, device: str, step: str, message: str) -> None:
        super().__init__(f"{device}: {step}: {message}")
        self.device = device
        self.step = step


class BoardUnreachable(BoardError):
    """The host does not answer (DNS, refused, timeout, no route)."""


class BoardAuthError(BoardError):
    """The board refused us: ssh key not accepted, host key changed, adb not authorized."""


class ToolMissing(BoardError):
    """A local program the transport needs (``ssh``, ``scp``, ``adb``, ``qemu-aarch64``) is not on PATH."""


class DeviceOffline(BoardError):
    """adb sees no such device, or sees it offline."""


class WrongArchitecture(BoardError):
    """The board's CPU architecture has no prebuilt runner, or the runner cannot execute there."""


class NoSpace(BoardError):
    """The board's temporary directory has not enough free space for the runner and the bundle."""


class RunnerKilled(BoardError):
    """The runner died from a signal (SIGKILL: most likely the out-of-memory killer)."""


class RunnerFailed(BoardError):
    """The runner exited with an error of its own (bad bundle, bad input); its message is included."""
