"""A throw-away OpenSSH server on localhost for the ssh transport tests (real sshd, temporary keys)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

SSHD = "/usr/sbin/sshd"


@dataclass
class LocalSshd:
    port: int
    user: str
    client_config: Path  # ssh -F file: identity, known hosts, port
    other_key: Path  # a key the server does not accept
    proc: subprocess.Popen

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_sshd(tmp: Path) -> LocalSshd | str:
    """Start sshd on a free port; return it, or a reason why it cannot run here."""
    sshd = shutil.which("sshd") or (SSHD if Path(SSHD).exists() else None)
    if sshd is None or shutil.which("ssh-keygen") is None or shutil.which("ssh") is None:
        return "openssh-server/openssh-client not installed (bash runtime/setup_deps.sh)"
    if os.geteuid() == 0:
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # privilege separation directory sshd insists on
    for name in ("host", "id", "other"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp / name)], check=True)
    (tmp / "authorized_keys").write_text((tmp / "id.pub").read_text())
    port = free_port()
    user = os.environ.get("USER") or __import__("pwd").getpwuid(os.geteuid()).pw_name
    (tmp / "sshd_config").write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {tmp / 'host'}\nAuthorizedKeysFile {tmp / 'authorized_keys'}\n"
        f"PidFile {tmp / 'sshd.pid'}\nStrictModes no\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n"
        "Subsystem sftp internal-sftp\nUsePAM no\nPermitRootLogin prohibit-password\nLogLevel ERROR\nMaxStartups 50\nMaxSessions 50\n"
    )
    host_pub = (tmp / "host.pub").read_text().split()
    (tmp / "known_hosts").write_text(f"[127.0.0.1]:{port} {host_pub[0]} {host_pub[1]}\n")
    (tmp / "ssh_config").write_text(
        f"Host board-under-test\n  HostName 127.0.0.1\n  Port {port}\n  User {user}\n  IdentityFile {tmp / 'id'}\n"
        f"  IdentitiesOnly yes\n  UserKnownHostsFile {tmp / 'known_hosts'}\n  StrictHostKeyChecking yes\n"
        f"Host *\n  IdentitiesOnly yes\n  IdentityFile {tmp / 'id'}\n"
        f"  UserKnownHostsFile {tmp / 'known_hosts'}\n  StrictHostKeyChecking yes\n"
    )
    proc = subprocess.Popen([sshd, "-D", "-e", "-f", str(tmp / "sshd_config")], stdout=subprocess.DEVNULL,
                            stderr=open(tmp / "sshd.log", "wb"))  # fmt: skip
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return f"sshd exited at start: {(tmp / 'sshd.log').read_text()[-300:]}"
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return LocalSshd(port, user, tmp / "ssh_config", tmp / "other", proc)
        except OSError:
            time.sleep(0.1)
    proc.kill()
    return "sshd did not listen within 10 s"
