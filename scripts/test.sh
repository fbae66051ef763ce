#!/usr/bin/env bash
# Sets up (apt, when missing), builds attnrt (with its internal invariant checks, ATTNRT_DCHECKS)
# and runs every test with ctest. On a machine without a GPU, GPU tests are reported as skipped
# with their reason; without nvcc, the CPU build's tests run. Extra arguments go to ctest.
set -euo pipefail
case "${1:-}" in -h|--help) sed -n '2,/^set -/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;; esac
cd "$(dirname "$0")/.."
./scripts/setup.sh
BUILD_DIR=${BUILD_DIR:-build} ./scripts/build.sh -DATTNRT_DCHECKS=ON
cd "${BUILD_DIR:-build}"
ctest --output-on-failure -j "$(nproc)" --timeout 300 "$@"
