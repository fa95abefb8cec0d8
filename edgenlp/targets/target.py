"""Device targets: one TOML file per device in the top-level ``targets/`` folder.

A target states what the cost model and the planner need to know about a
device: its CPU clusters (cores, clock, per-core peak fp32 and int8
throughput), ISA flags, memory size and bandwidth, the closest ``qemu -cpu``
model, the preferred runtime and backend, and default budgets. Every value in
the shipped files carries a source comment. The schema::

    name = "pixel-7"                 # must match the file name for built-in targets
    description = "..."
    arch = "aarch64"                 # or "x86_64"
    qemu_cpu = "cortex-a76"          # "" for the host
    throughput = "peak"              # "peak" (spec-sheet figures) or "measured" (sustained GEMM rates, host.toml)

    [isa]                            # booleans; aarch64: neon dotprod i8mm fp16 sve (+ sve2, bf16)
    neon = true                      #           x86_64: avx2 fma avx512f avx512_vnni (+ avx sse4_2 f16c avx512bw avx_vnni amx)

    [memory]
    total_mb = 8192
    bandwidth_gbps = 51.2

    [[clusters]]                     # one or more, any order (sorted fastest first when loaded)
    name = "big"
    core = "Cortex-X1"
    cores = 2
    freq_ghz = 2.85
    fp32_gflops_per_core = 91.2
    int8_gops_per_core = 364.8

    [runtime]
    preferred = "executorch"         # executorch | onnx | native
    backend = "xnnpack"
    base_memory_mb = 8.0             # runtime resident set without the model

    [budgets]                        # defaults that the command line overrides
    latency_ms = 20.0
    seq_len = 128
    threads = 2
    memory_mb = 150.0
    size_mb = 25.0
    latency_stat = "p90"             # optional: mean | p90 | max over inputs (dynamic bundles differ per input)

    [measured]                       # optional: free-form numbers measured on the device (host.toml)

``load_target("pixel-7")`` reads ``targets/pixel-7.toml``; a path to a user's
own file works wherever a name does. The built-in ``host`` is the machine
edgenlp runs on (:func:`this_machine`): ``targets/host.toml`` describes the
reference host the shipped cost table was measured on, and loading it probes
this machine's CPU, cores, ISA flags and memory over it, with this machine's
calibrated rates once ``edgenlp targets calibrate host`` has run here. The folder is the repository's
``targets/`` unless ``EDGENLP_TARGETS_DIR`` names another.
"""

from __future__ import annotations

import contextlib
import math
import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edgenlp.config import Config
from edgenlp.errors import EdgeNLPError

ARCHES = ("aarch64", "x86_64")
ISA_FLAGS = {
    "aarch64": (("neon", "dotprod", "i8mm", "fp16", "sve"), ("sve2", "bf16")),
    "x86_64": (("avx2", "fma", "avx512f", "avx512_vnni"), ("avx", "sse4_2", "f16c", "avx512bw", "avx_vnni", "amx")),
}  # arch -> (required, optional)
RUNTIMES = ("executorch", "onnx", "native")
PRECISIONS = ("fp32", "int8", "int4")
THROUGHPUT_KINDS = ("peak", "measured")


class TargetError(EdgeNLPError):
    """An unknown target name or a malformed target file."""


def targets_dir() -> Path:
    """The folder of built-in targets: ``$EDGENLP_TARGETS_DIR``, the repository's ``targets/``, or the wheel's copy."""
    env = os.environ.get("EDGENLP_TARGETS_DIR")
    if env:
        return Path(env)
    repo = Path(__file__).resolve().parents[2] / "targets"
    packaged = Path(__file__).resolve().parents[1] / "_data" / "targets"  # pyproject.toml wheel.packages
    return packaged if not repo.is_dir() and packaged.is_dir() else repo


def _positive(name: str, value, *, allow_none: bool = False) -> None:
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a positive number, got {value!r}")


@dataclass(frozen=True)
class Budgets(Config):
    """What a compressed model may cost on a device: latency at (seq_len, threads), peak memory, bundle size.

    ``None`` leaves a budget open. Example: ``Budgets(latency_ms=20, memory_mb=150, size_mb=25, seq_len=128, threads=2)``.

    ``latency_stat`` names the statistic the latency budget bounds over inputs
    (``mean``, ``p90`` or ``max``; default ``p90``). A static bundle does the
    same work on every input of ``seq_len`` tokens, so all three are its one
    latency; a dynamic bundle (early exits) differs per input, and for ``max``
    it costs its full depth (:mod:`edgenlp.targets.costmodel.dynamic`).
    """

    latency_ms: float | None = None
    memory_mb: float | None = None
    size_mb: float | None = None
    seq_len: int = 128
    threads: int = 1
    latency_stat: str = "p90"

    def __post_init__(self) -> None:
        from edgenlp.targets.costmodel.dynamic import STATISTICS

        for name in ("latency_ms", "memory_mb", "size_mb"):
            _positive(name, getattr(self, name), allow_none=True)
        if self.latency_stat not in STATISTICS:
            raise ValueError(f"latency_stat must be one of {', '.join(STATISTICS)}, got {self.latency_stat!r}")
        for name in ("seq_len", "threads"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be a positive integer, got {v!r}")

    def override(self, **changes) -> "Budgets":
        """A copy with the given budgets replaced; ``None`` values leave the default in place."""
        import dataclasses

        return dataclasses.replace(self, **{k: v for k, v in changes.items() if v is not None})


@dataclass(frozen=True)
class Cluster(Config):
    """A group of identical cores: count, clock, per-core peak fp32 GFLOP/s and int8 GOP/s."""

    name: str
    core: str
    cores: int
    freq_ghz: float
    fp32_gflops_per_core: float
    int8_gops_per_core: float

    def __post_init__(self) -> None:
        if not self.name or not self.core:
            raise ValueError("name and core must be non-empty")
        if isinstance(self.cores, bool) or not isinstance(self.cores, int) or self.cores < 1:
            raise ValueError(f"cores must be a positive integer, got {self.cores!r}")
        for name in ("freq_ghz", "fp32_gflops_per_core", "int8_gops_per_core"):
            _positive(name, getattr(self, name))


@dataclass(frozen=True)
class Target(Config):
    """One device (see the module docstring for the file schema). Clusters are sorted fastest first."""

    name: str
    description: str
    arch: str
    qemu_cpu: str
    isa: tuple[str, ...]  # the flags that are true
    memory_mb: float
    bandwidth_gbps: float
    clusters: tuple[Cluster, ...]
    runtime: str
    backend: str
    base_memory_mb: float
    budgets: Budgets
    measured: tuple[tuple[str, float], ...] = ()
    throughput_kind: str = "peak"
    source: str = ""

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("name must be non-empty")
        if self.arch not in ARCHES:
            raise ValueError(f"arch must be one of {ARCHES}, got {self.arch!r}")
        known = set(sum(ISA_FLAGS[self.arch], ()))
        bad = sorted(set(self.isa) - known)
        if bad:
            raise ValueError(f"isa flag(s) {bad} unknown for {self.arch}; known: {sorted(known)}")
        _positive("memory_mb", self.memory_mb)
        _positive("bandwidth_gbps", self.bandwidth_gbps)
        if self.throughput_kind not in THROUGHPUT_KINDS:
            raise ValueError(f"throughput must be one of {THROUGHPUT_KINDS}, got {self.throughput_kind!r}")
        if not self.clusters:
            raise ValueError("clusters must list at least one cluster")
        if self.runtime not in RUNTIMES:
            raise ValueError(f"runtime must be one of {RUNTIMES}, got {self.runtime!r}")
        if not self.backend:
            raise ValueError("backend must be non-empty")
        _positive("base_memory_mb", self.base_memory_mb)
        if self.budgets.threads > self.cores:
            raise ValueError(f"budgets.threads {self.budgets.threads} exceeds the {self.cores} cores")
        object.__setattr__(self, "clusters", tuple(sorted(self.clusters, key=lambda c: -c.fp32_gflops_per_core)))

    @property
    def cores(self) -> int:
        return sum(c.cores for c in self.clusters)

    def has(self, flag: str) -> bool:
        return flag in self.isa

    def cores_for(self, threads: int) -> list[Cluster]:
        """The cluster of each thread, fastest cores first (how an OS scheduler places a busy pool)."""
        if threads < 1 or threads > self.cores:
            raise ValueError(f"{self.name}: threads must be in 1..{self.cores}, got {threads}")
        out: list[Cluster] = []
        for c in self.clusters:
            out += [c] * c.cores
        return out[:threads]

    def throughput(self, *, precision: str, threads: int = 1) -> float:
        """Mean per-thread peak GFLOP/s (fp32) or GOP/s (int8, int4) over the cores ``threads`` threads run on.

        int4 weights are unpacked to int8 for the multiply on every target edgenlp
        runs on, so int4 uses the int8 rate (an assumption, see the cost model).
        """
        if precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
        cs = self.cores_for(threads)
        attr = "fp32_gflops_per_core" if precision == "fp32" else "int8_gops_per_core"
        return sum(getattr(c, attr) for c in cs) / len(cs)

    @property
    def measured_dict(self) -> dict[str, float]:
        return dict(self.measured)

    def summary(self) -> dict[str, Any]:
        """A flat dict for tables and ``--json``."""
        return {
            "name": self.name,
            "arch": self.arch,
            "cores": " + ".join(f"{c.cores}x {c.core.replace('Cortex-', '')} {c.freq_ghz:g}" for c in self.clusters),
            "isa": list(self.isa),
            "memory_mb": self.memory_mb,
            "bandwidth_gbps": self.bandwidth_gbps,
            "fp32_gflops_core": self.clusters[0].fp32_gflops_per_core,
            "int8_gops_core": self.clusters[0].int8_gops_per_core,
            "runtime": f"{self.runtime}/{self.backend}",
            "qemu_cpu": self.qemu_cpu,
            "budgets": self.budgets.to_dict(),
            "source": self.source,
        }


# --------------------------------------------------------------------------- reading files

_TOP = {"name": str, "description": str, "arch": str, "qemu_cpu": str, "throughput": str, "isa": dict, "memory": dict, "clusters": list,
        "runtime": dict, "budgets": dict, "measured": dict}  # fmt: skip
_REQUIRED_TOP = ("name", "arch", "isa", "memory", "clusters", "runtime", "budgets")
_SECTIONS = {
    "memory": {"total_mb": float, "bandwidth_gbps": float},
    "runtime": {"preferred": str, "backend": str, "base_memory_mb": float},
    "budgets": {"latency_ms": float, "seq_len": int, "threads": int, "memory_mb": float, "size_mb": float, "latency_stat": str},
    "clusters": {"name": str, "core": str, "cores": int, "freq_ghz": float, "fp32_gflops_per_core": float, "int8_gops_per_core": float},
}
_OPTIONAL = {"budgets": {"latency_ms", "memory_mb", "size_mb", "latency_stat"}}


def _typed(path: Path, where: str, value, kind: type):
    ok = isinstance(value, kind) and (kind is bool or not isinstance(value, bool))
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value, ok = float(value), True
    if not ok:
        raise TargetError(f"{path}: field {where!r} must be {kind.__name__}, got {value!r}")
    return value


def _section(path: Path, where: str, table: dict, schema: dict[str, type], optional: set[str] = frozenset()) -> dict:
    if not isinstance(table, dict):
        raise TargetError(f"{path}: field {where!r} must be a table")
    unknown = sorted(set(table) - set(schema))
    if unknown:
        raise TargetError(f"{path}: unknown field '{where}.{unknown[0]}'; expected {', '.join(schema)}")
    out = {}
    for key, kind in schema.items():
        if key not in table:
            if key in optional:
                out[key] = None
                continue
            raise TargetError(f"{path}: missing field {where}.{key}")
        out[key] = _typed(path, f"{where}.{key}", table[key], kind)
    return out


def parse_target(path: str | Path) -> Target:
    """Read and validate one target file; errors name the file and the field."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise TargetError(f"target file not found: {path}") from None
    except tomllib.TOMLDecodeError as exc:
        raise TargetError(f"{path}: not valid TOML ({exc})") from None
    unknown = sorted(set(data) - set(_TOP))
    if unknown:
        raise TargetError(f"{path}: unknown field {unknown[0]!r}; expected {', '.join(_TOP)}")
    for key in _REQUIRED_TOP:
        if key not in data:
            raise TargetError(f"{path}: missing field {key!r}")
    for key, kind in _TOP.items():
        if key in data:
            _typed(path, key, data[key], kind)
    arch = data["arch"]
    if arch not in ARCHES:
        raise TargetError(f"{path}: field 'arch' must be one of {', '.join(ARCHES)}, got {arch!r}")
    required, optional = ISA_FLAGS[arch]
    isa = _section(path, "isa", data["isa"], {k: bool for k in required + optional}, set(optional))
    mem = _section(path, "memory", data["memory"], _SECTIONS["memory"])
    rt = _section(path, "runtime", data["runtime"], _SECTIONS["runtime"])
    bud = _section(path, "budgets", data["budgets"], _SECTIONS["budgets"], _OPTIONAL["budgets"])
    clusters = []
    for i, c in enumerate(data["clusters"]):
        where = f"clusters[{i}]"
        fields = _section(path, where, c, _SECTIONS["clusters"])
        clusters.append(_build(path, where, Cluster, fields))
    measured = tuple((k, float(_typed(path, f"measured.{k}", v, float))) for k, v in data.get("measured", {}).items())
    if bud["latency_stat"] is None:  # optional; Budgets' default
        del bud["latency_stat"]
    budgets = _build(path, "budgets", Budgets, bud)
    return _build(path, "", Target, dict(
        name=data["name"], description=data.get("description", ""), arch=arch, qemu_cpu=data.get("qemu_cpu", ""),
        isa=tuple(k for k, v in isa.items() if v), memory_mb=mem["total_mb"], bandwidth_gbps=mem["bandwidth_gbps"],
        clusters=tuple(clusters), runtime=rt["preferred"], backend=rt["backend"], base_memory_mb=rt["base_memory_mb"],
        budgets=budgets, measured=measured, throughput_kind=data.get("throughput", "peak"), source=str(path),
    ))  # fmt: skip


def _build(path: Path, where: str, cls, fields: dict):
    try:
        return cls(**fields)
    except ValueError as exc:
        msg = str(exc)
        field_name = msg.split(" ", 1)[0]
        prefix = f"{where}." if where else ""
        raise TargetError(f"{path}: field {prefix}{field_name} is invalid: {msg}") from None


@dataclass(frozen=True)
class TargetEntry:
    """A built-in target: its name and file."""

    name: str
    path: Path = field(compare=False)


def list_targets() -> list[TargetEntry]:
    """Built-in targets (``targets/*.toml``, measured tables excluded), sorted by name."""
    d = targets_dir()
    if not d.is_dir():
        return []
    return [TargetEntry(p.stem, p) for p in sorted(d.glob("*.toml"))]


def load_target(name_or_path: str | Path) -> Target:
    """A built-in target by name (``"pixel-7"``) or a target file by path.

    Raises :class:`TargetError` for an unknown name (listing the known ones) or
    a malformed file (naming the file and the field).
    """
    spec = str(name_or_path)
    path = Path(spec)
    if spec.endswith(".toml") or path.is_file() or os.sep in spec:
        if not path.is_file():
            raise TargetError(f"target file not found: {path}")
        target = parse_target(path)
        if path.resolve() == (targets_dir() / "host.toml").resolve():
            return _host(target)
        return target
    known = {e.name: e.path for e in list_targets()}
    if spec not in known:
        raise TargetError(f"unknown target {spec!r}; known targets: {', '.join(sorted(known)) or 'none'} (or pass a .toml file)")
    target = parse_target(known[spec])
    if target.name != spec:
        raise TargetError(f"{known[spec]}: field 'name' is {target.name!r} but the file is named {spec}.toml")
    return _host(target) if spec == "host" else target


def reference_host() -> Target:
    """``targets/host.toml`` as written: the machine the shipped reference cost table was measured on.

    Device estimates transfer that table with this machine's rates, whatever
    machine edgenlp runs on, so a device's plan does not depend on the host.
    """
    return parse_target(targets_dir() / "host.toml")


def _host(reference: Target) -> Target:
    """The built-in ``host`` target is this machine (``EDGENLP_HOST_AS_FILE=1``: the file as written)."""
    return reference if os.environ.get("EDGENLP_HOST_AS_FILE") == "1" else this_machine(reference)


# /proc/cpuinfo flag -> target ISA flag, per architecture
_CPUINFO_FLAGS = {
    "x86_64": {"avx2": "avx2", "fma": "fma", "avx512f": "avx512f", "avx512_vnni": "avx512_vnni", "avx": "avx", "sse4_2": "sse4_2",
               "f16c": "f16c", "avx512bw": "avx512bw", "avx_vnni": "avx_vnni", "amx_tile": "amx"},
    "aarch64": {"asimd": "neon", "asimddp": "dotprod", "i8mm": "i8mm", "fphp": "fp16", "sve": "sve", "sve2": "sve2", "bf16": "bf16"},
}


def probe_this_machine() -> dict[str, Any]:
    """What the ``host`` target takes from the running machine: arch, CPU model, cores, ISA flags, memory."""
    import platform

    arch = {"amd64": "x86_64", "arm64": "aarch64"}.get(platform.machine().lower(), platform.machine().lower())
    out: dict[str, Any] = {"arch": arch, "cores": os.cpu_count() or 1, "model": "", "isa": (), "memory_mb": None, "freq_ghz": None}
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        text = ""
    flags: set[str] = set()
    for line in text.splitlines():
        key, _, val = line.partition(":")
        key = key.strip()
        if key in ("model name", "Model") and not out["model"]:
            out["model"] = val.strip()
        if key in ("flags", "Features") and not flags:
            flags = set(val.split())
        if key == "cpu MHz" and out["freq_ghz"] is None:
            with contextlib.suppress(ValueError):
                out["freq_ghz"] = round(float(val) / 1000.0, 2) or None
    table = _CPUINFO_FLAGS.get(arch, {})
    out["isa"] = tuple(sorted({ours for theirs, ours in table.items() if theirs in flags}))
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                out["memory_mb"] = round(int(line.split()[1]) / 1024.0)
                break
    except (OSError, ValueError, IndexError):
        pass
    return out


def this_machine(reference: Target, *, probe: dict[str, Any] | None = None, rates: dict[str, float] | None = None) -> Target:
    """The ``host`` target as the machine that runs edgenlp, over the reference ``targets/host.toml``.

    The CPU model, core count, ISA flags and memory size are probed from this
    machine. The per-core rates are this machine's when it has been calibrated
    (``rates``, default :func:`host_rates`: the one-thread fp32 GEMM rate that
    ``edgenlp targets calibrate host`` recorded; int8 keeps the reference file's
    int8 : fp32 ratio, which was measured through ExecuTorch); otherwise the
    reference host's, and the description says so. The memory bandwidth stays
    the reference host's. ``measured`` records where each number came from.
    """
    import dataclasses

    probe = probe if probe is not None else probe_this_machine()
    rates = rates if rates is not None else host_rates()
    if probe["arch"] not in ARCHES:
        return reference
    ref_cluster = reference.clusters[0]
    # the same CPU: its model name (a hypervisor may mask the part, so the name alone is not enough) and the ISA
    # flags the reference file states; an AVX2-only "AMD EPYC" is not the AVX-512 one the reference measured
    same_cpu = (probe["model"] == ref_cluster.core or probe["model"] in reference.description) and \
        (not probe["isa"] or set(reference.isa) == set(probe["isa"]))
    fp32 = ref_cluster.fp32_gflops_per_core
    int8 = ref_cluster.int8_gops_per_core
    if rates.get("fp32_gemm_gflops"):
        fp32 = float(rates["fp32_gemm_gflops"])
        int8 = fp32 * ref_cluster.int8_gops_per_core / ref_cluster.fp32_gflops_per_core
        basis = "rates from this machine's calibration"
    elif same_cpu:
        basis = "rates from the reference file (same CPU model)"
    else:
        basis = f"rates of the reference host ({ref_cluster.core}) until `edgenlp targets calibrate host` runs here"
    cores = max(1, int(probe["cores"]))
    cluster = dataclasses.replace(ref_cluster, core=probe["model"] or ref_cluster.core, cores=cores, fp32_gflops_per_core=fp32,
                                  int8_gops_per_core=int8, freq_ghz=probe.get("freq_ghz") or ref_cluster.freq_ghz)
    budgets = reference.budgets if reference.budgets.threads <= cores else dataclasses.replace(reference.budgets, threads=cores)
    model = probe["model"] or "unknown CPU"
    # the reference file's own measurements describe its machine: keep them, named so unless this is that CPU
    measured = {(k if same_cpu else f"reference_{k}"): v for k, v in reference.measured}
    measured.update({"probed_cores": float(cores), "fp32_gflops_per_core_used": round(fp32, 2)})
    return dataclasses.replace(
        reference,
        description=f"This machine: {model} ({probe['arch']}, {cores} cores); {basis}",
        arch=probe["arch"],
        isa=tuple(probe["isa"]) or reference.isa,
        memory_mb=float(probe["memory_mb"] or reference.memory_mb),
        clusters=(cluster,),
        budgets=budgets,
        measured=tuple(sorted(measured.items())),
    )


def host_rates() -> dict[str, float]:
    """Rates recorded by this machine's calibration (``notes`` of its cached cost table), or ``{}``."""
    import json

    try:
        from edgenlp.targets.costmodel import host_table_path

        path = host_table_path()
        if not path.is_file():
            return {}
        notes = json.loads(path.read_text()).get("notes", {})
    except (OSError, ValueError, ImportError):
        return {}
    gemm = notes.get("fp32_gemm_gflops")
    return {"fp32_gemm_gflops": float(gemm)} if isinstance(gemm, (int, float)) and gemm > 0 else {}


def measured_table_path(target: Target) -> Path:
    """Where a device-measured cost table for ``target`` lives: ``NAME.measured.json`` beside its file."""
    src = Path(target.source) if target.source else targets_dir() / f"{target.name}.toml"
    return src.with_name(f"{target.name}.measured.json")
