#!/bin/bash
# First device call (H100): device-memory pieces in row chunks (CudaExecutorOptions::
# device_io_chunk_rows). The chunk test on every path, the executor's staging / device-memory /
# pipelined tests, memcheck over the chunk test, then saturation (max batch 32 and 128) with
# chunks of 32 rows (the new default), none (one chunk: the old graph) and 16 rows, alternating.
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; cd "$(dirname "$0")/../../.."
B=/tmp/attnrt-build  # DCHECKS off
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > "$O/device.txt"
echo "commit $COMMIT, start $(date -u +%FT%TZ)" > "$O/record.txt"
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF -DCMAKE_PREFIX_PATH=$PWD/.deps > "$O/cfg.log" 2>&1
timeout 300 cmake --build $B -j16 --target api_host_path_bench cuda_executor_gpu_test > "$O/build.log" 2>&1
echo "build rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
timeout 150 $B/tests/cuda_executor_gpu_test --gtest_filter='*Chunk*:*Staging*:*Staged*:*DeviceAndHost*:*Pipelined*:*MemoryReport*' > "$O/cuda_executor_gpu_test.txt" 2>&1
echo "cuda_executor_gpu_test (filtered) rc=$? $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' $O/cuda_executor_gpu_test.txt | tr '\n' ' ')" | tee -a "$O/record.txt"
timeout 120 compute-sanitizer --tool memcheck --error-exitcode 9 $B/tests/cuda_executor_gpu_test --gtest_filter='*Chunk*Rows16' > "$O/memcheck.txt" 2>&1
echo "memcheck rc=$? $(grep -E 'ERROR SUMMARY' $O/memcheck.txt | tail -1)" | tee -a "$O/record.txt"
for r in 32_1 0_1 16_1 32_2 0_2; do
  timeout 70 $B/bench/api_host_path_bench --sections saturation --chunk-rows ${r%_*} > "$O/sat_$r.txt" 2>&1
  echo "sat_$r rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
  grep -E "saturation B|pieces, 70|pieces, 1.5x" "$O/sat_$r.txt" | tee -a "$O/record.txt"
done
echo "end $(date -u +%FT%TZ)" >> "$O/record.txt"
