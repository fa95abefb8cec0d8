"""Which files a board needs: the prebuilt runner for its architecture, its shared libraries, the bundle.

The runner is ``runtime/build/<arch>/edgenlp-run`` (``bash runtime/build.sh
[--arch aarch64]``). Its libraries are found the way the dynamic loader would
find them: the ``DT_NEEDED`` entries of each ELF file, looked up in its
``DT_RUNPATH`` (``$ORIGIN`` expanded), recursively; what is not found there
(libc, libstdc++, libm, ...) is the device's own. Everything goes into one
directory on the device, where ``$ORIGIN`` in the runner's RUNPATH finds it.

Android has no glibc: there the cross toolchain's loader and C/C++ runtime
are shipped too and the runner is started through that loader
(``ld-linux-aarch64.so.1 --library-path DIR DIR/edgenlp-run``).
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass
from pathlib import Path

from edgenlp.errors import EdgeNLPError

REPO = Path(__file__).resolve().parents[2]
ARCHES = ("x86_64", "aarch64")
RUNNER = "edgenlp-run"
# glibc runtime the Android loader path needs (from the cross toolchain's sysroot)
SYSROOTS = {"aarch64": Path("/usr/aarch64-linux-gnu/lib"), "x86_64": Path("/lib/x86_64-linux-gnu")}
LOADERS = {"aarch64": "ld-linux-aarch64.so.1", "x86_64": "ld-linux-x86-64.so.2"}
GLIBC_LIBS = ("libc.so.6", "libm.so.6", "libdl.so.2", "libpthread.so.0", "libstdc++.so.6", "libgcc_s.so.1")
ELF_MACHINE = {62: "x86_64", 183: "aarch64"}

DT_NEEDED, DT_STRTAB, DT_RUNPATH, DT_RPATH = 1, 5, 29, 15


@dataclass(frozen=True)
class ElfDeps:
    machine: str | None
    needed: tuple[str, ...]
    runpath: tuple[str, ...]


def read_elf_deps(path: Path) -> ElfDeps:
    """``DT_NEEDED`` and ``DT_RUNPATH``/``DT_RPATH`` of a 64-bit little-endian ELF file."""
    data = Path(path).read_bytes()
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise ValueError(f"{path}: not a 64-bit little-endian ELF file")
    machine = ELF_MACHINE.get(struct.unpack_from("<H", data, 18)[0])
    phoff, phentsize, phnum = struct.unpack_from("<Q", data, 32)[0], *struct.unpack_from("<HH", data, 54)
    segments = []  # (vaddr, offset, filesz)
    dynamic = None
    for i in range(phnum):
        p_type, _, p_offset, p_vaddr, _, p_filesz = struct.unpack_from("<IIQQQQ", data, phoff + i * phentsize)
        if p_type == 1:  # PT_LOAD
            segments.append((p_vaddr, p_offset, p_filesz))
        elif p_type == 2:  # PT_DYNAMIC
            dynamic = (p_offset, p_filesz)
    if dynamic is None:
        return ElfDeps(machine, (), ())
    entries = []
    strtab_vaddr = None
    for off in range(dynamic[0], dynamic[0] + dynamic[1], 16):
        tag, val = struct.unpack_from("<qQ", data, off)
        if tag == 0:
            break
        if tag == DT_STRTAB:
            strtab_vaddr = val
        entries.append((tag, val))
    strtab = next((o + strtab_vaddr - v for v, o, n in segments if v <= (strtab_vaddr or -1) < v + n), None)
    if strtab is None:
        raise ValueError(f"{path}: dynamic string table not found")

    def string(i: int) -> str:
        end = data.index(b"\0", strtab + i)
        return data[strtab + i : end].decode()

    needed = tuple(string(v) for t, v in entries if t == DT_NEEDED)
    runpath = tuple(p for t, v in entries if t in (DT_RUNPATH, DT_RPATH) for p in string(v).split(":") if p)
    return ElfDeps(machine, needed, runpath)


def build_dir(arch: str) -> Path:
    return REPO / "runtime" / "build" / arch


def runner_files(arch: str, *, device: str = "board", android: bool = False) -> dict[str, Path]:
    """``{name on the device: local file}`` for the runner of ``arch`` and every library it loads from the build.

    Raises :class:`~edgenlp.boards.errors.WrongArchitecture` for an architecture
    without a runner, :class:`EdgeNLPError` when it is not built yet.
    """
    from edgenlp.boards.errors import WrongArchitecture

    if arch not in ARCHES:
        raise WrongArchitecture(device, "deploy", f"the device reports {arch!r}; edgenlp-run is built for "
                                f"{' and '.join(ARCHES)} only (a 32-bit OS on a 64-bit board needs a 64-bit OS)")  # fmt: skip
    runner = build_dir(arch) / RUNNER
    if not runner.is_file():
        flag = "" if arch == "x86_64" else f" --arch {arch}"
        raise EdgeNLPError(f"{device}: deploy: no {arch} runner at {runner}; build it with `bash runtime/build.sh{flag}`")
    files = {RUNNER: runner}
    todo = [runner]
    while todo:
        elf = todo.pop()
        deps = read_elf_deps(elf)
        if deps.machine != arch:
            raise WrongArchitecture(device, "deploy", f"{elf} is built for {deps.machine}, the device is {arch}")
        dirs = [Path(p.replace("$ORIGIN", str(elf.parent)).replace("${ORIGIN}", str(elf.parent))) for p in deps.runpath]
        for name in deps.needed:
            if name in files:
                continue
            found = next((d / name for d in dirs if (d / name).is_file() and not _is_system(d)), None)
            if found is not None:
                files[name] = found.resolve()
                todo.append(found.resolve())
    if android:
        sysroot = SYSROOTS[arch]
        for name in (LOADERS[arch], *GLIBC_LIBS):
            if not (sysroot / name).exists():
                raise EdgeNLPError(f"{device}: deploy: {sysroot / name} is missing; Android needs the glibc runtime of the "
                                   "cross toolchain (bash runtime/setup_deps.sh)")  # fmt: skip
            files.setdefault(name, (sysroot / name).resolve())
    return files


def _is_system(d: Path) -> bool:
    s = str(d)
    return s.startswith(("/lib", "/usr/lib", "/usr/local/lib", "/usr/aarch64-linux-gnu", "/usr/x86_64-linux-gnu"))


def bundle_files(bundle: Path) -> dict[str, Path | None]:
    """The files of a bundle to push; None for the ONNX model, which goes as an empty stand-in.

    The native runtime never reads ``model.onnx`` (a listed file it does not
    read only has to exist, see runtime/src/bundle.cpp), so a phone is spared
    pushing a second copy of the weights.
    """
    bundle = Path(bundle)
    return {p.name: (None if p.name.endswith((".onnx", ".onnx.data")) else p) for p in sorted(bundle.iterdir()) if p.is_file()}


def fingerprint(files: dict[str, Path | None]) -> str:
    """A short digest of names, sizes and modification times: whether a pushed copy is still current."""
    h = hashlib.sha256()
    for name, p in sorted(files.items()):
        st = (p.stat().st_size, p.stat().st_mtime_ns) if p is not None else ("stand-in",)
        h.update(f"{name}\0{st}\0".encode())
    return h.hexdigest()[:16]


def runtime_versions(files: dict[str, Path], arch: str) -> dict:
    """Versions of what is pushed: edgenlp, libedgenlp's soname version, the ExecuTorch release, runner sha256."""
    from importlib import metadata

    from edgenlp import __version__

    out: dict = {"edgenlp": __version__, "runner_arch": arch}
    lib = files.get("libedgenlp.so.0")
    if lib is not None and lib.name.startswith("libedgenlp.so."):
        out["libedgenlp"] = lib.name.removeprefix("libedgenlp.so.")
    et = files.get("libexecutorch.so")
    if et is not None:
        # cross builds use runtime/.deps/executorch-<version>-<arch>; host builds the installed wheel
        tag = next((p.name for p in et.parents if p.name.startswith("executorch-")), None)
        if tag:
            out["executorch"] = tag.split("-")[1]
        else:
            try:
                out["executorch"] = metadata.version("executorch")
            except metadata.PackageNotFoundError:
                pass
    h = hashlib.sha256(files[RUNNER].read_bytes()).hexdigest()
    out["runner_sha256"] = h[:16]
    out["files"] = sorted(files)
    return out
