#!/usr/bin/env bash
# Build the native runtime against the ExecuTorch wheel.
#
#   bash runtime/build.sh                         # host (x86_64) -> runtime/build/x86_64
#   bash runtime/build.sh --arch aarch64          # cross -> runtime/build/aarch64 (downloads the aarch64 wheel once)
#   bash runtime/build.sh --sanitize              # ASan + UBSan -> runtime/build-asan/x86_64
#   bash runtime/build.sh --target edgenlp-run    # only these CMake targets (repeatable; default: all)
#   bash runtime/build.sh --build-dir DIR --fuzz  # libFuzzer targets (clang)
#   bash runtime/build.sh [--arch A] --package    # + the SDK archive (stripped):
#       runtime/dist/edgenlp-runtime-<version>-linux-<arch>.tar.gz; prints its path last
#
# Environment: PYTHON (default .venv/bin/python or python3), JOBS,
# EDGENLP_WITH_QUANTIZED_KERNELS (ON by default; OFF leaves the quantized kernels out).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(dirname "$here")"
arch="$(uname -m)"
sanitize=0
fuzz=0
package=0
build_dir=""
targets=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --arch) arch="$2"; shift 2 ;;
    --sanitize) sanitize=1; shift ;;
    --fuzz) fuzz=1; shift ;;
    --package) package=1; shift ;;
    --build-dir) build_dir="$2"; shift 2 ;;
    --target) targets+=(--target "$2"); shift 2 ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    *) echo "build.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
case "$arch" in
  x86_64|aarch64) ;;
  arm64) arch=aarch64 ;;
  *) echo "build.sh: --arch must be x86_64 or aarch64, got $arch" >&2; exit 2 ;;
esac

python="${PYTHON:-}"
if [[ -z "$python" ]]; then
  if [[ -x "$repo/.venv/bin/python" ]]; then python="$repo/.venv/bin/python"; else python=python3; fi
fi
et_version="$("$python" -c 'from importlib.metadata import version; print(version("executorch"))')"

cmake_args=()
if [[ "$arch" == "$(uname -m)" ]]; then
  et_root="$("$python" -c 'import executorch, os; print(list(executorch.__path__)[0])')"
else
  # Cross build: the same ExecuTorch release, aarch64 wheel, cached under runtime/.deps.
  deps="$here/.deps/executorch-$et_version-$arch"
  if [[ ! -d "$deps/executorch/lib" ]]; then
    mkdir -p "$here/.deps/wheels"
    "$python" -m pip download --quiet --no-deps --only-binary=:all: --platform "manylinux_2_28_$arch" \
      --python-version 3.11 "executorch==$et_version" -d "$here/.deps/wheels"
    wheel="$(ls "$here"/.deps/wheels/executorch-"$et_version"-*"$arch"*.whl | head -1)"
    rm -rf "$deps.tmp" && mkdir -p "$deps.tmp"
    "$python" - "$wheel" "$deps.tmp" <<'PY'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    for n in z.namelist():
        if n.startswith("executorch/") and (n.startswith(("executorch/include/", "executorch/lib/", "executorch/share/"))):
            z.extract(n, sys.argv[2])
PY
    rm -rf "$deps" && mv "$deps.tmp" "$deps"
  fi
  et_root="$deps/executorch"
  cmake_args+=(-DCMAKE_TOOLCHAIN_FILE="$here/cmake/aarch64-linux-gnu.cmake")
fi

if [[ -z "$build_dir" ]]; then
  build_dir="$here/build/$arch"
  [[ $sanitize -eq 1 ]] && build_dir="$here/build-asan/$arch"   # apart from the plain build, which may be shared
  [[ $fuzz -eq 1 ]] && build_dir="$here/build/fuzz"
fi
[[ $sanitize -eq 1 ]] && cmake_args+=(-DEDGENLP_SANITIZE=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo)
if [[ $fuzz -eq 1 ]]; then
  cmake_args+=(-DEDGENLP_FUZZ=ON -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++)
fi

# Explicit, so that build dirs configured before the default changed pick it up too.
cmake_args+=(-DEDGENLP_WITH_QUANTIZED_KERNELS="${EDGENLP_WITH_QUANTIZED_KERNELS:-ON}")

mkdir -p "$(dirname "$build_dir")"
cmake -S "$here" -B "$build_dir" -DEXECUTORCH_ROOT="$et_root" "${cmake_args[@]}" >"$build_dir.configure.log" 2>&1 \
  || { cat "$build_dir.configure.log" >&2; exit 1; }
cmake --build "$build_dir" -j "${JOBS:-$(nproc)}" ${targets[@]+"${targets[@]}"} -- --no-print-directory >"$build_dir.build.log" 2>&1 \
  || { tail -50 "$build_dir.build.log" >&2; exit 1; }
echo "$build_dir"

if [[ $package -eq 1 ]]; then
  [[ $sanitize -eq 0 && $fuzz -eq 0 && ${#targets[@]} -eq 0 ]] \
    || { echo "build.sh: --package makes a whole release build only (no --sanitize, --fuzz or --target)" >&2; exit 2; }
  # cpack stages a stripped install (cmake/install.cmake) and tars it; the archive
  # appears in runtime/dist/ only once complete.
  rm -rf "$build_dir/package"
  (cd "$build_dir" && cpack -G TGZ -B "$build_dir/package") >"$build_dir.package.log" 2>&1 \
    || { tail -50 "$build_dir.package.log" >&2; exit 1; }
  archive="$(ls "$build_dir"/package/edgenlp-runtime-*.tar.gz)"
  mkdir -p "$here/dist"
  mv -f "$archive" "$here/dist/"
  echo "$here/dist/$(basename "$archive")"
fi
