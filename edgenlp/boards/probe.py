"""What a board is: architecture, CPU model and cores, big/little clusters, governor, memory, free space.

One POSIX ``sh`` script (:data:`PROBE_SCRIPT`) runs on the device (busybox,
toybox and GNU userlands all have what it uses) and :func:`parse_probe` turns
its marked sections into a :class:`DeviceInfo`. Clusters come from cpufreq
(CPUs grouped by their maximum frequency), or from the ``CPU part`` lines of
``/proc/cpuinfo`` where cpufreq is absent; ``big`` is every core above the
slowest cluster, ``little`` the slowest cluster, and on a CPU with one
cluster both mean all cores.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

PROBE_SCRIPT = r"""
echo @@uname; uname -m; uname -r
echo @@cpuinfo; cat /proc/cpuinfo 2>/dev/null
echo @@cpus
for d in /sys/devices/system/cpu/cpu[0-9]*; do
  n=${d##*/cpu}
  f=$(cat "$d/cpufreq/cpuinfo_max_freq" 2>/dev/null)
  g=$(cat "$d/cpufreq/scaling_governor" 2>/dev/null)
  echo "$n ${f:--} ${g:--}"
done
echo @@meminfo; cat /proc/meminfo 2>/dev/null
echo @@df; df -P -k "$EDGENLP_TMP" 2>/dev/null | tail -n 1
echo @@tools
command -v taskset >/dev/null 2>&1 && echo taskset
[ -e /system/bin/linker64 ] && echo android
echo @@libc; getconf GNU_LIBC_VERSION 2>/dev/null
echo @@android; getprop ro.build.version.release 2>/dev/null; getprop ro.product.model 2>/dev/null
echo @@end
"""

# ARM Ltd. (implementer 0x41) part numbers -> core names, for the CPU model line and clusters.
ARM_PARTS = {
    0xD03: "Cortex-A53", 0xD04: "Cortex-A35", 0xD05: "Cortex-A55", 0xD07: "Cortex-A57", 0xD08: "Cortex-A72",
    0xD09: "Cortex-A73", 0xD0A: "Cortex-A75", 0xD0B: "Cortex-A76", 0xD0C: "Neoverse-N1", 0xD0D: "Cortex-A77",
    0xD40: "Neoverse-V1", 0xD41: "Cortex-A78", 0xD42: "Cortex-A78AE", 0xD44: "Cortex-X1", 0xD46: "Cortex-A510",
    0xD47: "Cortex-A710", 0xD48: "Cortex-X2", 0xD49: "Neoverse-N2", 0xD4B: "Cortex-A78C", 0xD4D: "Cortex-A715",
    0xD4E: "Cortex-X3", 0xD4F: "Neoverse-V2", 0xD80: "Cortex-A520", 0xD81: "Cortex-A720", 0xD82: "Cortex-X4",
}  # fmt: skip

CORES = ("all", "big", "little")


@dataclass(frozen=True)
class Cluster:
    """CPUs that share a maximum frequency (or a core type); ``max_mhz`` None where cpufreq is absent."""

    cpus: tuple[int, ...]
    max_mhz: int | None = None
    core: str | None = None


@dataclass(frozen=True)
class DeviceInfo:
    arch: str
    cpu_model: str
    cores: int
    clusters: tuple[Cluster, ...]
    governors: tuple[str, ...] = ()
    kernel: str | None = None
    os: str = "linux"  # or "android"
    libc: str | None = None
    mem_total_mb: int | None = None
    mem_available_mb: int | None = None
    tmp_free_mb: int | None = None
    has_taskset: bool = False
    isa: tuple[str, ...] = ()
    emulated: str | None = None  # what emulates the CPU (qemu-user), None on a real device
    extra: dict = field(default_factory=dict)

    def cpus_for(self, cores: str) -> tuple[int, ...]:
        """CPU numbers of ``cores`` ("all", "big", "little"), slowest cluster first."""
        if cores not in CORES:
            raise ValueError(f"cores must be one of {', '.join(CORES)}, got {cores!r}")
        ordered = sorted(self.clusters, key=lambda c: (c.max_mhz or 0, c.cpus))
        if cores == "all" or len(ordered) < 2:
            return tuple(sorted(c for cl in ordered for c in cl.cpus))
        if cores == "little":
            return ordered[0].cpus
        return tuple(sorted(c for cl in ordered[1:] for c in cl.cpus))

    def to_dict(self) -> dict:
        d = asdict(self)
        d["clusters"] = [asdict(c) for c in self.clusters]
        return d


def _sections(text: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    current = None
    for line in text.splitlines():
        if line.startswith("@@"):
            current = line[2:].strip()
            out[current] = []
        elif current is not None:
            out[current].append(line)
    return out


def _kb_to_mb(v: str | None) -> int | None:
    try:
        return int(v) // 1024 if v is not None else None
    except ValueError:
        return None


def parse_probe(text: str) -> DeviceInfo:
    """Turn :data:`PROBE_SCRIPT`'s output into a :class:`DeviceInfo`. Raises ValueError if it is not probe output."""
    s = _sections(text)
    if "uname" not in s or "end" not in s or not s["uname"]:
        raise ValueError("not the output of the probe script (missing sections)")
    arch = s["uname"][0].strip()
    arch = {"arm64": "aarch64", "amd64": "x86_64"}.get(arch, arch)
    kernel = s["uname"][1].strip() if len(s["uname"]) > 1 else None

    # /proc/cpuinfo: one block per processor; x86 has "model name", ARM has "CPU part" (+ "Hardware"/"Model")
    procs: dict[int, dict[str, str]] = {}
    board: dict[str, str] = {}
    cur: int | None = None
    for line in s.get("cpuinfo", []):
        if ":" not in line:
            continue
        k, v = (x.strip() for x in line.split(":", 1))
        if k == "processor" and v.isdigit():
            cur = int(v)
            procs[cur] = {}
        elif cur is not None and k not in ("Hardware", "Model", "Revision", "Serial"):
            procs[cur][k] = v
        else:
            board[k] = v
    part_of: dict[int, str] = {}
    for n, p in procs.items():
        try:
            impl, part = int(p.get("CPU implementer", "0"), 16), int(p.get("CPU part", "0"), 16)
        except ValueError:
            continue
        if "CPU part" in p:
            part_of[n] = ARM_PARTS.get(part, f"part {impl:#x}:{part:#05x}") if impl == 0x41 else f"part {impl:#x}:{part:#05x}"
    isa: tuple[str, ...] = ()
    first = next(iter(procs.values()), {})
    flags = set((first.get("flags") or first.get("Features") or "").split())
    wanted = ("avx2", "fma", "avx512f", "avx512_vnni", "avx_vnni", "asimd", "asimddp", "i8mm", "bf16", "sve", "sve2", "sha2")
    isa = tuple(f for f in wanted if f in flags)

    # cpufreq lines: "N max_khz governor"
    freq: dict[int, int | None] = {}
    governors: list[str] = []
    for line in s.get("cpus", []):
        parts = line.split()
        if len(parts) != 3 or not parts[0].isdigit():
            continue
        freq[int(parts[0])] = int(parts[1]) // 1000 if parts[1].isdigit() else None
        if parts[2] != "-" and parts[2] not in governors:
            governors.append(parts[2])
    cpus = sorted(set(freq) | set(procs)) or [0]
    if any(freq.get(c) for c in cpus):
        keys = {c: (freq.get(c), part_of.get(c)) for c in cpus}
    else:
        keys = {c: (None, part_of.get(c)) for c in cpus}
    groups: dict[tuple, list[int]] = {}
    for c in cpus:
        groups.setdefault(keys[c], []).append(c)
    clusters = tuple(Cluster(tuple(v), k[0], k[1]) for k, v in sorted(groups.items(), key=lambda kv: (kv[0][0] or 0, kv[1])))

    if first.get("model name"):
        cpu_model = first["model name"]
    elif part_of:
        counts: dict[str, int] = {}
        for c in sorted(part_of):
            counts[part_of[c]] = counts.get(part_of[c], 0) + 1
        cpu_model = " + ".join(f"{n}x {name}" for name, n in counts.items())
    else:
        cpu_model = arch
    if board.get("Model") or board.get("Hardware"):
        cpu_model = f"{cpu_model} ({board.get('Model') or board.get('Hardware')})"

    mem = {}
    for line in s.get("meminfo", []):
        if ":" in line:
            k, v = line.split(":", 1)
            mem[k.strip()] = v.split()[0] if v.split() else None
    df = (s.get("df") or [""])[0].split()
    tmp_free = int(df[3]) // 1024 if len(df) >= 4 and df[3].isdigit() else None
    tools = {t.strip() for t in s.get("tools", [])}
    libc = (s.get("libc") or [None])[0] or None
    android = [x for x in s.get("android", []) if x.strip()]
    os_name = "android" if "android" in tools else "linux"
    extra = {}
    if os_name == "android" and android:
        extra["android_release"] = android[0]
        if len(android) > 1:
            extra["product_model"] = android[1]
    return DeviceInfo(
        arch=arch, cpu_model=cpu_model, cores=len(cpus), clusters=clusters, governors=tuple(governors), kernel=kernel,
        os=os_name, libc=libc, mem_total_mb=_kb_to_mb(mem.get("MemTotal")),
        mem_available_mb=_kb_to_mb(mem.get("MemAvailable", mem.get("MemFree"))), tmp_free_mb=tmp_free,
        has_taskset="taskset" in tools, isa=isa, extra=extra,
    )  # fmt: skip
