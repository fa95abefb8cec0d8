"""A board behind one interface: probe it, push files, run the native runner, pull results, clean up.

::

    with open_board("qemu:cortex-a53") as board:          # or "ssh://pi@raspberrypi.local", "adb:R58M12345"
        info = board.probe()                               # DeviceInfo: arch, CPU, clusters, memory, free space
        remote = board.push_bundle("out/minilm-sst2")      # runner + libraries pushed on first use
        res = board.run_runner([remote, "--json", "a gripping film"], cores="big")
        board.pull(f"{board.workdir}/x.etdp", "x.etdp")
    # the board's temporary directory is gone here, also after an error or Ctrl-C

A transport implements four primitives (:meth:`Board._sh`, :meth:`Board._push_dir`,
:meth:`Board._pull_file`, :meth:`Board._runner_prefix`); everything else is shared.
Commands run on the device through ``sh -c`` with every argument quoted.
"""

from __future__ import annotations

import logging
import secrets
import shlex
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from edgenlp.boards.deploy import RUNNER, bundle_files, fingerprint, runner_files, runtime_versions
from edgenlp.boards.errors import BoardError, NoSpace, RunnerFailed, RunnerKilled, ToolMissing, WrongArchitecture
from edgenlp.boards.probe import PROBE_SCRIPT, DeviceInfo, parse_probe
from edgenlp.errors import EdgeNLPError

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT_S = 1800.0


@dataclass(frozen=True)
class RunResult:
    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str
    seconds: float


class Board:
    """Base class of the transports; use :func:`open_board` and the instance as a context manager."""

    kind = "board"

    def __init__(self, uri: str, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        self.uri = uri
        self.timeout_s = timeout_s
        self.workdir: str | None = None  # the board's temporary directory while open
        self._info: DeviceInfo | None = None
        self._pushed: dict[str, str] = {}  # fingerprint -> remote dir
        self._runtime: dict | None = None
        self._old_handlers: dict = {}

    # ----------------------------------------------------------------- transport primitives
    def _sh(self, script: str, *, step: str, timeout: float | None = None, check: bool = True) -> subprocess.CompletedProcess:
        """Run a POSIX sh script on the device; raise :class:`BoardError` (naming ``step``) on transport failures."""
        raise NotImplementedError

    def _push_dir(self, local: Path, remote: str, *, step: str = "push") -> None:
        """Copy the contents of local directory ``local`` into the existing remote directory ``remote``."""
        raise NotImplementedError

    def _pull_file(self, remote: str, local: Path) -> None:
        raise NotImplementedError

    def _runner_prefix(self, rt_dir: str) -> list[str]:
        """Argv that starts the runner in ``rt_dir`` (the loader, an emulator), without its arguments."""
        if self.probe().os == "android":
            from edgenlp.boards.deploy import LOADERS

            return [f"{rt_dir}/{LOADERS[self.probe().arch]}", "--library-path", rt_dir, f"{rt_dir}/{RUNNER}"]
        return ["env", f"LD_LIBRARY_PATH={rt_dir}", f"{rt_dir}/{RUNNER}"]

    def _tmp_root(self) -> str:
        return "${TMPDIR:-/tmp}"

    def _probe_text(self) -> str:
        env = f"EDGENLP_TMP={self.workdir or self._tmp_root()}; export EDGENLP_TMP\n"
        return self._sh(env + PROBE_SCRIPT, step="probe").stdout

    # ----------------------------------------------------------------- lifecycle
    def __enter__(self) -> "Board":
        self._catch_termination()
        try:
            self.open()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def open(self) -> None:
        """Reach the device and create its temporary directory."""
        name = f"edgenlp-{secrets.token_hex(6)}"
        out = self._sh(f'd="{self._tmp_root()}/{name}"; mkdir -m 700 "$d" && cd "$d" && pwd', step="connect").stdout
        lines = [l for l in out.splitlines() if l.strip()]
        if not lines or not lines[-1].startswith("/"):
            raise BoardError(self.uri, "connect", f"could not create a temporary directory (got {out.strip()[:200]!r})")
        self.workdir = lines[-1].strip()
        log.info("%s: working in %s", self.uri, self.workdir)

    def close(self) -> None:
        """Stop what we started on the device and remove its temporary directory (signals held meanwhile)."""
        try:
            if self.workdir is None:
                return
            d = shlex.quote(self.workdir)
            script = (f"if [ -f {d}/.pids ]; then for p in $(cat {d}/.pids); do kill -9 $p 2>/dev/null; done; fi; "
                      f"rm -rf {d}")  # fmt: skip
            held = _hold_signals()
            try:
                self._sh(script, step="clean up", timeout=60, check=False)
            except (BoardError, OSError) as exc:
                log.warning("%s: could not remove %s: %s", self.uri, self.workdir, exc)
            finally:
                _release_signals(held)
            self.workdir = None
            self._pushed.clear()
        finally:
            self._disconnect()
            self._restore_termination()

    def _disconnect(self) -> None:
        pass

    def _catch_termination(self) -> None:
        """SIGTERM/SIGHUP unwind like Ctrl-C, so the context manager still cleans the device up."""
        if threading.current_thread() is not threading.main_thread():
            return
        for sig in (signal.SIGTERM, signal.SIGHUP):
            if signal.getsignal(sig) is signal.SIG_DFL:
                self._old_handlers[sig] = signal.signal(sig, _raise_interrupt)

    def _restore_termination(self) -> None:
        for sig, old in self._old_handlers.items():
            signal.signal(sig, old)
        self._old_handlers.clear()

    # ----------------------------------------------------------------- shared operations
    def _need_open(self) -> str:
        if self.workdir is None:
            raise RuntimeError("use the board as a context manager (with open_board(uri) as board: ...)")
        return self.workdir

    def probe(self) -> DeviceInfo:
        """What the device is (cached after the first call)."""
        if self._info is None:
            text = self._probe_text()
            try:
                self._info = self._adjust_probe(parse_probe(text))
            except ValueError as exc:
                raise BoardError(self.uri, "probe", f"{exc}; output began {text[:200]!r}") from None
            log.info("%s: %s, %s, %d cores", self.uri, self._info.arch, self._info.cpu_model, self._info.cores)
        return self._info

    def _adjust_probe(self, info: DeviceInfo) -> DeviceInfo:
        return info

    def describe(self) -> dict:
        """The profile's ``device`` section: URI, transport, probe results, runtime versions."""
        out = {"uri": self.uri, "transport": self.kind, **self.probe().to_dict()}
        if self._runtime is not None:
            out["software"] = self._runtime
        return out

    def push_files(self, files: dict[str, Path | None], remote_name: str, *, step: str = "push") -> str:
        """Push ``{name: local file}`` into ``workdir/remote_name`` (once per content); return the remote dir.

        A None file is pushed as an empty stand-in (see :func:`~edgenlp.boards.deploy.bundle_files`).
        """
        work = self._need_open()
        key = f"{remote_name}:{fingerprint(files)}"
        if key in self._pushed:
            return self._pushed[key]
        size_mb = sum(p.stat().st_size for p in files.values() if p is not None) / 2**20
        free = self.probe().tmp_free_mb
        if free is not None and size_mb > free * 0.95:
            raise NoSpace(self.uri, step, f"{size_mb:.1f} MB to push but only {free} MB free in {work}")
        remote = f"{work}/{remote_name}"
        with tempfile.TemporaryDirectory(prefix="edgenlp-stage-") as tmp:
            stage = Path(tmp)
            for name, src in files.items():
                if src is None:
                    (stage / name).touch()
                else:
                    shutil.copy2(src, stage / name)
            self._sh(f"mkdir -p {shlex.quote(remote)}", step=step)
            t0 = time.perf_counter()
            self._push_dir(stage, remote, step=step)
            log.info("%s: pushed %.1f MB to %s in %.1f s", self.uri, size_mb, remote, time.perf_counter() - t0)
        self._pushed[key] = remote
        return remote

    def deploy(self) -> str:
        """Push the runner and its libraries for this board's architecture; return their remote directory."""
        info = self.probe()
        files = runner_files(info.arch, device=self.uri, android=info.os == "android")
        rt = self.push_files(files, "rt", step="push runner")
        self._sh(f"chmod 755 {shlex.quote(rt)}/*", step="push runner")
        if self._runtime is None:
            self._runtime = runtime_versions(files, info.arch)
        return rt

    def push_bundle(self, bundle: str | Path) -> str:
        """Push a bundle (without its ONNX model) and return its remote path."""
        bundle = Path(bundle)
        if not (bundle / "manifest.json").is_file():
            raise EdgeNLPError(f"{bundle}: not a bundle directory (no manifest.json)")
        return self.push_files(bundle_files(bundle), f"bundle-{bundle.name}", step="push bundle")

    def push_file(self, local: str | Path, name: str) -> str:
        """Push one file as ``workdir/in/name``; return its remote path."""
        return f"{self.push_files({name: Path(local)}, 'in', step='push input')}/{name}"

    def pull(self, remote: str, local: str | Path) -> Path:
        local = Path(local)
        local.parent.mkdir(parents=True, exist_ok=True)
        self._pull_file(remote, local)
        return local

    def run_runner(self, args: list[str], *, cores: str = "all", timeout: float | None = None, step: str = "run") -> RunResult:
        """Run ``edgenlp-run ARGS`` on the device, pinned to ``cores`` with taskset; raise on failure.

        A runner killed by a signal raises :class:`RunnerKilled` (SIGKILL is
        reported as the out-of-memory killer's doing, with the free memory seen
        at probe time); any other non-zero exit :class:`RunnerFailed` with the
        runner's own error line.
        """
        work = self._need_open()
        rt = self.deploy()
        info = self.probe()
        argv = [*self._runner_prefix(rt), *args]
        cpus = info.cpus_for(cores)
        if cores != "all" and len(cpus) < info.cores:
            if not info.has_taskset:
                raise BoardError(self.uri, step, f"--cores {cores} needs `taskset` on the device, which has none; use --cores all")
            argv = ["taskset", "-c", ",".join(str(c) for c in cpus), *argv]
        elif cores != "all":
            log.warning("%s: one CPU cluster; --cores %s runs on all %d cores", self.uri, cores, info.cores)
        quoted = " ".join(shlex.quote(a) for a in argv)
        inner = f"echo $$ >> {shlex.quote(work)}/.pids; cd {shlex.quote(work)} && exec {quoted}"
        t0 = time.perf_counter()
        proc = self._sh(f"sh -c {shlex.quote(inner)}", step=step, timeout=timeout or self.timeout_s, check=False)
        seconds = time.perf_counter() - t0
        rc = proc.returncode
        if rc != 0:
            self._runner_failure(rc, proc.stderr, step)
        return RunResult(tuple(argv), rc, proc.stdout, proc.stderr, seconds)

    def _runner_failure(self, rc: int, stderr: str, step: str) -> None:
        info = self.probe()
        tail = " | ".join(stderr.strip().splitlines()[-3:])
        low = stderr.lower()
        if rc in (-9, 137):
            mem = f"{info.mem_available_mb} MB were available at probe time" if info.mem_available_mb is not None else "free memory unknown"
            raise RunnerKilled(self.uri, step, f"edgenlp-run was killed (SIGKILL), most likely by the out-of-memory killer; "
                               f"{mem}; try a smaller bundle or fewer threads")  # fmt: skip
        if rc < 0 or rc > 128:
            sig = -rc if rc < 0 else rc - 128
            name = signal.Signals(sig).name if sig in signal.Signals._value2member_map_ else f"signal {sig}"
            raise RunnerKilled(self.uri, step, f"edgenlp-run died from {name}: {tail}")
        if "exec format error" in low or "cannot execute binary" in low or "syntax error" in low and "edgenlp-run" in low:
            raise WrongArchitecture(self.uri, step, f"the {info.arch} runner cannot execute on this device: {tail}")
        if "no space left" in low:
            raise NoSpace(self.uri, step, tail)
        if rc == 127 or "not found" in low and ("taskset" in low or RUNNER in low) or "error while loading shared libraries" in low:
            raise RunnerFailed(self.uri, step, f"could not start edgenlp-run (exit {rc}): {tail}")
        raise RunnerFailed(self.uri, step, f"edgenlp-run failed (exit {rc}): {tail}")


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def _hold_signals():
    if threading.current_thread() is not threading.main_thread():
        return None
    return signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM, signal.SIGHUP})


def _release_signals(old) -> None:
    if old is not None:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def require_tool(name: str, uri: str, step: str, hint: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise ToolMissing(uri, step, f"`{name}` is not on PATH; {hint}")
    return path


def run_local(argv: list[str], *, uri: str, step: str, timeout: float | None, input: str | None = None) -> subprocess.CompletedProcess:
    """subprocess.run with one-line errors: a timeout names the device and the step."""
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, input=input, errors="replace")
    except subprocess.TimeoutExpired:
        raise BoardError(uri, step, f"timed out after {timeout:.0f} s") from None
    except FileNotFoundError as exc:
        raise ToolMissing(uri, step, f"`{argv[0]}` could not be started ({exc.strerror})") from None


def open_board(uri: str, **kw) -> Board:
    """A board for ``uri``: ``ssh://[user@]host[:port]``, ``adb`` / ``adb:SERIAL``, ``qemu:CPU``.

    Use it as a context manager; keyword arguments go to the transport
    (``ssh_options=("-F", "cfg")`` for ssh, ``timeout_s``). Raises
    :class:`EdgeNLPError` for a URI of no known form.
    """
    if uri.startswith("ssh://"):
        from edgenlp.boards.ssh import SshBoard

        return SshBoard.from_uri(uri, **kw)
    if uri == "adb" or uri.startswith("adb:"):
        from edgenlp.boards.adb import AdbBoard

        return AdbBoard.from_uri(uri, **kw)
    if uri.startswith("qemu:"):
        from edgenlp.boards.qemu import QemuBoard

        return QemuBoard.from_uri(uri, **kw)
    raise EdgeNLPError(f"--on {uri!r}: use ssh://user@host[:port], adb[:serial] or qemu:CPU (e.g. qemu:cortex-a53)")
