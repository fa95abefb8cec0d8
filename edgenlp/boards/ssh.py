"""``ssh://[user@]host[:port]``: a Linux board through the system OpenSSH client.

Uses ``ssh`` and ``scp`` as you would: your ``~/.ssh/config`` (host aliases,
identity files, jump hosts) and your agent apply; ``BatchMode=yes`` means no
password or passphrase prompt ever (set up key authentication first: ``ssh-copy-id``);
nothing secret is passed on the command line. One master connection
(``ControlMaster``) carries every step, so a profile opens one SSH session.
Extra client options: ``open_board(uri, ssh_options=("-F", "my_config"))`` or
``EDGENLP_SSH_OPTIONS="-F my_config"`` for the CLI.
"""

from __future__ import annotations

import os
import shlex
import shutil
import tempfile
from pathlib import Path
from urllib.parse import urlsplit

from edgenlp.boards.base import Board, require_tool, run_local
from edgenlp.boards.errors import BoardAuthError, BoardError, BoardUnreachable, NoSpace
from edgenlp.errors import EdgeNLPError

UNREACHABLE = ("could not resolve hostname", "connection refused", "connection timed out", "no route to host",
               "network is unreachable", "operation timed out", "connection closed by", "connection reset",
               "name or service not known", "temporary failure in name resolution")  # fmt: skip
AUTH = ("permission denied", "host key verification failed", "too many authentication failures",
        "no more authentication methods", "remote host identification has changed")  # fmt: skip


class SshBoard(Board):
    kind = "ssh"

    def __init__(self, host: str, *, user: str | None = None, port: int | None = None, ssh_options: tuple[str, ...] = (),
                 connect_timeout_s: int = 15, timeout_s: float = 3600.0) -> None:  # fmt: skip
        uri = f"ssh://{user + '@' if user else ''}{host}{f':{port}' if port else ''}"
        super().__init__(uri, timeout_s=timeout_s)
        self.host, self.user, self.port = host, user, port
        self.ssh_options = tuple(ssh_options)
        self.connect_timeout_s = connect_timeout_s
        self._control: str | None = None

    @classmethod
    def from_uri(cls, uri: str, **kw) -> "SshBoard":
        parts = urlsplit(uri)
        try:
            port = parts.port
        except ValueError:
            raise EdgeNLPError(f"--on {uri!r}: the port must be a number in 1..65535") from None
        if not parts.hostname or parts.path not in ("", "/") or parts.password:
            raise EdgeNLPError(f"--on {uri!r}: use ssh://user@host[:port] (no path; no password: use keys or your agent)")
        if "ssh_options" not in kw and os.environ.get("EDGENLP_SSH_OPTIONS"):
            kw["ssh_options"] = tuple(shlex.split(os.environ["EDGENLP_SSH_OPTIONS"]))
        return cls(parts.hostname, user=parts.username, port=port, **kw)

    # ------------------------------------------------------------------ commands
    def _common(self) -> list[str]:
        opts = ["-o", "BatchMode=yes", "-o", f"ConnectTimeout={self.connect_timeout_s}", "-o", "ServerAliveInterval=15"]
        if self._control:
            opts += ["-o", "ControlMaster=auto", "-o", f"ControlPath={self._control}", "-o", "ControlPersist=120"]
        return [*opts, *self.ssh_options]

    def _target(self) -> str:
        return f"{self.user}@{self.host}" if self.user else self.host

    def ssh_argv(self, script: str) -> list[str]:
        """The ``ssh`` command that runs ``script`` with the device's ``sh`` (whatever the login shell is)."""
        port = ["-p", str(self.port)] if self.port else []
        return ["ssh", *self._common(), *port, "-T", self._target(), "--", f"sh -c {shlex.quote(script)}"]

    def scp_argv(self, sources: list[str], dest: str) -> list[str]:
        port = ["-P", str(self.port)] if self.port else []
        return ["scp", "-q", "-p", *self._common(), *port, *sources, dest]

    def _classify(self, stderr: str, step: str) -> None:
        low = stderr.lower()
        tail = " | ".join(l for l in stderr.strip().splitlines()[-2:])
        if any(s in low for s in AUTH):
            hint = ("the host key is unknown or changed: connect once with `ssh` to check and accept it"
                    if "host key" in low or "identification has changed" in low
                    else "no key was accepted: set up key authentication (ssh-copy-id) or load your key into ssh-agent")  # fmt: skip
            raise BoardAuthError(self.uri, step, f"{hint} ({tail})")
        if any(s in low for s in UNREACHABLE):
            raise BoardUnreachable(self.uri, step, f"cannot reach the host ({tail})")
        if "no space left on device" in low:
            raise NoSpace(self.uri, step, tail)
        raise BoardError(self.uri, step, f"ssh failed: {tail or 'exit 255'}")

    def _sh(self, script, *, step, timeout=None, check=True):
        proc = run_local(self.ssh_argv(script), uri=self.uri, step=step, timeout=timeout or self.timeout_s)
        if proc.returncode == 255:  # ssh's own failure (the remote command's status is passed through otherwise)
            self._classify(proc.stderr, step)
        if check and proc.returncode != 0:
            if "no space left on device" in proc.stderr.lower():
                raise NoSpace(self.uri, step, " | ".join(proc.stderr.strip().splitlines()[-2:]))
            tail = " | ".join(proc.stderr.strip().splitlines()[-3:])
            raise BoardError(self.uri, step, f"command failed (exit {proc.returncode}): {tail}")
        return proc

    def open(self) -> None:
        require_tool("ssh", self.uri, "connect", "install the OpenSSH client (apt-get install openssh-client)")
        require_tool("scp", self.uri, "connect", "install the OpenSSH client (apt-get install openssh-client)")
        # a short path: unix socket names are limited to ~104 bytes
        self._control_dir = tempfile.mkdtemp(prefix="enlp-")
        self._control = f"{self._control_dir}/cm-%C"
        super().open()

    def _disconnect(self) -> None:
        if self._control:
            port = ["-p", str(self.port)] if self.port else []
            run_local(["ssh", *self._common(), *port, "-O", "exit", self._target()], uri=self.uri, step="disconnect", timeout=30)
            self._control = None
            shutil.rmtree(self._control_dir, ignore_errors=True)

    def _scp(self, sources: list[str], dest: str, step: str) -> None:
        proc = run_local(self.scp_argv(sources, dest), uri=self.uri, step=step, timeout=self.timeout_s)
        if proc.returncode != 0:
            self._classify(proc.stderr or f"scp exit {proc.returncode}", step)

    def _remote(self, path: str) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.user + '@' if self.user else ''}{host}:{path}"

    def _push_dir(self, local: Path, remote: str, *, step: str = "push") -> None:
        self._scp([str(p) for p in sorted(local.iterdir())], self._remote(remote + "/"), step)

    def _pull_file(self, remote: str, local: Path) -> None:
        self._scp([self._remote(remote)], str(local), "pull")


__all__ = ["SshBoard"]
