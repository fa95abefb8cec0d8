"""Run independent tasks in this process, in a pool of local processes, or on a Ray cluster.

``compress``'s candidate builds, the benchmarks' sweeps (tasks x methods x
seeds) and calibration over several boards are lists of independent tasks.
One interface runs them all; :class:`ExecutorConfig` picks where:

* ``workers=1`` (the default): in this process, one after another;
* ``workers=N``: ``N`` local processes (:class:`concurrent.futures.ProcessPoolExecutor`,
  started with ``spawn``, so a worker never inherits a half-initialized thread pool);
* ``ray="auto"`` or ``ray="HOST:PORT"``: Ray tasks (the optional extra ``edgenlp[ray]``).
  ``auto`` connects to ``RAY_ADDRESS`` when that is set and otherwise starts a
  Ray instance for this run on loopback only (``ray_cpus`` CPUs, a fresh
  token, its own temporary folder), torn down when the executor closes;
  ``HOST:PORT`` (or ``ray://HOST:PORT`` for Ray Client) connects to a running
  cluster, and an address that does not answer within ``connect_timeout_s`` is
  a one-line :class:`ExecutorError` naming it.

::

    tasks = [Task(f"candidate-{i}", build_candidate, (spec, out / f"candidate-{i}")) for i, spec in enumerate(specs)]
    with open_executor(ExecutorConfig(workers=2)) as ex:
        outcomes = ex.map(tasks, on_result=lambda o, done, total: log.info("%d/%d %s", done, total, o.key))
    values = successful_values(outcomes)  # or TasksFailedError naming every task that failed

The scheduling is the backend's own (the pool's queue, Ray's scheduler); this
module only submits, counts attempts and collects. :meth:`Executor.map` returns
one :class:`Outcome` per task, in submission order whatever order they finish
in, and every backend gives the same outcomes for the same tasks.

Contract for task authors
-------------------------
* ``fn`` is a module-level function (or another picklable callable) that the
  workers can import: arguments and return values are pickled (cloudpickle on
  Ray). On a multi-machine cluster every node needs the same edgenlp and
  dependencies; a local instance sees this process's ``sys.path``, as a pool
  worker does. Pass paths, not models, as arguments.
* Return results; do not write the records the driver keeps (stage records,
  reports, prior caches). The driver writes those from the outcomes, once, so
  they stay on the driver whichever backend ran the task.
* A task may run more than once. When its worker dies under it (killed, out
  of memory, a crash in native code) it runs again, up to ``retries`` times,
  and is then reported as ``lost``; it is never silently dropped. So a task
  must be idempotent, and a task that writes files writes them to a temporary
  path and renames into place (:func:`edgenlp.utils.atomic_dir`,
  :func:`edgenlp.utils.atomic_write_json`): a worker that dies mid-write leaves
  at most a hidden ``.NAME.tmp-*`` beside the destination, never a
  half-written destination. On a cluster, write where the driver can read
  (shared storage) or return the bytes.
* An exception the task raises is not retried (it would raise again): the
  outcome records it (``status="raised"``, ``error="ValueError: ..."``, the
  worker's traceback) and the other tasks go on.
* Threads and GPUs: ``cpus_per_task`` is the number of cores one task may use.
  A pool worker sets ``OMP_NUM_THREADS``/``MKL_NUM_THREADS`` to it before the
  task imports torch (and ``torch.set_num_threads`` when torch is already
  loaded); on Ray it is the task's ``num_cpus`` (Ray sets ``OMP_NUM_THREADS``
  from it), so Ray never runs more tasks on a node than it has cores for.
  ``gpus_per_task`` is the task's ``num_gpus`` on Ray (Ray sets
  ``CUDA_VISIBLE_DEVICES``; fractions share a GPU). In-process and pool tasks
  see the machine's GPUs as they are: run GPU work with ``workers=1`` or on Ray.
"""

from __future__ import annotations

from __future__ import annotations

from typing import Sequence

from edgenlp.executor.config import (BACKENDS, MAX_RETRIES, RAY_PIN, ExecutorConfig, ExecutorError, OnResult, Outcome, Task,
                                     TasksFailedError, parse_ray_address, successful_values)
from edgenlp.executor.local import Executor, PoolExecutor
from edgenlp.executor.ray import RayExecutor, check_ray_address


def open_executor(config: ExecutorConfig | None = None) -> Executor:
    """The executor ``config`` asks for (in-process by default); use it as a context manager.

    Connecting to Ray happens here, so a bad address fails before any work.
    Raises :class:`ExecutorError` (Ray missing, address unreachable).
    """
    config = config or ExecutorConfig()
    if config.backend == "ray":
        return RayExecutor(config)
    if config.backend == "pool":
        return PoolExecutor(config)
    return Executor(config)


def run_tasks(tasks: Sequence[Task], config: ExecutorConfig | None = None, *, on_result: OnResult | None = None) -> list[Outcome]:
    """Open an executor for ``config``, map ``tasks`` through it and close it."""
    with open_executor(config) as ex:
        return ex.map(tasks, on_result=on_result)


__all__ = ["BACKENDS", "MAX_RETRIES", "RAY_PIN", "Executor", "ExecutorConfig", "ExecutorError", "OnResult", "Outcome", "PoolExecutor",
           "RayExecutor", "Task", "TasksFailedError", "check_ray_address", "open_executor", "parse_ray_address", "run_tasks",
           "successful_values"]
