"""The one harness every script in tools/bench/ times with and writes its results through.

Timing comes from the library (:mod:`edgenlp.profile.timing`, which the
profiler and ``compress``'s verify stage use too): interleaved rounds of named
callables in one process, medians, p10–p90 and per-round ratios against a
named baseline. This module adds what only benchmarks need:

Scripts put the repository root first on ``sys.path`` and import this as
``tools.bench.harness``.

* :func:`fresh_process`: one measurement in a new interpreter (cold start, or
  a thread pool that must be sized before anything loads), running a worker
  of :mod:`tools.bench.workers` with ``python -m``; interleave such calls with
  :func:`run_rounds`;
* :class:`Results`: writes ``<stem>.json``, ``<stem>.md`` and, where a script
  plots, ``<stem>.png`` atomically, each with the host's CPU model, ISA flags,
  core and thread counts, the load average when the results object was made
  and when it wrote, and the git commit::

    results = Results(script="native_quant", threads=[1, 2])
    t = interleave({"fp32": f, "int8": g}, rounds=5, iters=20, warmup=3)
    results.write(RESULTS / "native_quant", {"rows": t.report(baseline="fp32")}, "# ...\\n")

The JSON gets a ``host`` block and the markdown a host line at its end; the
keys a script already wrote stay as they were (other scripts and the README
read them).
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Sequence

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "tools" / "bench" / "results"

from edgenlp.profile.timing import (  # re-exported: the scripts import timing from here
    Timings,
    interleave,
    median,
    percentile,
    round_order,
    run_rounds,
    summarize,
    timed,
)

__all__ = ["REPO", "RESULTS", "Results", "Timings", "fresh_process", "git_commit", "host_info", "interleave", "load_average",
           "median", "percentile", "round_order", "run_rounds", "summarize", "timed"]

log = logging.getLogger("bench.harness")
WORKERS = "tools.bench.workers"


# --------------------------------------------------------------------------- host facts


def load_average() -> list[float]:
    """The 1-, 5- and 15-minute load averages, rounded to 0.01."""
    return [round(x, 2) for x in os.getloadavg()]


def git_commit(repo: Path = REPO) -> dict:
    """``{"commit": sha, "dirty": bool}`` of the checkout the benchmark ran from (``None`` outside git)."""
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True, check=True).stdout.strip()
        status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=repo, capture_output=True,
                                text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return {"commit": None, "dirty": None}
    return {"commit": sha, "dirty": bool(status.strip())}


def host_info(*, threads=None) -> dict:
    """CPU model, core count, ISA flags (:func:`edgenlp.utils.cpu_info`), the threads a benchmark used, versions."""
    from edgenlp.utils import environment, isa_flags

    env = environment()
    cpu = env["cpu"]
    return {"cpu_model": cpu.get("model", cpu.get("machine", "?")), "machine": cpu.get("machine"), "cpu_count": cpu.get("cpu_count"),
            "isa_flags": isa_flags(), "threads": threads, "environment": env}


# --------------------------------------------------------------------------- fresh processes


def fresh_process(worker: str, args: dict, *, threads: int | None = None, timeout: float | None = None,
                  env: dict | None = None) -> dict:
    """Run worker ``worker`` of :mod:`tools.bench.workers` in a new interpreter; its JSON result.

    ``python -m tools.bench.workers WORKER '<json args>'`` from the repository
    root, with ``OMP_NUM_THREADS`` set to ``threads`` when given. The worker
    prints one JSON line last; a failing worker raises ``RuntimeError`` with
    the end of its stderr.
    """
    full_env = {**os.environ, **(env or {})}
    full_env["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [full_env.get("PYTHONPATH")])])
    if threads is not None:
        full_env["OMP_NUM_THREADS"] = str(threads)
    cmd = [sys.executable, "-m", WORKERS, worker, json.dumps(args)]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, env=full_env, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"worker {worker} failed (exit {proc.returncode}): {proc.stderr.strip()[-2000:]}")
    lines = proc.stdout.strip().splitlines()
    if not lines:
        raise RuntimeError(f"worker {worker} printed no result: {proc.stderr.strip()[-2000:]}")
    return json.loads(lines[-1])


# --------------------------------------------------------------------------- results


class Results:
    """Writes one benchmark's results atomically, with the host, load and commit recorded.

    Make it before the measurements (it records the load average then); call
    :meth:`write` whenever there is something to save (long runs write after
    every step). ``threads`` is what the benchmark ran with (a number or a list).
    """

    def __init__(self, *, script: str, threads=None, argv: Sequence[str] | None = None) -> None:
        self.script = script
        self.threads = list(threads) if isinstance(threads, (list, tuple)) else threads
        self.argv = list(sys.argv[1:] if argv is None else argv)
        self.started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        self.load_before = load_average()
        self._host = host_info(threads=self.threads)
        self._git = git_commit()

    def host(self) -> dict:
        """The ``host`` block: CPU, ISA flags, threads, load average before and now, git commit, dates, command line."""
        h = self._host
        return {"cpu_model": h["cpu_model"], "machine": h["machine"], "cpu_count": h["cpu_count"], "isa_flags": h["isa_flags"],
                "threads": self.threads, "load_avg_before": self.load_before, "load_avg_after": load_average(),
                "git_commit": self._git["commit"], "git_dirty": self._git["dirty"], "started": self.started,
                "written": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "script": f"tools/bench/{self.script}.py",
                "argv": self.argv, "versions": h["environment"].get("versions", {})}

    @property
    def environment(self) -> dict:
        """:func:`edgenlp.utils.environment` of this host (what the scripts' ``environment`` keys hold)."""
        return self._host["environment"]

    @staticmethod
    def host_line(host: dict) -> str:
        """One markdown line naming the host, threads, load average and commit."""
        threads = host.get("threads")
        threads = ", ".join(map(str, threads)) if isinstance(threads, list) else threads
        commit = host.get("git_commit")
        commit = "not a git checkout" if not commit else commit[:12] + (" with local changes" if host.get("git_dirty") else "")
        before, after = host.get("load_avg_before") or ["?"], host.get("load_avg_after") or ["?"]
        return (f"Host: {host.get('cpu_model')}, {host.get('cpu_count')} cores, ISA flags {host.get('isa_flags')}; "
                f"threads {threads if threads is not None else 'n/a'}; load average (1 min) {before[0]} at the start, "
                f"{after[0]} at the end; commit {commit}; {host.get('written')} "
                f"(`{host.get('script')}`).")

    @staticmethod
    def figure(path: str | Path, plot: Callable[[Path], None]) -> Path:
        """``plot(tmp)`` draws into a temporary ``.png`` beside ``path``, renamed to ``path`` when it succeeds."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.stem}.tmp-{os.getpid()}{path.suffix}")
        try:
            plot(tmp)
            os.replace(tmp, path)
        finally:
            if tmp.exists():
                tmp.unlink()
        return path

    def write(self, stem: str | Path, doc: dict, markdown: str | None = None, *,
              plot: Callable[[Path], None] | None = None) -> dict:
        """Write ``<stem>.json`` (``doc`` plus the ``host`` block), ``<stem>.md`` (+ host line) and ``<stem>.png``.

        ``plot(path)`` draws the figure into ``path`` (a temporary name renamed
        into place). Returns the document as written.
        """
        from edgenlp.utils import atomic_write_json, atomic_write_text

        stem = Path(stem)
        stem = stem.with_suffix("") if stem.suffix in (".json", ".md", ".png") else stem
        host = self.host()
        out = {**doc, "host": host}
        atomic_write_json(stem.with_name(stem.name + ".json"), out)
        if markdown is not None:
            atomic_write_text(stem.with_name(stem.name + ".md"), markdown.rstrip("\n") + "\n\n" + self.host_line(host) + "\n")
        if plot is not None:
            self.figure(stem.with_name(stem.name + ".png"), plot)
        log.info("wrote %s", stem.with_name(stem.name + ".json"))
        return out
