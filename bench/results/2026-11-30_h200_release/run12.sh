#!/bin/bash
# Twelfth device call (H200): the prefetch (PrefetchRowStart) on the FP8 tensor-core kernels,
# against the kernels before it (.ab/kernels = 1289831's): kernel-ab.sh over three FP8 rows,
# two rounds, in the little device time left.
set -u
O=$1; mkdir -p "$O"; cd "$(dirname "$0")/../../.."
date -u +%FT%TZ > "$O/device.txt"
JOBS=24 timeout 200 scripts/kernel-ab.sh .ab/kernels "$O/ab" --rounds 2 \
  --filter '/(b1_h32_t4096_fp8|gqa32_8_b32_t4096_fp8|mha_b32_h32_t4096_bs16_fp8)/default/' > "$O/ab.log" 2>&1
echo "kernel-ab rc=$? at $(date -u +%T)" | tee "$O/record.txt"
cat "$O/ab/ab.txt"
tar -czf "$O.tgz" -C "$(dirname "$O")" "$(basename "$O")" && rm -rf "$O"
