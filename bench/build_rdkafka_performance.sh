#!/usr/bin/env bash
# Builds librdkafka's own load generator, examples/rdkafka_performance.c, against Debian's
# librdkafka (the library kcat uses here), for bench/bench_hot_paths.py.
#
# Debian ships the example's source in librdkafka-dev but not the internal headers it includes
# (rd.h, rdtime.h, config.h), so the script takes librdkafka's Debian source package, runs its
# configure for config.h, and compiles the one example against the installed library.
#
#   bench/build_rdkafka_performance.sh [OUT]     # OUT defaults to ~/.cache/odradek/rdkafka_performance
set -euo pipefail
out="${1:-$HOME/.cache/odradek/rdkafka_performance}"
if [ -x "$out" ]; then echo "$out"; exit 0; fi
mkdir -p "$(dirname "$out")"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

export DEBIAN_FRONTEND=noninteractive
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
if ! ls /etc/apt/sources.list.d/*.sources >/dev/null 2>&1 || \
   ! grep -qs "deb-src" /etc/apt/sources.list.d/*.sources /etc/apt/sources.list; then
  # Debian's source index beside its binary one, for `apt-get source`.
  sed 's/^Types: deb$/Types: deb-src/' /etc/apt/sources.list.d/debian.sources \
    | $SUDO tee /etc/apt/sources.list.d/odradek-bench-src.sources >/dev/null
fi
$SUDO apt-get update -qq >&2
$SUDO apt-get install -y -qq --no-install-recommends gcc make librdkafka1 >&2
(cd "$work" && apt-get source --download-only librdkafka >&2 2>/dev/null)
tar -xzf "$work"/librdkafka_*.orig.tar.gz -C "$work"
src="$(ls -d "$work"/librdkafka-*/)"
(cd "$src" && ./configure --disable-ssl --disable-gssapi --disable-zstd --disable-lz4-ext \
   --disable-curl --disable-sasl >&2)
lib="$(ls /usr/lib/*/librdkafka.so.1 | head -1)"
gcc -O2 -I"$src/src" "$src/examples/rdkafka_performance.c" -o "$out" "$lib" -lpthread -lm
echo "$out"
