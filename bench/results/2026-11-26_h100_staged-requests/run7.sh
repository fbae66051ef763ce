#!/bin/bash
# Seventh device call (H100), after the review: kernels_decode_bench's input sets take their
# tables from tools::PlaceBlockTables (shared with DeviceDecodeBatch). Two shapes per --blocks
# layout: each benchmark first checks its output against the CPU reference.
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; cd "$(dirname "$0")/../../.."
B=/tmp/attnrt-build-bench
nvidia-smi --query-gpu=name,driver_version --format=csv > "$O/device.txt"
echo "commit $COMMIT, start $(date -u +%FT%TZ)" > "$O/record.txt"
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF > "$O/cfg.log" 2>&1
timeout 240 cmake --build $B -j16 --target kernels_decode_bench > "$O/build.log" 2>&1
echo "build rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
for order in shuffled in-order allocator; do
  timeout 120 $B/bench/kernels_decode_bench --blocks $order \
    --benchmark_filter='BM_Decode/(b32_h8_t128_d64|gqa32_8_b32_t4096)/default/' > "$O/decode_$order.txt" 2>&1
  echo "kernels_decode_bench --blocks $order rc=$? $(grep -c _median "$O/decode_$order.txt") medians" | tee -a "$O/record.txt"
  grep _median "$O/decode_$order.txt" | awk '{print $1, $2, $3}' | tee -a "$O/record.txt"
done
echo "end $(date -u +%FT%TZ)" >> "$O/record.txt"
