#!/usr/bin/env bash
# Fetch Debian's aarch64 Java runtime (openjdk-17-jre-headless:arm64 + zlib1g:arm64) into
# runtime/.deps/jre-aarch64/ without touching the system's dpkg (own apt lists and cache,
# packages unpacked with dpkg-deb -x), to run the Java binding under qemu-aarch64:
#
#   bash runtime/java/fetch_jre.sh      # prints the unpacked root; then
#   qemu-aarch64 -L /usr/aarch64-linux-gnu -E LD_LIBRARY_PATH=ROOT/lib/aarch64-linux-gnu \
#       ROOT/usr/lib/jvm/java-17-openjdk-arm64/bin/java -version
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dest="$here/.deps/jre-aarch64"
if [[ ! -x "$dest/root/usr/lib/jvm/java-17-openjdk-arm64/bin/java" ]]; then
  command -v apt-get >/dev/null || { echo "fetch_jre.sh: apt-get missing" >&2; exit 1; }
  tmp="$dest.tmp"
  rm -rf "$tmp" && mkdir -p "$tmp/lists/partial" "$tmp/cache/archives/partial" "$tmp/debs" "$tmp/root"
  touch "$tmp/status"
  opts=(-o APT::Architecture=arm64 -o APT::Architectures=arm64 -o "Dir::State::Lists=$tmp/lists"
        -o "Dir::Cache=$tmp/cache" -o "Dir::State::status=$tmp/status" -o APT::Sandbox::User=root)
  apt-get "${opts[@]}" -qq update
  (cd "$tmp/debs" && apt-get "${opts[@]}" -qq download openjdk-17-jre-headless zlib1g)
  for deb in "$tmp"/debs/*.deb; do dpkg-deb -x "$deb" "$tmp/root"; done
  rm -rf "$tmp/lists" "$tmp/cache" "$tmp/debs"
  rm -rf "$dest" && mv "$tmp" "$dest"
fi
echo "$dest/root"
