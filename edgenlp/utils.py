"""Small shared helpers: atomic writes, hashing, environment facts."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import platform
import shutil
import tempfile
from pathlib import Path
from typing import Iterator


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
