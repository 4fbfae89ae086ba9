#!/bin/sh
# Build the fake NVML library: sh tests/fakenvml/build.sh [OUTDIR]   (default build/fakenvml)
# Writes OUTDIR/libnvidia-ml.so.1 (SONAME libnvidia-ml.so.1) and the libnvidia-ml.so link.
# Skips the compile when the library is newer than every source; replaces it atomically so a
# process that has the old one loaded is never handed a half-written file.
set -eu
out=${1:-build/fakenvml}
src=$(cd "$(dirname "$0")" && pwd)
lib="$out/libnvidia-ml.so.1"
mkdir -p "$out"

if [ -f "$lib" ] && [ -z "$(find "$src" -maxdepth 1 \( -name '*.c' -o -name '*.h' -o -name build.sh \) -newer "$lib")" ]; then
    ln -sfn libnvidia-ml.so.1 "$out/libnvidia-ml.so"
    exit 0
fi

command -v gcc >/dev/null 2>&1 || { echo "fakenvml: gcc not found (needed to build the fake NVML library)" >&2; exit 1; }
tmp="$lib.tmp.$$"
trap 'rm -f "$tmp"' EXIT
gcc -std=gnu11 -O2 -fPIC -shared -fvisibility=hidden -Wall -Wextra -Wno-unused-parameter \
    -Wl,-soname,libnvidia-ml.so.1 -Wl,--no-undefined \
    -o "$tmp" "$src/fakenvml.c" "$src/timeline.c" "$src/calllog.c" "$src/stubs.c" -lm -lpthread -ldl
mv -f "$tmp" "$lib"
ln -sfn libnvidia-ml.so.1 "$out/libnvidia-ml.so"
echo "fakenvml: built $lib"
