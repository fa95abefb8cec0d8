"""Edge lowering + XNNPACK partitioning of many methods, spread over processes.

Lowering is the export's largest stage (about 80% of a MiniLM int8 export) and
runs on one core: ``run_decompositions`` re-traces each method with fake
tensors, then XNNPACK's preprocess passes build the delegate. The methods of a
program (one per sequence bucket) are independent until ``to_executorch``, so
:func:`lower_methods` lowers them in ``processes`` processes at once: this one
and ``processes - 1`` helpers (``python -m edgenlp.export.lowering``, started
as plain subprocesses, so a user's script without a ``__main__`` guard is never
re-imported). A helper gets its methods as ``torch.export`` archives and hands
back each lowered method serialized with ExecuTorch's edge-dialect serializer
(delegate blobs and their named data included); the methods are then joined in
one :class:`~executorch.exir.EdgeProgramManager`. The joined program is the
same program as one lowered in a single call: ``tests/export/test_lowering.py``
checks that the ``.pte`` bytes are identical.

Helpers stay warm for this process's next export (a test session or a
``compress`` run exports many programs, and a helper's start-up, importing
torch and ExecuTorch, costs about 5 s): each exits when this process ends or
after :data:`HELPER_IDLE_S` without work. A helper that fails (cannot start,
runs out of memory, dies) costs time, not the export: its methods are lowered
here instead, with a warning.
"""

from __future__ import annotations

import atexit
import contextlib
import io
import logging
import os
import select
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Mapping

log = logging.getLogger(__name__)

ENV_PROCESSES = "EDGENLP_LOWER_PROCESSES"  # overrides the automatic choice (1 = lower in this process only)
ENV_CACHE = "EDGENLP_LOWERING_CACHE"  # a folder that keeps lowered methods for the next export of the same program


class LoweringCache:
    """Lowered methods kept in a folder, keyed by the exported program they were lowered from.

    The key is a hash of the method's name, the ``torch.export`` archive of
    its program (graph, weights, signature) and the torch and ExecuTorch
    versions; the value is the lowered method in the serialized form helpers
    hand back. Exporting the same program again (a resumed ``compress``, a
    re-export with other ONNX settings, a test session's repeated tiny models)
    then skips its lowering; a changed weight, shape or version is another key.
    Entries are written to a temporary name and renamed, so processes may share
    the folder. Off unless ``$EDGENLP_LOWERING_CACHE`` names a folder.
    """

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    @classmethod
    def from_env(cls) -> LoweringCache | None:
        root = os.environ.get(ENV_CACHE, "").strip()
        return cls(Path(root)) if root else None

    def key(self, name: str, program) -> str:
        import hashlib
        from importlib.metadata import version

        import torch

        buf = io.BytesIO()
        torch.export.save(program, buf)
        h = hashlib.sha256(f"{name}\0{version('torch')}\0{version('executorch')}\0xnnpack\0".encode())
        h.update(buf.getvalue())
        return h.hexdigest()

    def get(self, key: str):
        path = self.root / f"{key}.edge"
        if not path.is_file():
            return None
        try:
            return _load_lowered(path)
        except Exception as exc:  # a damaged entry is lowered again (and replaced)
            log.warning("lowering cache entry %s unreadable (%s); lowering again", path.name, exc)
            return None

    def put(self, key: str, program) -> None:
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            _save_lowered(program, self.root / f"{key}.edge")
        except OSError as exc:  # a full or read-only cache costs the next export time, never this one
            log.warning("could not keep a lowered method in %s (%s)", self.root, exc)


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def resolve_processes(processes: int | None, methods: int) -> int:
    """How many processes lower ``methods`` methods: ``processes`` if given, else
    ``$EDGENLP_LOWER_PROCESSES``, else one per usable core; never more than there are methods."""
    if processes is None:
        env = os.environ.get(ENV_PROCESSES, "").strip()
        if env:
            if not env.isdigit() or int(env) < 1:
                raise ValueError(f"{ENV_PROCESSES} must be a whole number >= 1, got {env!r}")
            processes = int(env)
        else:
            processes = usable_cores()
    if processes < 1:
        raise ValueError(f"processes must be >= 1, got {processes}")
    return max(1, min(processes, methods))


@contextlib.contextmanager
def shared_provenance():
    """Within the block, node provenance records are shared between graphs, not deep-copied.

    Every pass of the edge and XNNPACK pipelines re-creates each node, and
    torch records where it came from (``node.meta["from_node"]``) by
    deep-copying the whole chain of earlier records: work that grows with the
    square of the number of passes, about 15% of a lowering. The records are
    never changed once made (ExecuTorch only walks them, for debug handles), so
    sharing them gives the same program, byte for byte
    (``tests/export/test_lowering.py``), in less time.
    """
    import torch.fx.traceback as fx_traceback

    cls = getattr(fx_traceback, "NodeSource", None)
    if cls is None or "__deepcopy__" in vars(cls):  # another torch, or already inside the block
        yield
        return
    cls.__deepcopy__ = lambda self, memo: self
    try:
        yield
    finally:
        del cls.__deepcopy__


def _lower_one(name: str, program):
    """``program`` (an aten-dialect ExportedProgram) lowered alone: its edge-dialect ExportedProgram."""
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower

    with shared_provenance():
        return to_edge_transform_and_lower({name: program}, partitioner=[XnnpackPartitioner()]).exported_program(name)


def positional_args(graph_module) -> int:
    """Move arguments the edge serializer turned into keywords back into positions; how many nodes changed.

    The serializer keeps no distinction between positional and keyword
    arguments, and reads every argument after the first defaulted one back as
    a keyword. ExecuTorch's quant-fusion patterns match positional arguments,
    so ``dequantize_affine(w, ..., quant_min=-128, quant_max=127)`` would no
    longer fuse with the embedding into ``embedding_byte``.
    """
    changed = 0
    for node in graph_module.graph.nodes:
        schema = getattr(node.target, "_schema", None)
        if node.op != "call_function" or schema is None or not node.kwargs:
            continue
        args, kwargs = list(node.args), dict(node.kwargs)
        for i, arg in enumerate(schema.arguments):
            if arg.kwarg_only or i < len(args):
                continue
            if arg.name not in kwargs:
                break
            args.append(kwargs.pop(arg.name))
        if len(args) != len(node.args):
            node.args, node.kwargs = tuple(args), kwargs
            changed += 1
    if changed:
        graph_module.recompile()
    return changed


def _save_lowered(program, path: Path) -> None:
    from executorch.exir.serde import serialize as serde

    buf = io.BytesIO()
    serde.save(program, buf)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.part")  # processes sharing a cache folder never share a part
    tmp.write_bytes(buf.getvalue())
    os.replace(tmp, path)


def _load_lowered(path: Path):
    from executorch.exir.serde import serialize as serde

    program = serde.load(io.BytesIO(path.read_bytes()))
    positional_args(program.graph_module)
    return program


def _helper_env() -> dict:
    env = dict(os.environ)
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        env[var] = "1"
    env[ENV_PROCESSES] = "1"
    root = str(Path(__file__).resolve().parents[2])  # so the helper imports this edgenlp, installed or not
    env["PYTHONPATH"] = os.pathsep.join([root, *filter(None, [env.get("PYTHONPATH")])])
    return env


HELPER_IDLE_S = 300.0  # a helper nobody gave work for this long exits (its memory goes back)
HELPER_ANSWER_S = 1800.0  # a helper that has not answered a job this long is stopped; this process lowers the job


class _Helper:
    """One helper process: ``python -m edgenlp.export.lowering``, kept between exports of this process.

    Protocol, one line each way: this process writes ``DIR NAME...``; the
    helper lowers ``DIR/NAME.pt2`` into ``DIR/NAME.edge`` for each name and
    answers ``ok`` (or ``error MESSAGE``). It exits on end of input (this
    process is gone) or after :data:`HELPER_IDLE_S` without work. Its stderr
    goes to a log file, so nothing it prints can block it, and so does its
    standard output (the answers have a descriptor of their own): a line a
    library prints cannot pass for an answer. A helper that gives no answer
    within :data:`HELPER_ANSWER_S`, or a line that is not one, is stopped.
    """

    def __init__(self) -> None:
        self.log = tempfile.TemporaryFile(prefix="edgenlp-lower-", suffix=".log")
        self.proc = subprocess.Popen([sys.executable, "-m", "edgenlp.export.lowering", "--serve", str(HELPER_IDLE_S)],
                                     env=_helper_env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log)
        self.busy = False

    def alive(self) -> bool:
        return self.proc.poll() is None

    def send(self, work: Path, names: list[str]) -> None:
        self.proc.stdin.write((" ".join([str(work), *names]) + "\n").encode())
        self.proc.stdin.flush()
        self.busy = True

    def result(self, timeout_s: float = HELPER_ANSWER_S) -> str | None:
        """``None`` when the job went well, else why it did not (a helper that did not answer is stopped)."""
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout_s)
        if not ready:
            self.proc.kill()  # busy stays set: never reused
            self.proc.wait()
            return f"no answer within {timeout_s:g} s"
        line = self.proc.stdout.readline().decode(errors="replace").strip()
        self.busy = False
        if line == "ok":
            return None
        if line.startswith("error "):
            return line[len("error "):]
        if self.alive():  # not an answer of the protocol: the helper is not trusted with another job
            self.proc.kill()
        self.proc.wait()
        self.log.seek(0)
        tail = self.log.read().decode(errors="replace").strip().splitlines()[-1:]
        return " ".join(tail) or f"exit status {self.proc.returncode}"

    def close(self) -> None:
        if self.alive():
            self.proc.kill()
        self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None and not stream.closed:
                try:
                    stream.close()
                except OSError:  # a job still buffered for a helper that is gone
                    pass
        self.log.close()


_IDLE: list[_Helper] = []  # warm helpers of this process, waiting for the next export


def _take_helpers(n: int) -> list[_Helper]:
    out = []
    while _IDLE and len(out) < n:
        h = _IDLE.pop()
        if h.alive():
            out.append(h)
        else:
            h.close()
    try:
        while len(out) < n:
            out.append(_Helper())
    except OSError as exc:
        log.warning("could not start a lowering process (%s); lowering with %d helper(s)", exc, len(out))
    return out


def _release_helpers(helpers: list[_Helper]) -> None:
    for h in helpers:
        if h.alive() and not h.busy:  # a helper interrupted mid-job could answer a stale job: never reused
            _IDLE.append(h)
        else:
            h.close()


@atexit.register
def _close_idle_helpers() -> None:
    while _IDLE:
        _IDLE.pop().close()


class Lowering:
    """Lowers methods in ``processes`` processes: this one and ``processes - 1`` helpers, taken on ``__enter__``.

    Enter it before ``torch.export``-ing the methods: a new helper spends its
    first seconds importing torch and ExecuTorch, and does that while this
    process exports. Helpers stay warm for this process's next export (and
    exit after :data:`HELPER_IDLE_S` idle). ``processes`` as
    :func:`resolve_processes` reads it.

    >>> with Lowering(len(buckets)) as lowering:          # doctest: +SKIP
    ...     programs = {...}                               # torch.export each method
    ...     edge, stages = lowering.lower(programs)
    """

    def __init__(self, methods: int, processes: int | None = None) -> None:
        self.processes = resolve_processes(processes, methods)
        self.cached = 0  # methods the last lower() took from the lowering cache
        self._helpers: list[_Helper] = []

    def __enter__(self) -> Lowering:
        if self.processes > 1:
            self._helpers = _take_helpers(self.processes - 1)
        return self

    def __exit__(self, *exc) -> None:
        _release_helpers(self._helpers)
        self._helpers = []

    def lower(self, programs: Mapping[str, object]):
        """``(EdgeProgramManager, stages)``: every program in ``programs`` lowered with the XNNPACK partitioner.

        ``programs`` maps method names to ``torch.export`` programs, as
        ``to_edge_transform_and_lower`` takes them; ``stages`` holds the
        seconds spent (``edge_lower_partition`` in all). The result equals a
        single ``to_edge_transform_and_lower(programs, ...)`` call. Methods
        found in the :class:`LoweringCache` (``$EDGENLP_LOWERING_CACHE``) are
        taken from it (:attr:`cached` counts them).
        """
        start = time.perf_counter()
        self.cached = 0
        cache = LoweringCache.from_env()
        if cache is not None:
            keys = {name: cache.key(name, program) for name, program in programs.items()}
            kept = {name: got for name in programs if (got := cache.get(keys[name])) is not None}
            todo = {name: program for name, program in programs.items() if name not in kept}
            if kept:
                log.info("lowering cache: %d of %d methods lowered before (%s)", len(kept), len(programs), cache.root)
            if todo:
                edge, stages = self._lower(todo, start)
                fresh = {name: edge.exported_program(name) for name in todo}
                for name, program in fresh.items():
                    cache.put(keys[name], program)
                kept.update(fresh)
            else:
                self.processes, stages = 1, {}
            from executorch.exir import EdgeProgramManager

            edge = EdgeProgramManager({name: kept[name] for name in programs})
            self.cached = len(programs) - len(todo)
            return edge, {**stages, "edge_lower_partition": time.perf_counter() - start}
        return self._lower(programs, start)

    def _lower(self, programs: Mapping[str, object], start: float):
        import torch
        from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
        from executorch.exir import EdgeProgramManager, to_edge_transform_and_lower

        names = list(programs)
        helpers = self._helpers[: max(0, len(names) - 1)]
        if not helpers:
            self.processes = 1
            with shared_provenance():
                edge = to_edge_transform_and_lower(dict(programs), partitioner=[XnnpackPartitioner()])
            return edge, {"edge_lower_partition": time.perf_counter() - start}
        self.processes = len(helpers) + 1
        groups = [names[i::self.processes] for i in range(self.processes)]  # this process takes groups[0]
        lowered: dict[str, object] = {}
        with tempfile.TemporaryDirectory(prefix="edgenlp-lower-") as d:
            work = Path(d)
            handed: list[tuple[list[str], _Helper | None]] = []
            for group, helper in zip(groups[1:], helpers):
                for name in group:
                    torch.export.save(programs[name], work / f"{name}.pt2")
                try:
                    helper.send(work, group)
                    handed.append((group, helper))
                except OSError:  # the helper died before it got the job
                    handed.append((group, None))
            handed_off = time.perf_counter() - start
            log.info("lowering %d methods in %d processes (here: %s)", len(names), self.processes, ", ".join(groups[0]))
            lowered = {name: _lower_one(name, programs[name]) for name in groups[0]}
            here = time.perf_counter() - start
            for group, helper in handed:
                why = helper.result() if helper is not None else "it died before it got its methods"
                if why is not None or any(not (work / f"{name}.edge").exists() for name in group):
                    log.warning("a lowering process failed (%s); lowering %s here", why, ", ".join(group))
                    lowered.update({name: _lower_one(name, programs[name]) for name in group})
                    self.processes -= 1
                else:
                    lowered.update({name: _load_lowered(work / f"{name}.edge") for name in group})
        edge = EdgeProgramManager({name: lowered[name] for name in names})
        stages = {"edge_lower_partition": time.perf_counter() - start, "lowering_handoff": handed_off,
                  "lowering_here": here - handed_off}
        return edge, stages


def lower_methods(programs: Mapping[str, object], *, processes: int | None = None):
    """``(EdgeProgramManager, stages, processes)``: :meth:`Lowering.lower` with helpers started just now."""
    with Lowering(len(programs), processes) as lowering:
        edge, stages = lowering.lower(programs)
    return edge, stages, lowering.processes


def _serve(idle_s: float) -> int:
    """Helper process: import what lowering needs, then lower the jobs read from stdin (see :class:`_Helper`)."""
    import torch
    import torchao.quantization  # noqa: F401  (registers the torchao ops the programs call)
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner  # noqa: F401
    from executorch.exir.serde import serialize  # noqa: F401

    from edgenlp.sparse.ops import register_ops

    register_ops()  # edgenlp::sparse_linear*, which programs of sparse models call
    torch.set_num_threads(1)
    answers = os.fdopen(os.dup(1), "w")  # the protocol's own descriptor
    os.dup2(2, 1)  # what anything else prints to standard output goes to the log
    while True:
        ready, _, _ = select.select([sys.stdin], [], [], idle_s)
        if not ready:
            return 0  # idle too long
        line = sys.stdin.readline()
        if not line:
            return 0  # the process that started this one is gone
        work, *names = line.split()
        try:
            for name in names:
                program = torch.export.load(Path(work) / f"{name}.pt2")
                _save_lowered(_lower_one(name, program), Path(work) / f"{name}.edge")
            answer = "ok"
        except Exception as exc:  # reported to the caller, which lowers these methods itself
            answer = "error " + " ".join(f"{type(exc).__name__}: {exc}".split())[:500]
        answers.write(answer + "\n")
        answers.flush()


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING)
    if sys.argv[1:2] != ["--serve"] or len(sys.argv) != 3:
        sys.exit("usage: python -m edgenlp.export.lowering --serve IDLE_SECONDS (started by edgenlp.export.lowering)")
    sys.exit(_serve(float(sys.argv[2])))
