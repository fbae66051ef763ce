#!/usr/bin/env bash
# Checks attnrt as a package a serving binary consumes. Builds the library alone (Release, no
# tests, benchmarks or examples) and installs it into a temporary prefix, or installs an existing
# build with --from-build DIR; then configures, builds and runs examples/consumer (a C++ and a C
# program: one decode on the CPU executor each, output checked) against the prefix through
# find_package(attnrt), builds and runs the C program again through pkg-config (attnrt.pc), and
# builds and runs the consumer once more with attnrt as a sub-project (add_subdirectory, CPU only).
# Usage: scripts/consumer-check.sh [--from-build DIR] [--help] [-- cmake configure args for the
# library build, e.g. -DBUILD_SHARED_LIBS=ON or -DATTNRT_WITH_CUDA=OFF]
# Env: WORK_DIR (default build-consumer), JOBS (default nproc). Exit 0 when every program passed.
set -euo pipefail
case "${1:-}" in -h|--help) sed -n '2,/^set -/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;; esac
cd "$(dirname "$0")/.."
root=$PWD
from_build=""
if [ "${1:-}" = "--from-build" ]; then
  [ $# -ge 2 ] || { echo "consumer-check: --from-build needs a build directory" >&2; exit 2; }
  from_build=$2
  shift 2
fi
[ "${1:-}" = "--" ] && shift
work=${WORK_DIR:-build-consumer}
jobs=${JOBS:-$(nproc)}
log() { echo "consumer-check: $*"; }
start=$SECONDS
rm -rf "$work/prefix" "$work/consumer" "$work/consumer-pc" "$work/subproject"
mkdir -p "$work"
prefix=$root/$work/prefix

if [ -n "$from_build" ]; then
  log "installing $from_build into $prefix"
else
  log "building the library alone in $work/lib (Release) $*"
  cmake -S . -B "$work/lib" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_CUDA_ARCHITECTURES="${CMAKE_CUDA_ARCHITECTURES:-90}" -DATTNRT_BUILD_TESTS=OFF \
    -DATTNRT_BUILD_BENCH=OFF -DATTNRT_BUILD_EXAMPLES=OFF "$@" >/dev/null
  cmake --build "$work/lib" -j "$jobs" --target attnrt
  from_build=$work/lib
fi
cmake --install "$from_build" --prefix "$prefix" >/dev/null
log "installed: $(cd "$prefix" && find . -type f | sort | tr '\n' ' ')"

log "find_package(attnrt): examples/consumer against $prefix"
cmake -S examples/consumer -B "$work/consumer" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$prefix" | grep 'attnrt'
cmake --build "$work/consumer" -j "$jobs" >/dev/null
"$work/consumer/consumer_cpp"
"$work/consumer/consumer_c"

if command -v pkg-config >/dev/null; then
  log "pkg-config attnrt: $(PKG_CONFIG_PATH="$prefix/lib/pkgconfig" pkg-config --modversion attnrt)"
  mkdir -p "$work/consumer-pc"
  # shellcheck disable=SC2046  # the flags are words
  cc -std=c11 examples/consumer/consumer.c -o "$work/consumer-pc/consumer_c" \
    $(PKG_CONFIG_PATH="$prefix/lib/pkgconfig" pkg-config --cflags --libs attnrt)
  LD_LIBRARY_PATH="$prefix/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$work/consumer-pc/consumer_c"
else
  log "pkg-config not installed: attnrt.pc not checked"
fi

log "add_subdirectory: examples/consumer with attnrt built as its sub-project (CPU only)"
cmake -S examples/consumer -B "$work/subproject" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DATTNRT_SOURCE_DIR="$root" >/dev/null
cmake --build "$work/subproject" -j "$jobs" >/dev/null
"$work/subproject/consumer_cpp"
"$work/subproject/consumer_c"
log "OK in $((SECONDS - start)) s"
