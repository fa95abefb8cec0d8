#!/usr/bin/env bash
# Install the Debian packages the native runtime needs to build and test:
# host toolchain, aarch64 cross toolchain, qemu-user for running aarch64 tests,
# clang for libFuzzer, the OpenSSH server and client (the board tests start a throw-away sshd on
# localhost), a JDK for the Java binding (runtime/java) and SIMDe (the AVX-512 kernels' tester runs
# under its emulation on hosts without AVX-512). Idempotent and quiet: apt is skipped when all are present.
#
#   bash runtime/setup_deps.sh            # host + cross + fuzz toolchains
#   bash runtime/setup_deps.sh --host     # host build only (cmake, g++)
set -euo pipefail

host_pkgs=(cmake g++ make)
extra_pkgs=(g++-aarch64-linux-gnu qemu-user clang libclang-rt-14-dev openssh-client openssh-server default-jdk-headless libsimde-dev)

pkgs=("${host_pkgs[@]}")
if [[ "${1:-}" != "--host" ]]; then
  pkgs+=("${extra_pkgs[@]}")
fi

missing=()
for p in "${pkgs[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [[ ${#missing[@]} -eq 0 ]]; then
  exit 0
fi

SUDO=""
if [[ $(id -u) -ne 0 ]]; then
  SUDO="sudo"
fi
echo "runtime/setup_deps.sh: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq >/dev/null
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
