#!/bin/bash
# Seventh device call (H100): compute-sanitizer memcheck over the executor's GPU tests (the copy
# kernels now wait for and release their neighbours: every graph path), then the full
# api_host_path_bench record (writes summary.json itself).
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; D=$(cd "$(dirname "$0")" && pwd); cd "$D/../../.."
B=/tmp/attnrt-build  # DCHECKS off
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > "$O/device.txt"
echo "commit $COMMIT, start $(date -u +%FT%TZ)" > "$O/record.txt"
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF > "$O/cfg.log" 2>&1
timeout 240 cmake --build $B -j16 --target api_host_path_bench cuda_executor_gpu_test > "$O/build.log" 2>&1
echo "build rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
timeout 300 compute-sanitizer --tool memcheck --error-exitcode 3 $B/tests/cuda_executor_gpu_test \
  --gtest_filter='*EveryPath*:*GraphReplay*:*CapturedShort*:*SmallBuckets*:*Run*:*Solo*:*Pipelined*:*DeviceAndHost*' \
  > "$O/memcheck_executor.txt" 2>&1
echo "memcheck rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
grep -E "ERROR SUMMARY|PASSED|FAILED|OK \]" "$O/memcheck_executor.txt" | tee -a "$O/record.txt"
timeout 150 $B/bench/api_host_path_bench --out "$O/run_1" --commit $COMMIT > "$O/run_1.txt" 2>&1
echo "run_1 rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
grep -E "^saturation B|^runtime B=1|host cpu per request at B=128" "$O/run_1.txt" | tee -a "$O/record.txt"
echo "end $(date -u +%FT%TZ)" >> "$O/record.txt"
