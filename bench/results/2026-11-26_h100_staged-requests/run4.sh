#!/bin/bash
# Fourth device call (H100): scripts/gpu-check.sh --phase sanitizer (memcheck, racecheck,
# initcheck, synccheck over every GPU test binary, the script's filters).
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; cd "$(dirname "$0")/../../.."
OUT_DIR="$O" ATTNRT_COMMIT="$COMMIT" BUILD_DIR=/tmp/attnrt-build-gpu SAN_JOBS=10 SAN_TIMEOUT=420 \
  timeout 580 scripts/gpu-check.sh --phase sanitizer > "$O/gpu-check-stdout.txt" 2>&1
echo "gpu-check sanitizer rc=$?" | tee -a "$O/gpu-check-stdout.txt"
tail -45 "$O/gpu-check-stdout.txt"
