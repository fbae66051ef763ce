#!/bin/bash
# Eleventh device call (H100): compute-sanitizer memcheck over the executor's Run and solo tests
# (the B=1 host graphs with their programmatic edges; r7 and r9 ran out of time before them:
# memcheck runs these tests 10-100x slower than plain, 2026-11-27_h100_solo-graph r5).
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; D=$(cd "$(dirname "$0")" && pwd); cd "$D/../../.."
B=/tmp/attnrt-build  # DCHECKS off
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > "$O/device.txt"
echo "commit $COMMIT, start $(date -u +%FT%TZ)" > "$O/record.txt"
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF > "$O/cfg.log" 2>&1
timeout 240 cmake --build $B -j16 --target cuda_executor_gpu_test > "$O/build.log" 2>&1
echo "build rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
timeout 400 compute-sanitizer --tool memcheck --error-exitcode 3 $B/tests/cuda_executor_gpu_test \
  --gtest_filter='*RunCompletesOnTheCallingThread*:*Solo*' > "$O/memcheck_run_solo.txt" 2>&1
echo "memcheck rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
grep -E "ERROR SUMMARY|PASSED|FAILED|OK \]" "$O/memcheck_run_solo.txt" | tee -a "$O/record.txt"
echo "end $(date -u +%FT%TZ)" >> "$O/record.txt"
