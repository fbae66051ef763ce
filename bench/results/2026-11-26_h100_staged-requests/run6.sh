#!/bin/bash
# Sixth device call (H100): memcheck over the three cuda_executor_gpu_test cases that r4's
# memcheck run did not reach before its time limit.
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; cd "$(dirname "$0")/../../.."
B=/tmp/attnrt-build-gpu
nvidia-smi --query-gpu=name,driver_version --format=csv > "$O/device.txt"
echo "commit $COMMIT, start $(date -u +%FT%TZ)" > "$O/record.txt"
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=ON > "$O/build.log" 2>&1
cmake --build $B -j16 --target cuda_executor_gpu_test >> "$O/build.log" 2>&1
echo "build rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
timeout 480 compute-sanitizer --tool memcheck --error-exitcode 9 $B/tests/cuda_executor_gpu_test \
  --gtest_filter='*BatchLargerThanTheLargestBucketIsSplit:*PipelinedBatchesAndForksMatch:*MemoryReportCoversEveryBucket' \
  > "$O/memcheck_cuda_executor_rest.log" 2>&1
echo "memcheck rc=$? $(grep 'ERROR SUMMARY' "$O/memcheck_cuda_executor_rest.log"); $(grep -E '^\[  (PASSED|FAILED) ' "$O/memcheck_cuda_executor_rest.log" | tr '\n' ' ')" | tee -a "$O/record.txt"
echo "end $(date -u +%FT%TZ)" >> "$O/record.txt"
