#!/usr/bin/env bash
# Configures and builds attnrt into ${BUILD_DIR:-build} (Release, sm_90 unless
# CMAKE_CUDA_ARCHITECTURES is set). Extra arguments go to cmake's configure step.
set -euo pipefail
case "${1:-}" in -h|--help) sed -n '2,/^set -/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;; esac
cd "$(dirname "$0")/.."
build_dir=${BUILD_DIR:-build}
arch=${CMAKE_CUDA_ARCHITECTURES:-90}
jobs=${JOBS:-$(nproc)}
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CUDA_ARCHITECTURES="$arch" "$@" >/dev/null
cmake --build "$build_dir" -j "$jobs"
