#!/bin/bash
# Twelfth device call (H100): after the review's simplification of AddHostGraph (the compute's
# roots read as the H2D node's dependents): the executor's GPU tests, then `--sections b1` once.
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; D=$(cd "$(dirname "$0")" && pwd); cd "$D/../../.."
B=/tmp/attnrt-build  # DCHECKS off
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > "$O/device.txt"
echo "commit $COMMIT, start $(date -u +%FT%TZ)" > "$O/record.txt"
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF > "$O/cfg.log" 2>&1
timeout 240 cmake --build $B -j16 --target api_host_path_bench cuda_executor_gpu_test > "$O/build.log" 2>&1
echo "build rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
timeout 120 $B/tests/cuda_executor_gpu_test > "$O/cuda_executor_gpu_test.txt" 2>&1
echo "cuda_executor_gpu_test rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
tail -3 "$O/cuda_executor_gpu_test.txt" | tee -a "$O/record.txt"
timeout 60 $B/bench/api_host_path_bench --sections b1 > "$O/b1.txt" 2>&1
echo "b1 rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
grep -E "copy kernels  |step, timed  |executor Run|graph \(Decode\)" "$O/b1.txt" | tee -a "$O/record.txt"
echo "end $(date -u +%FT%TZ)" >> "$O/record.txt"
