#!/usr/bin/env bash
# Set up edgenlp on this machine, then run the main job or the test suite.
#
#   bash tools/setup.sh run [compress options]  # set up, then the main job: compress MiniLM + SST-2 for pixel-7
#   bash tools/setup.sh test [pytest args]   # set up, then run the test suite (what CI runs)
#   bash tools/setup.sh                      # set up only
#
# Set-up is idempotent and fast when nothing changed: a project-local virtualenv
# at .venv/ with pinned dependencies (torch==2.13.0 CPU wheel from local disk;
# never a range that would pull a multi-GB CUDA build), the edgenlp package in
# editable mode, the Debian packages the native runtime needs, and the native
# runtime built for the host. Nothing is downloaded at run time (HF_HUB_OFFLINE=1).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
action="${1:-setup}"
[[ $# -gt 0 ]] && shift

log() { printf '[setup] %s\n' "$*" >&2; }

# --- Python environment ---------------------------------------------------
python="${PYTHON:-}"
if [[ -z "$python" ]]; then
  for cand in python3.11 python3; do
    if command -v "$cand" >/dev/null && "$cand" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' 2>/dev/null; then
      python="$cand"; break
    fi
  done
fi
[[ -n "$python" ]] || { echo "error: Python 3.11 is required (torch 2.13.0 CPU wheel is for cp311)" >&2; exit 2; }

if [[ ! -x .venv/bin/python ]]; then
  log "creating .venv with $($python --version)"
  "$python" -m venv .venv
fi
stamp=".venv/.edgenlp-deps-$(cat pyproject.toml | sha256sum | cut -c1-16)"
if [[ ! -f "$stamp" ]]; then
  log "installing pinned dependencies (first run takes a few minutes)"
  .venv/bin/python -m pip install -q --disable-pip-version-check -e '.[test]' 2>&1 | grep -v '^WARNING: Location' || true
  .venv/bin/python -c 'import torch, executorch, onnxruntime, transformers, edgenlp' \
    || { echo "error: dependency install failed (see pip output above)" >&2; exit 1; }
  rm -f .venv/.edgenlp-deps-*
  touch "$stamp"
fi

export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false

# --- native runtime ---------------------------------------------------------
if [[ -f runtime/build.sh && "${EDGENLP_SKIP_NATIVE:-0}" != 1 ]]; then
  deps_flag="--host"
  [[ "$action" == "test" ]] && deps_flag=""   # tests also cross-build for aarch64 and run it under qemu
  bash runtime/setup_deps.sh $deps_flag
  log "building the native runtime (runtime/build/$(uname -m))"
  PYTHON="$repo/.venv/bin/python" bash runtime/build.sh >/dev/null \
    || { echo "error: native runtime build failed: see runtime/build/$(uname -m).build.log" >&2; exit 1; }
fi

# --- action -------------------------------------------------------------------
case "$action" in
  setup) log "ready: source .venv/bin/activate" ;;
  run) exec .venv/bin/edgenlp compress --out out/compress "$@" ;;
  # One test process per core plus one (at most 4; pytest-xdist): a test often waits on a subprocess (qemu, a
  # native run, a build) or on an artifact another process is building, and the extra process uses that core.
  # The native-runtime tests run together in one of them.
  test) workers="${EDGENLP_TEST_WORKERS:-$(( $(nproc) + 1 ))}"
        exec .venv/bin/python -m pytest -m "not slow" -q -p no:cacheprovider --durations=25 \
          -n "$workers" --maxprocesses 4 --dist loadgroup "$@" ;;
  *) echo "error: unknown action '$action' (use run, test or nothing)" >&2; exit 2 ;;
esac
