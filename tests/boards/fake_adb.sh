#!/usr/bin/env bash
# A stand-in for `adb` in the tests: logs its arguments, fails as FAKE_ADB_MODE says, and otherwise
# serves a "device" whose /data/local/tmp is the folder FAKE_ADB_ROOT on this machine.
set -u
printf '%s\n' "$*" >> "$FAKE_ADB_LOG"
if [[ "${1:-}" == "-s" ]]; then shift 2; fi
cmd="${1:-}"; shift || true
case "${FAKE_ADB_MODE:-ok}" in
  none) echo "adb: no devices/emulators found" >&2; exit 1 ;;
  offline) echo "adb: device offline" >&2; exit 1 ;;
  unauthorized) printf 'adb: device unauthorized.\nThis adb server'"'"'s $ADB_VENDOR_KEYS is not set\n' >&2; exit 1 ;;
  nospace) if [[ "$cmd" == push ]]; then echo "adb: error: failed to copy to '/data/local/tmp': remote No space left on device" >&2; exit 1; fi ;;
esac
to_host() { printf '%s' "$1" | sed "s#/data/local/tmp#${FAKE_ADB_ROOT}#g"; }
case "$cmd" in
  shell)
    # like adb without the shell protocol: exit status 0, output with device paths
    sh -c "$(to_host "$*")" 2> >(sed "s#${FAKE_ADB_ROOT}#/data/local/tmp#g" >&2) | sed "s#${FAKE_ADB_ROOT}#/data/local/tmp#g"
    exit 0 ;;
  push)
    args=(); for a in "$@"; do args+=("$(to_host "$a")"); done
    dest="${args[-1]}"; unset 'args[-1]'
    cp "${args[@]}" "$dest" ;;
  pull) cp "$(to_host "$1")" "$2" ;;
  *) echo "fake adb: unsupported command $cmd" >&2; exit 1 ;;
esac
