#!/bin/bash
# Tenth device call (H100): the CUDA executor's GPU tests after the staging tests' helper
# (StagedChunk) took their duplicated set-up.
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; cd "$(dirname "$0")/../../.."
B=/tmp/attnrt-build-tests
nvidia-smi --query-gpu=name,driver_version --format=csv > "$O/device.txt"
echo "commit $COMMIT, start $(date -u +%FT%TZ)" > "$O/record.txt"
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=ON > "$O/cfg.log" 2>&1
timeout 300 cmake --build $B -j16 --target cuda_executor_gpu_test > "$O/build.log" 2>&1
echo "build rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
timeout 200 $B/tests/cuda_executor_gpu_test > "$O/cuda_executor_gpu_test.txt" 2>&1
echo "cuda_executor_gpu_test rc=$? $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' $O/cuda_executor_gpu_test.txt | tr '\n' ' ')" | tee -a "$O/record.txt"
echo "end $(date -u +%FT%TZ)" >> "$O/record.txt"
