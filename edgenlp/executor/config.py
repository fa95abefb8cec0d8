"""What an executor is asked to run: its config, the tasks, their outcomes and the errors."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from edgenlp.config import Config
from edgenlp.errors import EdgeNLPError, ExitCode

BACKENDS = ("inline", "pool", "ray")
MAX_RETRIES = 10
RAY_PIN = "ray==2.60.0"  # the extra edgenlp[ray] (pyproject.toml)


def _help(text: str) -> dict:
    return {"help": " ".join(text.split())}


_ADDRESS = re.compile(r"^(?:ray://)?(?:\[(?P<ipv6>[0-9A-Fa-f:.]+)\]|(?P<host>[A-Za-z0-9_.-]+)):(?P<port>[0-9]{1,5})$")


def parse_ray_address(address: str) -> tuple[str, int]:
    """``"10.0.0.5:6379"`` or ``"ray://head:10001"`` -> ``(host, port)``; ValueError for anything else."""
    m = _ADDRESS.match(address) if isinstance(address, str) else None
    port = int(m["port"]) if m else 0
    if not m or not 1 <= port <= 65535:
        raise ValueError(f"ray must be 'auto' or a cluster address HOST:PORT (e.g. 10.0.0.5:6379 or ray://head:10001), "
                         f"got {address!r}")
    return m["ipv6"] or m["host"], port


def _check_int(name: str, value, low: int, high: int | None = None, *, allow_none: bool = False) -> None:
    if value is None and allow_none:
        return
    if not isinstance(value, int) or isinstance(value, bool) or value < low or (high is not None and value > high):
        bound = f">= {low}" if high is None else f"in [{low}, {high}]"
        raise ValueError(f"{name} must be an integer {bound}, got {value!r}")


@dataclass(frozen=True)
class ExecutorConfig(Config):
    """Where independent tasks run: this process (default), ``workers`` local processes, or Ray.

    >>> ExecutorConfig(workers=2).backend
    'pool'
    >>> ExecutorConfig(ray="auto").backend
    'ray'
    """

    VERSION = 1
    workers: int = field(default=1, metadata=_help(
        "Tasks at once on this machine: 1 runs them in this process, N > 1 in N local worker processes."))
    ray: str | None = field(default=None, metadata=_help(
        "Run tasks on Ray (pip install 'edgenlp[ray]'): 'auto' (RAY_ADDRESS if set, else a local instance on "
        "loopback for this run) or a cluster address HOST:PORT."))
    retries: int = field(default=1, metadata=_help(
        "Times a task whose worker died (killed, out of memory, crashed) runs again before it is reported lost."))
    cpus_per_task: int = field(default=1, metadata=_help(
        "Cores one task may use: its thread count in a pool worker, its num_cpus on Ray."))
    gpus_per_task: float = field(default=0.0, metadata=_help("GPUs one task needs on Ray (num_gpus; fractions share one)."))
    ray_cpus: int | None = field(default=None, metadata=_help(
        "CPUs a local Ray instance offers (default: this machine's cores)."))
    connect_timeout_s: float = field(default=20.0, metadata=_help(
        "Seconds a Ray cluster address has to answer before the run stops with an error."))

    def __post_init__(self) -> None:
        _check_int("workers", self.workers, 1)
        if self.ray is not None:
            if self.ray != "auto":
                parse_ray_address(self.ray)
            if self.workers != 1:
                raise ValueError(f"workers ({self.workers}) and ray ({self.ray!r}) are exclusive: workers sizes a pool of "
                                 "local processes, a Ray cluster schedules by its own CPUs (cpus_per_task)")
        _check_int("retries", self.retries, 0, MAX_RETRIES)
        _check_int("cpus_per_task", self.cpus_per_task, 1)
        _check_int("ray_cpus", self.ray_cpus, 1, allow_none=True)
        gpus = self.gpus_per_task
        if isinstance(gpus, bool) or not isinstance(gpus, (int, float)) or math.isnan(gpus) or gpus < 0:
            raise ValueError(f"gpus_per_task must be a number >= 0, got {gpus!r}")
        if gpus and self.ray is None:
            raise ValueError(f"gpus_per_task ({gpus:g}) places tasks on GPUs through Ray only; set ray, or leave it 0 "
                             "(in-process and pool tasks see the machine's GPUs as they are)")
        t = self.connect_timeout_s
        if isinstance(t, bool) or not isinstance(t, (int, float)) or math.isnan(t) or not t > 0:
            raise ValueError(f"connect_timeout_s must be a positive number, got {t!r}")

    @property
    def backend(self) -> str:
        """``"inline"``, ``"pool"`` or ``"ray"``."""
        return "ray" if self.ray is not None else "pool" if self.workers > 1 else "inline"


class ExecutorError(EdgeNLPError):
    """The executor cannot start: Ray is not installed, or a cluster address does not answer."""


class TasksFailedError(EdgeNLPError):
    """Some tasks raised or lost their worker more often than allowed; ``outcomes`` holds every task's outcome."""

    exit_code = ExitCode.FAILURE

    def __init__(self, outcomes: Sequence[Outcome]) -> None:
        failed = [o for o in outcomes if not o.ok]
        shown = "; ".join(f"{o.key}: {o.error}" for o in failed[:3]) + (f"; and {len(failed) - 3} more" if len(failed) > 3 else "")
        super().__init__(f"{len(failed)} of {len(outcomes)} tasks failed: {shown}")
        self.outcomes = list(outcomes)


@dataclass(frozen=True)
class Task:
    """One unit of work: ``fn(*args, **kwargs)``, known by ``key`` in outcomes, logs and records."""

    key: str
    fn: Callable[..., Any]
    args: tuple = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.key, str) or not self.key.strip():
            raise ValueError(f"task key must be a non-empty string, got {self.key!r}")
        if not callable(self.fn):
            raise ValueError(f"task {self.key}: fn must be callable, got {self.fn!r}")
        if not isinstance(self.args, tuple):
            raise ValueError(f"task {self.key}: args must be a tuple, got {type(self.args).__name__}")


@dataclass(frozen=True)
class Outcome:
    """What became of one task.

    ``status`` is ``"ok"`` (``value`` holds the return value), ``"raised"``
    (``error`` is ``"Type: message"`` and ``traceback`` the worker's) or
    ``"lost"`` (its worker died ``retries + 1`` times). ``attempts`` counts the
    times it started; ``lost_workers`` the times its own worker died under it.
    ``exception`` is the exception a ``"raised"`` task raised, where it
    pickles (it came back from the worker as itself).
    Two outcomes are equal when key, status, value, error and those counts are;
    times and tracebacks are left out (they differ from run to run).
    """

    key: str
    status: str
    value: Any = None
    error: str | None = None
    attempts: int = 1
    lost_workers: int = 0
    seconds: float = field(default=0.0, compare=False)
    traceback: str | None = field(default=None, compare=False, repr=False)
    exception: BaseException | None = field(default=None, compare=False, repr=False)

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def to_dict(self) -> dict:
        """The record of this outcome without its value (for stage records and reports)."""
        return {"key": self.key, "status": self.status, "error": self.error, "attempts": self.attempts,
                "lost_workers": self.lost_workers, "seconds": round(self.seconds, 3)}


def successful_values(outcomes: Sequence[Outcome], *, reraise: bool = False) -> list:
    """The values of ``outcomes`` in order; raises :class:`TasksFailedError` if any task failed.

    ``reraise``: when the only failure is a task that raised, raise that
    task's own exception instead (its type and message, whichever backend ran
    it), so one failing build reads as it would in-process.
    """
    failed = [o for o in outcomes if not o.ok]
    if reraise and len(failed) == 1 and failed[0].exception is not None:
        raise failed[0].exception
    if failed:
        raise TasksFailedError(outcomes)
    return [o.value for o in outcomes]


OnResult = Callable[[Outcome, int, int], None]
