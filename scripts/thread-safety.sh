#!/usr/bin/env bash
# Clang's thread-safety analysis over the host code that carries the annotations
# (api/internal/mutex.h: GUARDED_BY, REQUIRES, ...): builds the host sources of attnrt_core,
# attnrt_kvcache, attnrt_runtime, attnrt_scheduler and the facade with clang++ and
# -Wthread-safety -Werror=thread-safety into build-tsa/ (CUDA sources stay nvcc's and are not
# built; no tests, benchmarks or examples). Fails on any finding.
#   scripts/thread-safety.sh [--help]   (apt installs clang when missing; JOBS sets the build
#   parallelism, CXX_CLANG the compiler)
set -euo pipefail
case "${1:-}" in -h|--help) sed -n '2,/^set -/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;; esac
cd "$(dirname "$0")/.."

./scripts/setup.sh
clangxx=${CXX_CLANG:-clang++}
if ! command -v "$clangxx" >/dev/null; then
  echo "thread-safety.sh: installing clang"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends clang
fi
build=build-tsa
jobs=${JOBS:-$(nproc)}
start=$SECONDS

# CMAKE_OPTIMIZE_DEPENDENCIES: a static library then waits for no other library's build, so
# naming the host libraries below compiles their sources and nothing of kernels/.
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CXX_COMPILER="$clangxx" \
  -DCMAKE_CXX_FLAGS="-Wthread-safety -Werror=thread-safety" \
  -DCMAKE_CUDA_ARCHITECTURES="${CMAKE_CUDA_ARCHITECTURES:-90}" \
  -DCMAKE_OPTIMIZE_DEPENDENCIES=ON \
  -DATTNRT_BUILD_TESTS=OFF -DATTNRT_BUILD_BENCH=OFF -DATTNRT_BUILD_EXAMPLES=OFF >/dev/null

# The host sources of the annotated libraries: every C++ object of these targets (the .cu
# objects of kernels/ are left out by naming targets that hold none). The facade's sources are
# attnrt_facade's where the tree has it (attnrt is then the package made of every component).
targets=(attnrt_core attnrt_kvcache attnrt_runtime attnrt_scheduler)
known_targets=$(ninja -C "$build" -t targets all)  # whole, not piped: grep -q would cut it off
if grep -q '^attnrt_facade:' <<<"$known_targets"; then
  targets+=(attnrt_facade)
else
  targets+=(attnrt)
fi
cmake --build "$build" -j "$jobs" --target "${targets[@]}"
echo "thread-safety.sh: ${targets[*]} clean under -Wthread-safety in $((SECONDS - start)) s"
