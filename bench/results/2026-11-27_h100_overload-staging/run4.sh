#!/bin/bash
# Fourth device call (H100): the Runtime- and executor-level GPU tests at the new scheduler
# defaults (DCHECKS off: one build with the benchmark), then the saturation section with the
# open loops' 8 producers (new default) and with 4 (the earlier records), each printing the rate
# its producers actually submitted at.
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; D=$(cd "$(dirname "$0")" && pwd); cd "$D/../../.."
B=/tmp/attnrt-build  # DCHECKS off
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > "$O/device.txt"
echo "commit $COMMIT, start $(date -u +%FT%TZ)" > "$O/record.txt"
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF > "$O/cfg.log" 2>&1
T="api_runtime_gpu_test api_device_memory_gpu_test api_wiring_gpu_test api_sequence_safety_gpu_test api_fp8_kv_cache_test cuda_executor_gpu_test"
timeout 220 cmake --build $B -j16 --target api_host_path_bench $T > "$O/build.log" 2>&1
echo "build rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
for t in $T; do
  timeout 100 $B/tests/$t > "$O/$t.txt" 2>&1
  echo "$t rc=$? $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$O/$t.txt" | tr '\n' ' ')" | tee -a "$O/record.txt"
done
echo "tests done at $(date -u +%T)" | tee -a "$O/record.txt"
for r in producers8 producers4; do
  timeout 95 $B/bench/api_host_path_bench --out "$O/$r" --commit $COMMIT --sections saturation --producers ${r#producers} > "$O/$r.txt" 2>&1
  echo "$r rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
  grep -E "^saturation B|capacity run|scheduled" "$O/$r.txt" | tee -a "$O/record.txt"
done
echo "end $(date -u +%FT%TZ)" >> "$O/record.txt"
