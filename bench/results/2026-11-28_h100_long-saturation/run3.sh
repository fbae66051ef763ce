#!/bin/bash
# Third device call (H100): CudaExecutorOptions::in_place_only_when_idle. The executor's GPU
# tests of staged (device-memory) pieces, the new one included, then saturation at max batch
# 128 (T=512) and 32 (T=4096) with staged pieces in place always / only when idle, alternating
# twice (api_host_path_bench --in-place-ab).
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; D=$(cd "$(dirname "$0")" && pwd); cd "$D/../../.."
B=/tmp/attnrt-build  # DCHECKS off
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > "$O/device.txt"
echo "commit $COMMIT, start $(date -u +%FT%TZ)" > "$O/record.txt"
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF > "$O/cfg.log" 2>&1
timeout 240 cmake --build $B -j16 --target api_host_path_bench cuda_executor_gpu_test > "$O/build.log" 2>&1
echo "build rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
timeout 200 $B/tests/cuda_executor_gpu_test --gtest_filter='*Staged*:*Busy*:*Pipelined*:*DeviceAndHost*:*Solo*' > "$O/executor_test.txt" 2>&1
echo "cuda_executor_gpu_test rc=$? $(grep -E '^\[  (PASSED|FAILED) |^\[  FAILED  \]' "$O/executor_test.txt" | tr '\n' ' ')" | tee -a "$O/record.txt"
timeout 240 $B/bench/api_host_path_bench --sections none --in-place-ab > "$O/ab.txt" 2>&1
echo "ab rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
grep -E "^saturation B|capacity run|read and written in place|^\[" "$O/ab.txt" | tee -a "$O/record.txt"
echo "end $(date -u +%FT%TZ)" >> "$O/record.txt"
