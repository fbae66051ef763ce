#!/bin/bash
# Eleventh device call (H100): the record after the copy kernels. compute-sanitizer memcheck over
# the executor's GPU tests (the new copy nodes read and write pinned memory), then the full
# api_host_path_bench writing summary.json (now with the floor with the step and copy kernels).
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; cd "$(dirname "$0")/../../.."
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > "$O/device.txt"
echo "commit $COMMIT, start $(date -u +%FT%TZ)" > "$O/record.txt"
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF > "$O/cfg.log" 2>&1
timeout 200 cmake --build build-gpu -j16 --target api_host_path_bench cuda_executor_gpu_test > "$O/build.log" 2>&1
echo "build rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
( timeout 200 compute-sanitizer --tool memcheck --print-limit 20 build-gpu/tests/cuda_executor_gpu_test > "$O/memcheck_cuda_executor.log" 2>&1
  echo "memcheck cuda_executor_gpu_test rc=$? $(grep -E 'ERROR SUMMARY' "$O/memcheck_cuda_executor.log") $(grep -E '^\[  PASSED  \]' "$O/memcheck_cuda_executor.log")" >> "$O/record.txt" ) &
mkdir -p "$O/summary"
sleep 1
wait
timeout 150 build-gpu/bench/api_host_path_bench --out "$O/summary" --commit $COMMIT > "$O/host_path_full.txt" 2>&1
echo "full host path rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
cat "$O/record.txt"
cat "$O/host_path_full.txt"
echo "end $(date -u +%FT%TZ)" >> "$O/record.txt"
