"""``adb`` / ``adb:SERIAL``: an Android phone (or any adb device) through the system ``adb``.

Files go to ``/data/local/tmp/edgenlp-XXXX`` (``adb push``), commands run with
``adb shell`` and results come back with ``adb pull``. Android has no glibc,
so the aarch64 runner is shipped with the cross toolchain's loader and C/C++
runtime and started through that loader (see :mod:`edgenlp.boards.deploy`).
The exit status of a command is read from a marker line, so old adb versions
without the shell protocol report failures too.

Untested on hardware: the tests drive this transport through a fake ``adb``.
"""

from __future__ import annotations

import re
from pathlib import Path

from edgenlp.boards.base import Board, require_tool, run_local
from edgenlp.boards.errors import BoardAuthError, BoardError, DeviceOffline, NoSpace
from edgenlp.errors import EdgeNLPError

ROOT = "/data/local/tmp"
MARK = "__edgenlp_rc="


class AdbBoard(Board):
    kind = "adb"

    def __init__(self, serial: str | None = None, *, timeout_s: float = 3600.0) -> None:
        super().__init__(f"adb:{serial}" if serial else "adb", timeout_s=timeout_s)
        self.serial = serial

    @classmethod
    def from_uri(cls, uri: str, **kw) -> "AdbBoard":
        serial = uri.split(":", 1)[1] if ":" in uri else None
        if serial is not None and not re.fullmatch(r"[A-Za-z0-9._:\-]+", serial):
            raise EdgeNLPError(f"--on {uri!r}: not a device serial (see `adb devices`)")
        return cls(serial or None, **kw)

    def adb_argv(self, *args: str) -> list[str]:
        return ["adb", *(["-s", self.serial] if self.serial else []), *args]

    def _tmp_root(self) -> str:
        return ROOT

    def _check_transport(self, proc, step: str) -> None:
        out = (proc.stderr + proc.stdout).lower()
        tail = " | ".join((proc.stderr or proc.stdout).strip().splitlines()[-2:])
        if "unauthorized" in out:
            raise BoardAuthError(self.uri, step, f"the device has not authorized this computer: accept the USB debugging prompt on it ({tail})")
        if "no devices/emulators found" in out or "not found" in out and "device" in out and "error:" in out:
            raise DeviceOffline(self.uri, step, f"no such device connected (see `adb devices`) ({tail})")
        if "device offline" in out or "device still authorizing" in out:
            raise DeviceOffline(self.uri, step, f"the device is offline: reconnect it or restart adb ({tail})")
        if "more than one device" in out:
            raise DeviceOffline(self.uri, step, f"several devices are connected: name one, --on adb:SERIAL ({tail})")
        if "no space left on device" in out:
            raise NoSpace(self.uri, step, tail)

    def _sh(self, script, *, step, timeout=None, check=True):
        proc = run_local(self.adb_argv("shell", f"{script}\necho {MARK}$?"), uri=self.uri, step=step, timeout=timeout or self.timeout_s)
        lines = proc.stdout.splitlines()
        rc_line = next((l for l in reversed(lines) if l.startswith(MARK)), None)
        if rc_line is None:  # adb itself failed: no device, offline, unauthorized
            self._check_transport(proc, step)
            tail = " | ".join((proc.stderr or proc.stdout).strip().splitlines()[-2:])
            raise BoardError(self.uri, step, f"adb shell failed (exit {proc.returncode}): {tail}")
        rc = int(rc_line[len(MARK):].strip() or 1)
        proc.stdout = "\n".join(l for l in lines if not l.startswith(MARK)) + "\n"
        proc.returncode = rc
        if check and rc != 0:
            if "no space left on device" in (proc.stderr + proc.stdout).lower():
                raise NoSpace(self.uri, step, proc.stderr.strip()[-200:])
            raise BoardError(self.uri, step, f"command failed (exit {rc}): {' | '.join(proc.stderr.strip().splitlines()[-3:])}")
        return proc

    def _adb(self, *args: str, step: str) -> None:
        proc = run_local(self.adb_argv(*args), uri=self.uri, step=step, timeout=self.timeout_s)
        if proc.returncode != 0 or "error:" in proc.stderr.lower():
            self._check_transport(proc, step)
            tail = " | ".join((proc.stderr or proc.stdout).strip().splitlines()[-2:])
            raise BoardError(self.uri, step, f"adb {args[0]} failed (exit {proc.returncode}): {tail}")

    def open(self) -> None:
        require_tool("adb", self.uri, "connect", "install Android platform-tools (apt-get install adb) and put adb on PATH")
        super().open()

    def _push_dir(self, local: Path, remote: str, *, step: str = "push") -> None:
        self._adb("push", *[str(p) for p in sorted(local.iterdir())], remote + "/", step=step)

    def _pull_file(self, remote: str, local: Path) -> None:
        self._adb("pull", remote, str(local), step="pull")


__all__ = ["AdbBoard"]
