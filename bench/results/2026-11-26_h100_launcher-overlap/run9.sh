#!/bin/bash
# Ninth device call (H100): the executor's GPU tests after the SelectPath message fix.
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; cd "$(dirname "$0")/../../.."
B=/tmp/attnrt-build-bench  # DCHECKS off
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > "$O/device.txt"
echo "commit $COMMIT, start $(date -u +%FT%TZ)" > "$O/record.txt"
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF > "$O/cfg.log" 2>&1
timeout 300 cmake --build $B -j16 --target cuda_executor_gpu_test > "$O/build.log" 2>&1
echo "build rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
timeout 150 $B/tests/cuda_executor_gpu_test > "$O/cuda_executor_gpu_test.txt" 2>&1
echo "cuda_executor_gpu_test rc=$? $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$O/cuda_executor_gpu_test.txt" | tr '\n' ' ')" | tee -a "$O/record.txt"
echo "end $(date -u +%FT%TZ)" >> "$O/record.txt"
