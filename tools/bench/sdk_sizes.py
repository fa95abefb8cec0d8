"""Sizes of the SDK archives (bash runtime/build.sh --package) and of the Python wheel, per architecture.

For each architecture the script builds the archive (stripped; see
runtime/cmake/install.cmake), then records the archive's size, its unpacked
size, and every library's size. A wheel found in dist/ (tools/build_wheel.sh)
is listed too, with the share of its native libraries.

    .venv/bin/python tools/bench/sdk_sizes.py [--arch x86_64 --arch aarch64] [--no-build] [--out tools/bench/results]

Writes sdk-sizes.json and sdk-sizes.md to --out.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import subprocess
import sys
import tarfile
import zipfile
from datetime import datetime, timezone
from pathlib import Path

log = logging.getLogger("bench.sdk_sizes")
REPO = Path(__file__).resolve().parents[2]
DIST = REPO / "runtime" / "dist"


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def mib(n: int) -> float:
    return round(n / 2**20, 2)


def package(arch: str, *, build: bool) -> Path:
    if build:
        env = dict(os.environ, PYTHON=os.environ.get("PYTHON", sys.executable))
        out = subprocess.run(["bash", str(REPO / "runtime/build.sh"), "--arch", arch, "--package"], env=env,
                             capture_output=True, text=True, check=True).stdout
        return Path(out.strip().splitlines()[-1])
    found = sorted(DIST.glob(f"edgenlp-runtime-*-linux-{arch}.tar.gz"))
    if not found:
        raise SystemExit(f"error: no archive for {arch} in {DIST}; run without --no-build")
    return found[-1]


def archive_row(arch: str, path: Path) -> dict:
    files = {}
    with tarfile.open(path) as tar:
        for m in tar.getmembers():
            if m.isfile():
                files[m.name.split("/", 1)[1]] = m.size
    libs = {k: v for k, v in files.items() if k.startswith("lib/") and ".so" in k}
    return {"arch": arch, "archive": path.name, "archive_bytes": path.stat().st_size,
            "unpacked_bytes": sum(files.values()), "libraries": libs}


def wheel_rows() -> list[dict]:
    rows = []
    for whl in sorted((REPO / "dist").glob("edgenlp-*.whl")):
        with zipfile.ZipFile(whl) as z:
            native = sum(i.file_size for i in z.infolist() if ".so" in i.filename or i.filename.endswith("edgenlp-run"))
            total = sum(i.file_size for i in z.infolist())
        rows.append({"wheel": whl.name, "wheel_bytes": whl.stat().st_size, "unpacked_bytes": total,
                     "native_unpacked_bytes": native})
    return rows


def markdown(result: dict) -> str:
    lines = [f"# SDK sizes (edgenlp {result['version']}, ExecuTorch {result['executorch']})", "",
             f"Stripped archives from `bash runtime/build.sh --arch ARCH --package`, measured {result['date']} "
             f"on {result['host']}.", "",
             "| archive | .tar.gz | unpacked | libedgenlp + JNI | ExecuTorch libraries |", "|---|---|---|---|---|"]
    for r in result["archives"]:
        libs = r["libraries"]
        own = sum(v for k, v in libs.items() if "libedgenlp" in k)
        et = sum(v for k, v in libs.items() if "libexecutorch" in k)
        lines.append(f"| `{r['archive']}` | {mib(r['archive_bytes'])} MiB | {mib(r['unpacked_bytes'])} MiB | "
                     f"{mib(own)} MiB | {mib(et)} MiB |")
    lines += ["", "Largest libraries (unpacked):", ""]
    for r in result["archives"]:
        top = sorted(r["libraries"].items(), key=lambda kv: -kv[1])[:4]
        lines.append(f"- {r['arch']}: " + ", ".join(f"`{Path(k).name}` {mib(v)} MiB" for k, v in top))
    if result["wheels"]:
        lines += ["", "| wheel | .whl | unpacked | native part (unpacked) |", "|---|---|---|---|"]
        for w in result["wheels"]:
            lines.append(f"| `{w['wheel']}` | {mib(w['wheel_bytes'])} MiB | {mib(w['unpacked_bytes'])} MiB | "
                         f"{mib(w['native_unpacked_bytes'])} MiB |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--arch", action="append", choices=["x86_64", "aarch64"])
    ap.add_argument("--no-build", action="store_true", help="measure the archives already in runtime/dist/")
    ap.add_argument("--out", type=Path, default=REPO / "tools/bench/results")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    from importlib.metadata import version

    sys.path.insert(0, str(REPO))
    import edgenlp

    archives = []
    for arch in args.arch or ["x86_64", "aarch64"]:
        path = package(arch, build=not args.no_build)
        log.info("%s: %s", arch, path)
        archives.append(archive_row(arch, path))
    result = {"version": edgenlp.__version__, "executorch": version("executorch"),
              "date": datetime.now(timezone.utc).strftime("%Y-%m-%d"),
              "host": cpu_model(),
              "archives": archives, "wheels": wheel_rows()}
    args.out.mkdir(parents=True, exist_ok=True)
    for name, text in (("sdk-sizes.json", json.dumps(result, indent=2) + "\n"), ("sdk-sizes.md", markdown(result))):
        tmp = args.out / (name + ".tmp")
        tmp.write_text(text)
        tmp.replace(args.out / name)
    log.info("%s", markdown(result))


if __name__ == "__main__":
    main()
