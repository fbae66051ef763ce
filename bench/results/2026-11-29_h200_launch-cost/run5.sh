#!/bin/bash
# Fifth device call (H200): every test with DCHECKs (scripts/gpu-check.sh --phase tests) at
# the tree with batches in parts on by default (auto part_size: every Runtime and scheduler on
# the CUDA executor at max batch >= 64 with min_batch_size 0 hands its batches over in parts).
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; D=$(cd "$(dirname "$0")" && pwd); cd "$D/../../.."
OUT_DIR="$O" ATTNRT_COMMIT="$COMMIT" BUILD_DIR=/tmp/attnrt-build-gpu timeout 470 \
  scripts/gpu-check.sh --phase tests > "$O/gpu-check-stdout.txt" 2>&1
echo "gpu-check tests rc=$?" | tee -a "$O/gpu-check-stdout.txt"
tail -25 "$O/gpu-check-stdout.txt"
tar -czf "$O.tgz" -C "$(dirname "$O")" "$(basename "$O")" && rm -rf "$O"
