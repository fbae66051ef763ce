#!/bin/bash
# Sixth device call (H100): CudaExecutorOptions::busy_pack_min_rows. The executor's GPU tests
# (the busy gather / pack test included), then saturation at max batch 128, T=512 and T=4096,
# with busy staged pieces of 64+ rows packed (the copy path) and in place, alternating twice
# (api_host_path_bench --busy-pack-ab).
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; D=$(cd "$(dirname "$0")" && pwd); cd "$D/../../.."
B=/tmp/attnrt-build  # DCHECKS off
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > "$O/device.txt"
echo "commit $COMMIT, start $(date -u +%FT%TZ)" > "$O/record.txt"
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF > "$O/cfg.log" 2>&1
timeout 240 cmake --build $B -j16 --target api_host_path_bench cuda_executor_gpu_test > "$O/build.log" 2>&1
echo "build rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
timeout 150 $B/tests/cuda_executor_gpu_test > "$O/executor_test.txt" 2>&1
echo "cuda_executor_gpu_test rc=$? $(grep -E '^\[  (PASSED|FAILED|SKIPPED) |^\[  FAILED  \]' "$O/executor_test.txt" | tr '\n' ' ')" | tee -a "$O/record.txt"
timeout 200 $B/bench/api_host_path_bench --sections none --busy-pack-ab > "$O/ab.txt" 2>&1
echo "ab rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
grep -E "^saturation B|capacity run|of the pieces|^\[" "$O/ab.txt" | tee -a "$O/record.txt"
echo "end $(date -u +%FT%TZ)" >> "$O/record.txt"
