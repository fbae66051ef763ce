#!/bin/bash
# Ninth device call (H100): compute-sanitizer memcheck over the busy-gather executor test (staged
# pieces through the general graph and in place, results against the shadow).
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; D=$(cd "$(dirname "$0")" && pwd); cd "$D/../../.."
B=/tmp/attnrt-build  # DCHECKS off
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > "$O/device.txt"
echo "commit $COMMIT, start $(date -u +%FT%TZ)" > "$O/record.txt"
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF > "$O/cfg.log" 2>&1
timeout 100 cmake --build $B -j16 --target cuda_executor_gpu_test > "$O/build.log" 2>&1
echo "build rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
timeout 90 compute-sanitizer --tool memcheck --error-exitcode 9 $B/tests/cuda_executor_gpu_test \
  --gtest_filter='*WhileBusy*' > "$O/memcheck.txt" 2>&1
echo "memcheck rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
tail -6 "$O/memcheck.txt" | tee -a "$O/record.txt"
echo "end $(date -u +%FT%TZ)" >> "$O/record.txt"
