#!/bin/bash
# Seventh device call (H200): memcheck over the executor's parts test at the tree with the
# metadata copy kernel (r6's memcheck over the executor ran out of time in its first test).
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; cd "$(dirname "$0")/../../.."
echo "commit $COMMIT, start $(date -u +%FT%TZ)" > "$O/record.txt"
C="-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF"
cmake -S . -B build-h200 $C > "$O/cfg.log" 2>&1
timeout 200 cmake --build build-h200 -j16 --target cuda_executor_gpu_test > "$O/build.log" 2>&1; echo "build rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
timeout 150 compute-sanitizer --tool memcheck --error-exitcode 9 build-h200/tests/cuda_executor_gpu_test --gtest_filter='*InParts*' > "$O/memcheck_executor.txt" 2>&1; echo "memcheck executor rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
grep -E "ERROR SUMMARY|PASSED|FAILED" "$O/memcheck_executor.txt"
tar -czf "$O.tgz" -C "$(dirname "$O")" "$(basename "$O")" && rm -rf "$O"
