#!/bin/bash
# Ninth device call (H200): every test at this tree (scripts/gpu-check.sh --phase tests: DCHECKs
# on, GPU tests included): the table growth, the piece timings' new fields, the planner's
# prefetches and the allocator's huge pages (the last two not yet run on a GPU host).
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; D=$(cd "$(dirname "$0")" && pwd); cd "$D/../../.."
OUT_DIR="$O" ATTNRT_COMMIT="$COMMIT" BUILD_DIR=/tmp/attnrt-build-gpu timeout 470 \
  scripts/gpu-check.sh --phase tests > "$O/gpu-check-stdout.txt" 2>&1
echo "gpu-check tests rc=$?" | tee -a "$O/gpu-check-stdout.txt"
tail -25 "$O/gpu-check-stdout.txt"
tar -czf "$O.tgz" -C "$(dirname "$O")" "$(basename "$O")" && rm -rf "$O"
