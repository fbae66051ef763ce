#!/bin/bash
# First device call (H100): the launcher thread (plan of batch N+1 overlapping pack + launch of
# batch N). Builds the executor's and the runtime's GPU tests and api_host_path_bench (DCHECKS
# off), runs those tests, then the host path's record (the benchmark writes summary.json).
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; cd "$(dirname "$0")/../../.."
B=/tmp/attnrt-build-bench  # DCHECKS off
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > "$O/device.txt"
echo "commit $COMMIT, start $(date -u +%FT%TZ)" > "$O/record.txt"
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF > "$O/cfg.log" 2>&1
T="cuda_executor_gpu_test cuda_executor_gemm_gpu_test api_runtime_gpu_test api_sequence_safety_gpu_test api_device_memory_gpu_test api_wiring_gpu_test"
timeout 300 cmake --build $B -j16 --target api_host_path_bench $T > "$O/build.log" 2>&1
echo "build rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
for t in $T; do
  timeout 120 $B/tests/$t --gtest_brief=1 > "$O/$t.txt" 2>&1
  echo "$t rc=$? $(grep -E '^\[  (PASSED|FAILED) ' "$O/$t.txt" | tr '\n' ' ') at $(date -u +%T)" | tee -a "$O/record.txt"
done
mkdir -p "$O/host-path"
timeout 200 $B/bench/api_host_path_bench --out "$O/host-path" --commit $COMMIT > "$O/host-path/host_path.txt" 2>&1
echo "api_host_path_bench rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
grep -E "pieces|saturation|runtime B=1|host cpu per" "$O/host-path/host_path.txt" | tee -a "$O/record.txt"
cat "$O/host-path/summary.json" >> "$O/record.txt"
echo "end $(date -u +%FT%TZ)" >> "$O/record.txt"
