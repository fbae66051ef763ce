#!/usr/bin/env bash
# Sets up (apt, when missing), builds attnrt and runs every test with ctest. On a machine without
# a GPU, GPU tests are reported as skipped with their reason. Extra arguments go to ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
BUILD_DIR=${BUILD_DIR:-build} ./scripts/build.sh
cd "${BUILD_DIR:-build}"
ctest --output-on-failure -j "$(nproc)" --timeout 300 "$@"
