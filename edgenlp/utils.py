"""Small shared helpers: atomic writes, hashing, environment facts."""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import io
import json
import os
import platform
import shutil
import tempfile
from pathlib import Path
from typing import Iterator


def lazy_exports(package: str, exports: dict[str, str]):
    """A package's module ``__getattr__`` (PEP 562): ``name`` is imported from ``package.<exports[name]>`` on first
    use, so importing the package imports none of its submodules (nor torch through them)."""

    def __getattr__(name: str):
        if name not in exports:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(f"{package}.{exports[name]}"), name)

    return __getattr__


def sha256_file(path: str | Path, *, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


@contextlib.contextmanager
def atomic_dir(dest: str | Path, *, overwrite: bool = True) -> Iterator[Path]:
    """Yield a temporary directory beside ``dest``; rename it to ``dest`` on success.

    On any exception the temporary directory is removed and ``dest`` is left as
    it was, so a failed step never leaves a half-written artifact.
    """
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.tmp-", dir=dest.parent))
    try:
        yield tmp
        if dest.exists():
            if not overwrite:
                raise FileExistsError(dest)
            old = dest.with_name(f".{dest.name}.old-{os.getpid()}")
            dest.rename(old)
            tmp.rename(dest)
            shutil.rmtree(old, ignore_errors=True)
        else:
            tmp.rename(dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def atomic_write_text(path: str | Path, text: str) -> Path:
    """Write ``text`` to ``path`` through a temporary file and a rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    return path


def atomic_write_json(path: str | Path, obj) -> Path:
    return atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=False) + "\n")


@contextlib.contextmanager
def quiet_stderr(*, enabled: bool = True) -> Iterator[None]:
    """Silence file descriptor 2 (native libraries' log lines) inside the block.

    Python exceptions raised inside still propagate normally; only output
    written to stderr meanwhile is dropped. Disabled when logging is at DEBUG.
    """
    import logging
    import sys

    if not enabled or logging.getLogger().isEnabledFor(logging.DEBUG):
        yield
        return
    sys.stderr.flush()
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        # and what bindings write through Python's sys.stderr (ExecuTorch's log lines do)
        with contextlib.redirect_stderr(io.StringIO()):
            yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def peak_rss_mb() -> float:
    """Peak resident set size of this process, in MiB."""
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def cpu_info() -> dict:
    """CPU model and the ISA flags that matter for the kernels."""
    info = {"machine": platform.machine(), "cpu_count": os.cpu_count()}
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return info
    for line in text.splitlines():
        if line.startswith("model name") and "model" not in info:
            info["model"] = line.split(":", 1)[1].strip()
        if line.startswith(("flags", "Features")) and "isa" not in info:
            flags = set(line.split(":", 1)[1].split())
            wanted = ("avx2", "fma", "avx512f", "avx512bw", "avx512_vnni", "avx512vnni", "avx512_bf16", "avx_vnni", "amx_tile",
                      "asimd", "asimddp", "i8mm", "sve")
            info["isa"] = [f for f in wanted if f in flags]
    return info


def isa_flags() -> str:
    """:func:`cpu_info`'s ISA flags as one space-separated string (what benchmark reports record)."""
    return " ".join(cpu_info().get("isa", [])) or "unknown"


def library_versions() -> dict:
    from importlib import metadata

    out = {"python": platform.python_version()}
    for pkg in ("torch", "executorch", "onnxruntime", "onnx", "transformers", "torchao", "numpy"):
        with contextlib.suppress(metadata.PackageNotFoundError):
            out[pkg] = metadata.version(pkg)
    return out


def environment() -> dict:
    return {"cpu": cpu_info(), "versions": library_versions(), "platform": platform.platform()}


DEVICES = ("auto", "cpu", "cuda")


def resolve_device(spec: str = "auto") -> str:
    """``"auto"`` -> ``"cuda"`` when a CUDA device is present, else ``"cpu"``; ``"cuda"`` without one is an error.

    The training verbs (``finetune``, ``prune``) take ``--device auto|cpu|cuda``;
    export, evaluation and latency always run on the CPU.
    """
    import torch

    from edgenlp.errors import EdgeNLPError

    if spec not in DEVICES:
        raise EdgeNLPError(f"--device must be one of {', '.join(DEVICES)}, got {spec!r}")
    if spec == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if spec == "cuda" and not torch.cuda.is_available():
        raise EdgeNLPError("--device cuda: no CUDA device is available (this torch build or machine has none)")
    return spec


class LineProgress:
    """What a progress bar says, as plain lines, for a stderr that is not a terminal (a log file, CI).

    Takes the calls of :class:`rich.progress.Progress` that edgenlp makes (``add_task``, ``update``,
    ``advance``) and writes ``description: done/total (pct%) fields, elapsed`` at most once every
    ``every_s`` seconds per task, and once when a task completes, so a long step redirected to a file
    still shows that it moves (rich draws nothing there until the end).
    """

    def __init__(self, *, every_s: float = 30.0, stream=None, clock=None) -> None:
        import sys
        import time

        self.every_s = every_s
        self.stream = stream if stream is not None else sys.stderr
        self.clock = clock or time.monotonic
        self.tasks: dict[int, dict] = {}

    def __enter__(self) -> "LineProgress":
        return self

    def __exit__(self, *exc) -> None:
        return None

    def add_task(self, description: str, total: float | None = None, **fields) -> int:
        task_id = len(self.tasks)
        now = self.clock()
        self.tasks[task_id] = {"description": description, "total": total, "completed": 0.0, "fields": fields,
                               "start": now, "last": now, "done": False}
        return task_id

    def advance(self, task_id: int, advance: float = 1) -> None:
        self.update(task_id, advance=advance)

    def update(self, task_id: int, *, advance: float | None = None, completed: float | None = None,
               total: float | None = None, description: str | None = None, **fields) -> None:
        t = self.tasks[task_id]
        if total is not None:
            t["total"] = total
        if description is not None:
            t["description"] = description
        if completed is not None:
            t["completed"] = completed
        if advance is not None:
            t["completed"] += advance
        t["fields"].update(fields)
        now = self.clock()
        finished = t["total"] is not None and t["completed"] >= t["total"]
        if (finished and not t["done"]) or now - t["last"] >= self.every_s:
            t["last"], t["done"] = now, finished
            self.stream.write(self.line(task_id, now) + "\n")
            self.stream.flush()

    def line(self, task_id: int, now: float) -> str:
        t = self.tasks[task_id]
        done = f"{t['completed']:g}"
        if t["total"]:
            done += f"/{t['total']:g} ({100.0 * t['completed'] / t['total']:.0f}%)"
        units = {"eps": "{:.1f} ex/s"}  # the fields a bar shows with a unit, not a name
        fields = [units[k].format(v) if k in units else f"{k} {v:.4g}" if isinstance(v, float) else str(v)
                  for k, v in t["fields"].items() if v not in ("", None)]
        elapsed = int(now - t["start"])
        return ", ".join([f"{t['description']}: {done}", *fields, f"{elapsed // 60}m{elapsed % 60:02d}s elapsed"])


def progress_display(show: bool, make_bar):
    """The progress display of a long step: ``make_bar()`` (a rich progress bar) on a terminal,
    :class:`LineProgress` when stderr is not one, or a no-op context giving ``None`` when not ``show``."""
    import sys

    if not show:
        return contextlib.nullcontext(None)
    if not getattr(sys.stderr, "isatty", lambda: False)():
        return LineProgress()
    return make_bar()
