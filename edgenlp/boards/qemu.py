"""``qemu:CPU``: the aarch64 runner under local ``qemu-aarch64 -cpu CPU``, the stand-in for a board in tests.

The "device" is a temporary directory on this machine; shell steps run here
and the runner runs under qemu-user with the cross toolchain's sysroot
(``-L /usr/aarch64-linux-gnu``). The probe reports the emulated CPU model with
this machine's cores, memory and clusters, and says it is emulated: qemu times
are not device times (user-mode emulation runs ~50x slower than the real core
and its per-operator shares differ), but every step of a real board runs.
"""

from __future__ import annotations

import dataclasses
import re
import shutil
import subprocess
from pathlib import Path

from edgenlp.boards.base import Board, require_tool, run_local
from edgenlp.boards.errors import BoardError, WrongArchitecture
from edgenlp.boards.probe import DeviceInfo

SYSROOT = "/usr/aarch64-linux-gnu"
QEMU = "qemu-aarch64"


class QemuBoard(Board):
    kind = "qemu"

    def __init__(self, cpu: str, *, timeout_s: float = 3600.0, sysroot: str = SYSROOT) -> None:
        super().__init__(f"qemu:{cpu}", timeout_s=timeout_s)
        if not re.fullmatch(r"[A-Za-z0-9._-]+", cpu):
            raise BoardError(self.uri, "connect", "the CPU name may hold letters, digits, '.', '_' and '-' only")
        self.cpu = cpu
        self.sysroot = sysroot

    @classmethod
    def from_uri(cls, uri: str, **kw) -> "QemuBoard":
        return cls(uri.split(":", 1)[1], **kw)

    def _sh(self, script, *, step, timeout=None, check=True):
        proc = run_local(["sh", "-c", script], uri=self.uri, step=step, timeout=timeout or self.timeout_s)
        if check and proc.returncode != 0:
            tail = " | ".join(proc.stderr.strip().splitlines()[-3:])
            raise BoardError(self.uri, step, f"command failed (exit {proc.returncode}): {tail}")
        return proc

    def open(self) -> None:
        qemu = require_tool(QEMU, self.uri, "connect", "install qemu-user (bash runtime/setup_deps.sh)")
        if not Path(self.sysroot, "lib", "ld-linux-aarch64.so.1").exists():
            raise BoardError(self.uri, "connect", f"{self.sysroot} has no aarch64 C library; install the cross toolchain "
                             "(bash runtime/setup_deps.sh)")  # fmt: skip
        cpus = run_local([qemu, "-cpu", "help"], uri=self.uri, step="connect", timeout=30).stdout.split()
        if self.cpu not in cpus:
            known = ", ".join(c for c in cpus if c.startswith(("cortex", "max", "neoverse", "a64fx")))
            raise WrongArchitecture(self.uri, "connect", f"qemu-aarch64 has no CPU model {self.cpu!r}; it has {known}")
        super().open()

    def _push_dir(self, local: Path, remote: str, *, step: str = "push") -> None:
        for p in local.iterdir():
            shutil.copy2(p, Path(remote) / p.name)

    def _pull_file(self, remote: str, local: Path) -> None:
        try:
            shutil.copyfile(remote, local)
        except OSError as exc:
            raise BoardError(self.uri, "pull", f"{remote}: {exc.strerror}") from None

    def _runner_prefix(self, rt_dir: str) -> list[str]:
        return [QEMU, "-L", self.sysroot, "-cpu", self.cpu, "-E", f"LD_LIBRARY_PATH={rt_dir}", f"{rt_dir}/edgenlp-run"]

    def _adjust_probe(self, info: DeviceInfo) -> DeviceInfo:
        version = subprocess.run([QEMU, "--version"], capture_output=True, text=True).stdout.splitlines()[0]
        return dataclasses.replace(
            info, arch="aarch64", cpu_model=f"{self.cpu} (emulated on {info.cpu_model})", isa=(), os="linux",
            libc=f"{info.libc} (sysroot {self.sysroot})" if info.libc else None, emulated=version,
        )  # fmt: skip


__all__ = ["QemuBoard"]
