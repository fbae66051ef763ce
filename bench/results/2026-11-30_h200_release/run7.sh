#!/bin/bash
# Seventh device call (H200): every test with DCHECKs at this commit (gpu-check.sh --phase tests),
# the prefetching kernels in.
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; cd "$(dirname "$0")/../../.."
OUT_DIR="$O/tests" ATTNRT_COMMIT=$COMMIT BUILD_DIR=/tmp/attnrt-build-gpu timeout 480 scripts/gpu-check.sh --phase tests > "$O/gpu-check-stdout.txt" 2>&1
echo "gpu-check tests rc=$? at $(date -u +%T)" | tee "$O/record.txt"
tail -5 "$O/gpu-check-stdout.txt"; grep -E "tests passed|tests failed|Total Test" "$O"/tests/ctest.log 2>/dev/null | tail -3
tar -czf "$O.tgz" -C "$(dirname "$O")" "$(basename "$O")" && rm -rf "$O"
