"""Executors on this machine: in this process (:class:`Executor`) and a local process pool (:class:`PoolExecutor`)."""

from __future__ import annotations

import logging
import os
import sys
import time
import traceback
from collections import deque
from typing import Callable, Mapping, Sequence

from edgenlp.executor.config import ExecutorConfig, Task, Outcome, OnResult

log = logging.getLogger(__name__)


# --------------------------------------------------------------------------- what runs in the worker


def _call(fn: Callable, args: tuple, kwargs: Mapping) -> tuple:
    """Run one task; an exception comes back as data (Ray would wrap it), with the exception itself where it pickles."""
    start = time.perf_counter()
    try:
        value = fn(*args, **kwargs)
    except Exception as exc:
        return "raised", _one_line(exc), traceback.format_exc(), time.perf_counter() - start, _portable(exc)
    return "ok", value, None, time.perf_counter() - start, None


def _portable(exc: Exception) -> Exception | None:
    """``exc`` if it survives pickling (to come back from a worker as itself), else None."""
    import pickle

    try:
        pickle.loads(pickle.dumps(exc))
    except Exception:
        return None
    exc.__traceback__ = None  # the text is kept in the outcome; frames do not pickle
    return exc


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _init_pool_worker(threads: int) -> None:
    """Pool worker start-up: size the thread pools before the task imports torch."""
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[var] = str(threads)
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(threads)


# --------------------------------------------------------------------------- executors


class Executor:
    """Runs tasks; use :func:`open_executor`. ``map`` may be called any number of times before ``close``."""

    backend = "inline"

    def __init__(self, config: ExecutorConfig) -> None:
        self.config = config

    def __enter__(self) -> Executor:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Release workers (and a Ray instance this executor started)."""

    def describe(self) -> str:
        """One line for logs and reports: where the tasks run."""
        return "in this process"

    def map(self, tasks: Sequence[Task], *, on_result: OnResult | None = None) -> list[Outcome]:
        """Run ``tasks``; one :class:`Outcome` per task, in the order given.

        ``on_result(outcome, done, total)`` is called on the driver as each
        task finishes (in finishing order). Task keys must be unique.
        """
        tasks = list(tasks)
        keys = [t.key for t in tasks]
        if len(set(keys)) != len(keys):
            dup = sorted({k for k in keys if keys.count(k) > 1})
            raise ValueError(f"task keys must be unique, repeated: {', '.join(dup)}")
        if not tasks:
            return []
        log.info("running %d tasks %s", len(tasks), self.describe())
        progress = _Progress(len(tasks), on_result)
        results = self._run(tasks, progress)
        assert all(r is not None for r in results)
        return results

    def _run(self, tasks: list[Task], progress: _Progress) -> list[Outcome]:
        results: list[Outcome | None] = [None] * len(tasks)
        for i, t in enumerate(tasks):
            results[i] = progress(_outcome(t.key, _call(t.fn, t.args, t.kwargs), attempts=1, lost=0))
        return results  # type: ignore[return-value]


class _Progress:
    def __init__(self, total: int, on_result: OnResult | None) -> None:
        self.total, self.done, self.on_result = total, 0, on_result

    def __call__(self, outcome: Outcome) -> Outcome:
        self.done += 1
        if outcome.ok:
            log.info("%d/%d %s: done in %.1f s", self.done, self.total, outcome.key, outcome.seconds)
        else:
            log.warning("%d/%d %s: %s (%s)", self.done, self.total, outcome.key, outcome.status, outcome.error)
        if self.on_result is not None:
            self.on_result(outcome, self.done, self.total)
        return outcome


def _outcome(key: str, result: tuple, *, attempts: int, lost: int) -> Outcome:
    status, payload, tb, seconds, exc = result
    if status == "ok":
        return Outcome(key, "ok", value=payload, attempts=attempts, lost_workers=lost, seconds=seconds)
    return Outcome(key, "raised", error=payload, attempts=attempts, lost_workers=lost, seconds=seconds, traceback=tb,
                   exception=exc)


def _lost(key: str, *, attempts: int, lost: int, detail: str) -> Outcome:
    return Outcome(key, "lost", error=f"its worker died {lost} time{'s' * (lost > 1)} ({detail})", attempts=attempts,
                   lost_workers=lost)


class PoolExecutor(Executor):
    """``workers`` local processes. A worker that dies breaks the whole pool
    (:class:`~concurrent.futures.process.BrokenProcessPool`, every task in
    flight fails with it): the pool is replaced, and the tasks that were in
    flight are run one at a time until the one that kills its worker is found;
    only that one is charged an attempt."""

    backend = "pool"

    def __init__(self, config: ExecutorConfig) -> None:
        super().__init__(config)
        self._pool = None

    def describe(self) -> str:
        return f"in {self.config.workers} local processes ({self.config.cpus_per_task} thread(s) each)"

    def _new_pool(self):
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        return ProcessPoolExecutor(max_workers=self.config.workers, mp_context=multiprocessing.get_context("spawn"),
                                   initializer=_init_pool_worker, initargs=(self.config.cpus_per_task,))

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    def _run(self, tasks: list[Task], progress: _Progress) -> list[Outcome]:
        from concurrent.futures import FIRST_COMPLETED, wait
        from concurrent.futures.process import BrokenProcessPool

        n = len(tasks)
        results: list[Outcome | None] = [None] * n
        attempts, lost = [0] * n, [0] * n
        queue = deque(range(n))  # tasks not started yet, in submission order
        isolate: deque[int] = deque()  # in flight when a worker died: each runs alone until the culprit is known
        inflight: dict = {}  # future -> task index
        alone = False  # the task in flight is one of ``isolate``'s: nothing runs beside it
        try:
            while queue or isolate or inflight:
                if self._pool is None:
                    self._pool = self._new_pool()
                todo = []
                if not inflight and isolate:
                    todo, alone = [isolate.popleft()], True
                elif not alone and not isolate:
                    todo = [queue.popleft() for _ in range(min(len(queue), self.config.workers - len(inflight)))]
                for i in todo:
                    attempts[i] += 1
                    inflight[self._pool.submit(_call, tasks[i].fn, tasks[i].args, tasks[i].kwargs)] = i
                done, _ = wait(list(inflight), return_when=FIRST_COMPLETED)
                if any(isinstance(f.exception(), BrokenProcessPool) for f in done):
                    done, _ = wait(list(inflight))  # the pool fails every other task in flight at once
                suspects = []
                for f in done:
                    i = inflight.pop(f)
                    exc = f.exception()
                    if isinstance(exc, BrokenProcessPool):
                        suspects.append(i)
                    elif exc is not None:  # raised past _call (SystemExit) or the value would not pickle
                        results[i] = progress(Outcome(tasks[i].key, "raised", error=_one_line(exc), attempts=attempts[i],
                                                      lost_workers=lost[i], traceback="".join(traceback.format_exception(exc))))
                    else:
                        results[i] = progress(_outcome(tasks[i].key, f.result(), attempts=attempts[i], lost=lost[i]))
                if not inflight:
                    alone = False
                if not suspects:
                    continue
                self._pool.shutdown(wait=True, cancel_futures=True)
                self._pool = None
                if len(suspects) > 1:  # any of them may have killed its worker: find out, one at a time
                    log.warning("a worker process died while %s ran; running them one at a time",
                                ", ".join(tasks[i].key for i in sorted(suspects)))
                    isolate.extend(sorted(suspects))
                    continue
                (i,) = suspects
                lost[i] += 1
                if lost[i] > self.config.retries:
                    results[i] = progress(_lost(tasks[i].key, attempts=attempts[i], lost=lost[i], detail="process exited abruptly"))
                else:
                    log.warning("%s: its worker process died (%d of %d allowed); running it again", tasks[i].key, lost[i],
                                self.config.retries)
                    isolate.appendleft(i)  # it runs alone from now on
        except BaseException:
            if self._pool is not None:
                self._pool.shutdown(wait=False, cancel_futures=True)
                self._pool = None
            raise
        return results  # type: ignore[return-value]
