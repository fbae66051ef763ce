#!/bin/bash
# Fifth device call (H100): the default busy gather (CudaExecutorOptions::busy_gather_max_rows 32,
# busy_gather_min_kv_length 2048). The executor's, the Runtime's, the device-memory and wiring
# GPU tests, then one full api_host_path_bench record (T=512 and T=4096 saturation rows).
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; D=$(cd "$(dirname "$0")" && pwd); cd "$D/../../.."
B=/tmp/attnrt-build  # DCHECKS off
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > "$O/device.txt"
echo "commit $COMMIT, start $(date -u +%FT%TZ)" > "$O/record.txt"
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF > "$O/cfg.log" 2>&1
timeout 240 cmake --build $B -j16 --target api_host_path_bench cuda_executor_gpu_test api_runtime_gpu_test api_device_memory_gpu_test api_wiring_gpu_test kv_cache_gpu_test > "$O/build.log" 2>&1
echo "build rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
for t in cuda_executor_gpu_test api_runtime_gpu_test api_device_memory_gpu_test api_wiring_gpu_test kv_cache_gpu_test; do
  timeout 150 $B/tests/$t > "$O/$t.txt" 2>&1
  echo "$t rc=$? $(grep -E '^\[  (PASSED|FAILED|SKIPPED) |^\[  FAILED  \]' "$O/$t.txt" | tr '\n' ' ')" | tee -a "$O/record.txt"
done
timeout 200 $B/bench/api_host_path_bench --out "$O/run_1" --commit $COMMIT > "$O/run_1.txt" 2>&1
echo "run_1 rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
grep -E "^saturation B|capacity run|scheduled|prefilled|read and written in place|NOT OVERLOADED|^runtime B=1|executor Run  |host cpu per request at B=128|^\[" "$O/run_1.txt" | tee -a "$O/record.txt"
echo "end $(date -u +%FT%TZ)" >> "$O/record.txt"
