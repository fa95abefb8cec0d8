"""The Ray executor: a local instance on loopback or a cluster address, with the address checked before any work."""

from __future__ import annotations

import contextlib
import logging
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from typing import Iterator, Mapping

from edgenlp.executor.config import RAY_PIN, parse_ray_address, ExecutorConfig, ExecutorError, Task, Outcome
from edgenlp.executor.local import _call, _one_line, Executor, _Progress, _outcome, _lost

log = logging.getLogger(__name__)


@contextlib.contextmanager
def _environ(values: Mapping[str, str]) -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        import ipaddress

        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


# Ray resolves "127.0.0.1" to the machine's routable address unless clusters are "disabled" for this platform,
# which is what makes it use loopback (ray._private.services.get_node_ip_address).
_RAY_LOOPBACK = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
_WAIT_NOTE_S = 300.0  # a task still out after this long is named in the log
_RAY_SIGNALS = (signal.SIGTERM, signal.SIGINT)
_PROBE = ("import logging, sys, ray\n"
          "ray.init(address=sys.argv[1], configure_logging=False, logging_level=logging.ERROR, log_to_driver=False)\n"
          "ray.shutdown()\n")


def _reload_ray_auth() -> None:
    """Make this process's Ray read ``RAY_AUTH_*`` again (it reads them once, when first imported)."""
    from ray._raylet import AuthenticationTokenLoader, Config

    Config.initialize("")
    AuthenticationTokenLoader.instance().reset_cache()


def _ray_module():
    try:
        import ray
    except ImportError:
        raise ExecutorError(f"running tasks on Ray needs Ray: pip install 'edgenlp[ray]' ({RAY_PIN})") from None
    return ray


def check_ray_address(address: str, *, timeout_s: float) -> None:
    """Raise :class:`ExecutorError` naming ``address`` unless a Ray cluster answers there within ``timeout_s``.

    First a TCP connection (refused, unknown host and no route fail here at
    once), then a throw-away driver in a child process, killed after
    ``timeout_s``: Ray's own connect retries for minutes against an address
    that is not a Ray head, and may end the process when it gives up.
    """
    host, port = parse_ray_address(address)
    deadline = time.monotonic() + timeout_s
    try:
        socket.create_connection((host, port), timeout=timeout_s).close()
    except socket.timeout:
        raise ExecutorError(f"cannot reach a Ray cluster at {address}: no answer within {timeout_s:g} s") from None
    except socket.gaierror:
        raise ExecutorError(f"cannot reach a Ray cluster at {address}: unknown host {host!r}") from None
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise ExecutorError(f"cannot reach a Ray cluster at {address}: {reason.lower()} "
                            "(start one there with `ray start --head`, or use auto for a local instance)") from None
    env = {**os.environ, **(_RAY_LOOPBACK if _is_loopback(host) else {})}
    left = max(1.0, deadline - time.monotonic())
    try:
        proc = subprocess.run([sys.executable, "-c", _PROBE, address], env=env, capture_output=True, text=True, timeout=left)
    except subprocess.TimeoutExpired:
        raise ExecutorError(f"no Ray cluster answered at {address} within {timeout_s:g} s "
                            "(something listens there; is it the head node's GCS port, 6379 by default?)") from None
    if proc.returncode != 0:
        lines = [ln.strip() for ln in proc.stderr.splitlines() if ln.strip()]
        errors = [ln for ln in lines if re.match(r"^[\w.]*(Error|Exception)\b", ln)]
        reason = (errors or lines or [f"exit status {proc.returncode}"])[-1]
        raise ExecutorError(f"cannot connect to the Ray cluster at {address}: {reason[:300]}")


class RayExecutor(Executor):
    """Ray tasks (``num_cpus=cpus_per_task``, ``num_gpus=gpus_per_task``).

    Retries are counted here, not by Ray (``max_retries=0``), so every backend
    reports the same attempts: a task whose worker died
    (:class:`ray.exceptions.WorkerCrashedError`, a lost node, Ray's
    out-of-memory killer) is submitted again up to ``retries`` times.
    """

    backend = "ray"

    def __init__(self, config: ExecutorConfig) -> None:
        super().__init__(config)
        self._ray = _ray_module()
        self._owned = False  # this executor started the local instance it uses
        self._auth_reloaded = False  # this executor made Ray read a token of its own
        self._connected = False  # this executor connected to the cluster by address
        self._saved_env: dict[str, str | None] = {}
        self._saved_flag = None
        self._temp_dir: str | None = None
        # ray.init installs a SIGTERM handler of its own and ray.shutdown leaves it: close() puts these back
        self._saved_signals = ({sig: signal.getsignal(sig) for sig in _RAY_SIGNALS}
                               if threading.current_thread() is threading.main_thread() else {})
        self.address = self._connect()
        self._remote = self._ray.remote(_call)

    def describe(self) -> str:
        where = "a local Ray instance" if self._owned else "the Ray cluster"
        return f"on {where} at {self.address} ({self.config.cpus_per_task} CPU(s) per task)"

    # -- connection
    def _connect(self) -> str:
        ray, cfg = self._ray, self.config
        if ray.is_initialized():  # this process is already a driver: use that connection
            current = ray.get_runtime_context().gcs_address
            if cfg.ray not in ("auto", current) and cfg.ray.removeprefix("ray://") != current:
                check_ray_address(cfg.ray, timeout_s=cfg.connect_timeout_s)  # an unreachable address says so first
                raise ExecutorError(f"this process is already connected to Ray at {current}; cannot also use {cfg.ray}")
            return current
        address = cfg.ray if cfg.ray != "auto" else os.environ.get("RAY_ADDRESS") or None
        if address is None:
            return self._start_local()
        try:
            host, _ = parse_ray_address(address)
        except ValueError:
            raise ExecutorError(f"RAY_ADDRESS={address!r} is not a Ray cluster address HOST:PORT") from None
        check_ray_address(address, timeout_s=cfg.connect_timeout_s)
        if _is_loopback(host):
            self._set_env(_RAY_LOOPBACK)
        try:
            ray.init(address=address, configure_logging=False, logging_level=logging.ERROR, log_to_driver=False)
        except Exception as exc:
            self._restore_env()
            raise ExecutorError(f"cannot connect to the Ray cluster at {address}: {_one_line(exc)}") from None
        self._connected = True
        log.info("connected to the Ray cluster at %s: %s", address, ray.cluster_resources())
        return address

    def _start_local(self) -> str:
        """A Ray instance for this run: loopback only, a fresh token, its own temporary folder."""
        ray, cfg = self._ray, self.config
        cpus = cfg.ray_cpus or os.cpu_count() or 1
        # every Ray process of the instance (and the workers it starts, which inherit their environment) listens
        # on loopback, asks for the token and sees the driver's sys.path, as a spawned pool worker does
        self._set_env({**_RAY_LOOPBACK, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32),
                       "RAY_USAGE_STATS_ENABLED": "0"})
        constants = ray._private.ray_constants
        self._saved_flag = constants.ENABLE_RAY_CLUSTER  # read when ray was imported; the environment came later
        constants.ENABLE_RAY_CLUSTER = False
        _reload_ray_auth()  # so is the auth mode: this driver would ask its own instance for no token
        self._auth_reloaded = True
        self._temp_dir = tempfile.mkdtemp(prefix="edgenlp-ray-")
        path = os.pathsep.join(dict.fromkeys(os.path.abspath(p or os.curdir) for p in sys.path))
        log.info("starting a local Ray instance (%d CPUs, loopback only)", cpus)
        start = time.perf_counter()
        try:
            with _environ({"PYTHONPATH": path}):
                ctx = ray.init(address="local", num_cpus=cpus, num_gpus=0 if not cfg.gpus_per_task else None,
                               include_dashboard=False, _node_ip_address="127.0.0.1", _temp_dir=self._temp_dir,
                               configure_logging=False, logging_level=logging.ERROR, log_to_driver=False)
            self._owned = True
            node_ip = ctx.address_info["node_ip_address"]
            if not _is_loopback(node_ip):
                raise ExecutorError(f"the local Ray instance listens on {node_ip}, not on loopback; not using it")
        except Exception as exc:
            self.close()
            if isinstance(exc, ExecutorError):
                raise
            raise ExecutorError(f"could not start a local Ray instance ({cpus} CPUs): {_one_line(exc)[:300]} "
                                f"(a heavily loaded machine can time out Ray's start; try again, or use --workers)") from None
        except BaseException:
            self.close()
            raise
        log.info("local Ray instance at %s up in %.1f s", ctx.address_info["gcs_address"], time.perf_counter() - start)
        return ctx.address_info["gcs_address"]

    def _set_env(self, values: Mapping[str, str]) -> None:
        for k, v in values.items():
            self._saved_env.setdefault(k, os.environ.get(k))
            os.environ[k] = v

    def _restore_env(self) -> None:
        for k, v in self._saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        self._saved_env = {}

    def close(self) -> None:
        if self._owned or self._connected:
            self._ray.shutdown()
            self._owned = self._connected = False
            for sig, handler in self._saved_signals.items():
                if handler is not None and signal.getsignal(sig) is not handler:
                    signal.signal(sig, handler)
        if self._saved_flag is not None:
            self._ray._private.ray_constants.ENABLE_RAY_CLUSTER = self._saved_flag
            self._saved_flag = None
        self._restore_env()
        if self._auth_reloaded:  # back to the process's own settings, for a later driver in this process
            _reload_ray_auth()
            self._auth_reloaded = False
        if self._temp_dir is not None:
            shutil.rmtree(self._temp_dir, ignore_errors=True)
            self._temp_dir = None

    # -- running
    def _submit(self, task: Task):
        opts = dict(num_cpus=self.config.cpus_per_task, max_retries=0, name=task.key[:100])
        if self.config.gpus_per_task:
            opts["num_gpus"] = self.config.gpus_per_task
        return self._remote.options(**opts).remote(task.fn, task.args, dict(task.kwargs))

    def _run(self, tasks: list[Task], progress: _Progress) -> list[Outcome]:
        ray = self._ray
        from ray import exceptions as rex

        n = len(tasks)
        results: list[Outcome | None] = [None] * n
        attempts, lost = [1] * n, [0] * n
        refs = {self._submit(t): i for i, t in enumerate(tasks)}
        try:
            while refs:
                ready, _ = ray.wait(list(refs), num_returns=1, timeout=_WAIT_NOTE_S)
                if not ready:  # say what is still out, so a stalled cluster shows in the log
                    log.info("still waiting on %d task(s) on Ray: %s", len(refs),
                             ", ".join(tasks[i].key for i in sorted(refs.values())[:8]))
                    continue
                (ref,) = ready
                i = refs.pop(ref)
                key = tasks[i].key
                try:
                    result = ray.get(ref)
                except rex.RayTaskError as exc:  # raised past _call (SystemExit), or the value would not pickle
                    cause = exc.cause if isinstance(getattr(exc, "cause", None), BaseException) else exc
                    results[i] = progress(Outcome(key, "raised", error=_one_line(cause), attempts=attempts[i],
                                                  lost_workers=lost[i], traceback=str(exc)))
                    continue
                except rex.TaskCancelledError:
                    raise
                except rex.RayError as exc:  # the worker, its node or its object is gone
                    lost[i] += 1
                    detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
                    if lost[i] > self.config.retries:
                        results[i] = progress(_lost(key, attempts=attempts[i], lost=lost[i],
                                                    detail=f"{type(exc).__name__}: {detail[:200]}"))
                    else:
                        log.warning("%s: its Ray worker died (%s; %d of %d allowed); running it again", key,
                                    type(exc).__name__, lost[i], self.config.retries)
                        attempts[i] += 1
                        refs[self._submit(tasks[i])] = i
                    continue
                results[i] = progress(_outcome(key, result, attempts=attempts[i], lost=lost[i]))
        except BaseException:
            for ref in refs:
                with contextlib.suppress(Exception):
                    ray.cancel(ref, force=True)
            raise
        return results  # type: ignore[return-value]
