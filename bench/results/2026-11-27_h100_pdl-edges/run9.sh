#!/bin/bash
# Ninth device call (H100): compute-sanitizer memcheck over the executor's GPU tests that run the
# small buckets' host graphs (r7 spent its 300 s in GraphReplayIsBitIdenticalToEager: r8), then a
# second full api_host_path_bench record (r7's had a 16 ms stall at 70% load, B=32).
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; D=$(cd "$(dirname "$0")" && pwd); cd "$D/../../.."
B=/tmp/attnrt-build  # DCHECKS off
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > "$O/device.txt"
echo "commit $COMMIT, start $(date -u +%FT%TZ)" > "$O/record.txt"
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF > "$O/cfg.log" 2>&1
timeout 240 cmake --build $B -j16 --target api_host_path_bench cuda_executor_gpu_test > "$O/build.log" 2>&1
echo "build rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
timeout 240 compute-sanitizer --tool memcheck --error-exitcode 3 $B/tests/cuda_executor_gpu_test \
  --gtest_filter='*CapturedShort*:*SmallBuckets*:*Run*:*Solo*:*Pipelined*:*DeviceAndHost*' \
  > "$O/memcheck_executor.txt" 2>&1
echo "memcheck rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
pkill -9 -f cuda_executor_gpu_test; sleep 1  # nothing of it left beside the benchmark
grep -E "ERROR SUMMARY|PASSED|FAILED|OK \]" "$O/memcheck_executor.txt" | tee -a "$O/record.txt"
timeout 150 $B/bench/api_host_path_bench --out "$O/run_2" --commit $COMMIT > "$O/run_2.txt" 2>&1
echo "run_2 rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
grep -E "^saturation B|^runtime B=1|host cpu per request at B=128" "$O/run_2.txt" | tee -a "$O/record.txt"
echo "end $(date -u +%FT%TZ)" >> "$O/record.txt"
