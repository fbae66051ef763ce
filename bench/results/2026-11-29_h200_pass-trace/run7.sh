#!/bin/bash
# Seventh device call (H200): every test at this tree (scripts/gpu-check.sh --phase tests: DCHECKS
# on, GPU tests included): the executor's piece timings moved to a deque.
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; D=$(cd "$(dirname "$0")" && pwd); cd "$D/../../.."
OUT_DIR="$O" ATTNRT_COMMIT="$COMMIT" BUILD_DIR=/tmp/attnrt-build-gpu timeout 560 \
  scripts/gpu-check.sh --phase tests > "$O/gpu-check-stdout.txt" 2>&1
echo "gpu-check tests rc=$?" | tee -a "$O/gpu-check-stdout.txt"
tail -25 "$O/gpu-check-stdout.txt"
