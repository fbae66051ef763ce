#!/bin/bash
# Second device call (H100): KvCache::WriteTokens writing runs of consecutive blocks at once
# (a prefill of 4096 tokens took ~40 ms of strided copies per sequence and layer): the device
# KV-cache and Runtime tests, then one full api_host_path_bench record with the T=4096 rows
# (256 sequences there).
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; D=$(cd "$(dirname "$0")" && pwd); cd "$D/../../.."
B=/tmp/attnrt-build  # DCHECKS off
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > "$O/device.txt"
echo "commit $COMMIT, start $(date -u +%FT%TZ)" > "$O/record.txt"
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF > "$O/cfg.log" 2>&1
timeout 200 cmake --build $B -j16 --target api_host_path_bench kv_cache_gpu_test api_runtime_gpu_test > "$O/build.log" 2>&1
echo "build rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
for t in kv_cache_gpu_test api_runtime_gpu_test; do
  timeout 120 $B/tests/$t > "$O/$t.txt" 2>&1
  echo "$t rc=$? $(grep -E '^\[  (PASSED|FAILED) ' "$O/$t.txt" | tr '\n' ' ')" | tee -a "$O/record.txt"
done
timeout 330 $B/bench/api_host_path_bench --out "$O/run_1" --commit $COMMIT > "$O/run_1.txt" 2>&1
echo "run_1 rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
grep -E "^saturation B|capacity run|scheduled|prefilled|NOT OVERLOADED|^runtime B=1|executor Run  |host cpu per request at B=128|^\[" "$O/run_1.txt" | tee -a "$O/record.txt"
echo "end $(date -u +%FT%TZ)" >> "$O/record.txt"
