#!/bin/bash
# Fourth device call (H100): every test (GPU tests included) through ctest, DCHECKS on, at the
# session's last code change (the solo graph).
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; cd "$(dirname "$0")/../../.."
OUT_DIR="$O" ATTNRT_COMMIT="$COMMIT" BUILD_DIR=/tmp/attnrt-build-gpu timeout 585 \
  scripts/gpu-check.sh --phase tests > "$O/gpu-check-stdout.txt" 2>&1
echo "gpu-check tests rc=$?" | tee -a "$O/gpu-check-stdout.txt"
tail -25 "$O/gpu-check-stdout.txt"
