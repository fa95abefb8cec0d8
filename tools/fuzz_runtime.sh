#!/usr/bin/env bash
# Fuzz the native runtime's tokenizer and bundle loader with libFuzzer (clang, ASan + UBSan).
#
#   bash tools/fuzz_runtime.sh [SECONDS_PER_TARGET]     # default 60
#
# Seeds: runtime/tests/fuzz_corpus/<target>/. A crash leaves crash-* files in
# runtime/build/fuzz/artifacts/<target>/ and exits non-zero; copy the input
# into runtime/tests/fuzz_regressions/<target>/ so the regression test replays it.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
seconds="${1:-60}"
if ! command -v clang++ >/dev/null; then
  echo "fuzz_runtime.sh: clang++ missing: run bash runtime/setup_deps.sh" >&2
  exit 2
fi
build="$(bash "$repo/runtime/build.sh" --fuzz)"
status=0
for target in tokenizer bundle; do
  corpus="$build/corpus/$target"
  artifacts="$build/artifacts/$target"
  mkdir -p "$corpus" "$artifacts"
  cp -n "$repo/runtime/tests/fuzz_corpus/$target/"* "$corpus/" 2>/dev/null || true
  echo "fuzzing $target for ${seconds}s" >&2
  if ! "$build/fuzz_$target" -max_total_time="$seconds" -max_len=4096 -timeout=10 \
      -artifact_prefix="$artifacts/" "$corpus" 2>"$build/fuzz_$target.log"; then
    echo "fuzz_runtime.sh: $target crashed, see $build/fuzz_$target.log and $artifacts" >&2
    status=1
  fi
  grep -E "^(#[0-9]+ *DONE|Done)" "$build/fuzz_$target.log" | tail -1 >&2 || true
done
exit $status
