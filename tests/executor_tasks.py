"""Tasks for tests/test_executor.py, in a module of their own so pool and Ray workers can import them.

Workers import this by name: spawned pool workers get the test process's
``sys.path``, and a local Ray instance gets it as ``PYTHONPATH``.
"""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

import click

from edgenlp.errors import EdgeNLPError
from edgenlp.executor import ExecutorConfig, Task, open_executor
from edgenlp.utils import atomic_dir


def square_after(x: int, *, delay: float = 0.0, label: str = "", wait_for: str | None = None) -> dict:
    """A result that depends on every argument; ``delay`` makes tasks finish out of submission order.

    ``wait_for``: a folder of :func:`write_artifact`'s attempt marks. Return only a second after the process of
    its first attempt is gone (waiting at most 10 s for that), so that this task is most likely still running
    when the other task kills its worker and a pool notices. Tests accept either order; this makes the one
    where the death hits two running tasks the usual one.
    """
    time.sleep(delay)
    deadline = time.monotonic() + 10
    while wait_for is not None and time.monotonic() < deadline:
        marks = sorted(Path(wait_for).iterdir()) if Path(wait_for).is_dir() else []
        if marks and not _alive(int(marks[0].name.rsplit("-", 1)[1])):
            time.sleep(1.0)
            break
        time.sleep(0.02)
    return {"x": x, "square": x * x, "label": label}


def _alive(pid: int) -> bool:
    """Linux: the process exists and is not a zombie."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, IndexError):
        return False


def refuse(x: int) -> int:
    raise ValueError(f"no square for {x}")


def sample_tasks() -> list[Task]:
    """Later tasks finish first (shorter delays), one raises, keyword and positional arguments both matter."""
    out = [Task(f"sq-{i}", square_after, (i,), {"delay": 0.05 * (5 - i), "label": f"L{i}"}) for i in range(5)]
    out.insert(2, Task("refused", refuse, (7,)))
    return out


CONTENT = b"".join(hashlib.sha256(str(i).encode()).digest() for i in range(4096))  # 128 KiB


def write_artifact(dest: str, attempts_dir: str, *, die_on_attempts: int) -> str:
    """Write ``CONTENT`` to ``dest/blob.bin`` the atomic way; on the first ``die_on_attempts`` attempts the worker
    process exits abruptly halfway through the write (``os._exit``: no cleanup, no exception)."""
    marks = Path(attempts_dir)
    marks.mkdir(parents=True, exist_ok=True)
    attempt = len(list(marks.iterdir())) + 1
    (marks / f"attempt-{attempt}-pid-{os.getpid()}").touch()
    with atomic_dir(dest) as tmp:
        with open(tmp / "blob.bin", "wb") as f:
            f.write(CONTENT[: len(CONTENT) // 2])
            f.flush()
            if attempt <= die_on_attempts:
                os._exit(17)
            f.write(CONTENT[len(CONTENT) // 2:])
    return hashlib.sha256((Path(dest) / "blob.bin").read_bytes()).hexdigest()


@click.command("executor-check")
@click.option("--workers", type=int, default=1)
@click.option("--ray", default=None)
@click.option("--connect-timeout-s", type=float, default=20.0)
def executor_check_cmd(workers: int, ray: str | None, connect_timeout_s: float) -> None:
    """A verb the way `compress` and the benchmarks take the executor options (tests only)."""
    try:
        config = ExecutorConfig(workers=workers, ray=ray, connect_timeout_s=connect_timeout_s)
    except ValueError as exc:
        raise EdgeNLPError(f"invalid option: {exc}") from None
    with open_executor(config) as ex:
        (outcome,) = ex.map([Task("one", square_after, (3,))])
    click.echo(outcome.value["square"])


def whoami(x: int) -> dict:
    """Where a task ran: its process id, beside a result that depends on its argument."""
    return {"x": x, "pid": os.getpid()}


def refuse_as_user_error(path: str) -> None:
    """A build that refuses its input the way the library does (an EdgeNLPError subclass, exit 2)."""
    from edgenlp.errors import DataError

    raise DataError(f"{path}: no rows")
