#!/bin/bash
# Second device call (H100): the planner's one lookup per request and flat duplicate set
# (8c0b8ae and after) against 118b063 (built in the same call from git archive): the host path's
# full record twice (each writing its summary.json), between them saturation alone on the old
# tree and on this one; then the executor's and the Runtime's GPU tests (DCHECKS off build).
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; cd "$(dirname "$0")/../../.."
START=$(date +%s)
NEW=/tmp/attnrt-build-new; OLD=/tmp/attnrt-build-old  # DCHECKS off
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > "$O/device.txt"
echo "commit $COMMIT (old: 118b063), start $(date -u +%FT%TZ)" > "$O/record.txt"
cmake -S . -B $NEW -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF > "$O/cfg.log" 2>&1
cmake -S old_tree -B $OLD -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF > "$O/cfg_old.log" 2>&1
timeout 280 cmake --build $NEW -j12 --target api_host_path_bench cuda_executor_gpu_test api_runtime_gpu_test api_device_memory_gpu_test batch_plan_test > "$O/build.log" 2>&1 &
timeout 280 cmake --build $OLD -j4 --target api_host_path_bench > "$O/build_old.log" 2>&1 &
wait
echo "builds done at $(date -u +%T)" | tee -a "$O/record.txt"
full() {
  timeout 150 $NEW/bench/api_host_path_bench --out "$O/$1" --commit $COMMIT > "$O/$1.txt" 2>&1
  echo "$1 rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
  grep -E "^saturation B|^runtime B=1|host cpu per request at B=128" "$O/$1.txt" | tee -a "$O/record.txt"
}
sat() {
  timeout 80 $2/bench/api_host_path_bench --sections saturation > "$O/sat_$1.txt" 2>&1
  echo "sat_$1 rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
  grep -E "^saturation B|pieces, (1.5x|70)" "$O/sat_$1.txt" | tee -a "$O/record.txt"
}
full run_1
sat old $OLD
sat new $NEW
full run_2
for t in batch_plan_test cuda_executor_gpu_test api_runtime_gpu_test api_device_memory_gpu_test; do
  LEFT=$(( 585 - ($(date +%s) - START) )); [ $LEFT -lt 20 ] && break
  timeout $LEFT $NEW/tests/$t > "$O/$t.txt" 2>&1
  echo "$t rc=$? $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' $O/$t.txt | tr '\n' ' ')" | tee -a "$O/record.txt"
done
echo "end $(date -u +%FT%TZ)" >> "$O/record.txt"
