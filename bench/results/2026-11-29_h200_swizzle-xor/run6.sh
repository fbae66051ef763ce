#!/bin/bash
# Sixth device call (H200): the executor's GPU tests at the session's last runtime commit (the
# known-allocation bound, StagedChunk's device copies) and the address-range tests.
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; cd "$(dirname "$0")/../../.."
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.total --format=csv > "$O/device.txt"
echo "commit $COMMIT, start $(date -u +%FT%TZ)" > "$O/record.txt"
C="-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF"
cmake -S . -B build-h200 $C > "$O/cfg.log" 2>&1
timeout 150 cmake --build build-h200 -j16 --target cuda_executor_gpu_test address_ranges_test api_device_memory_gpu_test > "$O/build.log" 2>&1; echo "build rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
for t in cuda_executor_gpu_test address_ranges_test api_device_memory_gpu_test; do
  timeout 100 build-h200/tests/$t > "$O/$t.log" 2>&1 &
done
wait
for t in cuda_executor_gpu_test address_ranges_test api_device_memory_gpu_test; do echo "$t $(grep -E '^\[  (PASSED|FAILED|SKIPPED) *\] [0-9]' "$O/$t.log" | tr '\n' ' ')" | tee -a "$O/record.txt"; done
grep -E "FAILED|Known" "$O/cuda_executor_gpu_test.log" | head
echo "end $(date -u +%FT%TZ)" >> "$O/record.txt"
