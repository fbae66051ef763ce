#!/bin/bash
# Fifth device call (H100): kDevice rows staged in the executor's mapped memory join a piece's
# host-memory rows (one host-path graph instead of both paths). The executor's GPU tests, then
# saturation once more and the host path's record (the benchmark writes summary.json).
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; cd "$(dirname "$0")/../../.."
B=/tmp/attnrt-build-bench  # DCHECKS off
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > "$O/device.txt"
echo "commit $COMMIT, start $(date -u +%FT%TZ)" > "$O/record.txt"
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF > "$O/cfg.log" 2>&1
T="cuda_executor_gpu_test api_runtime_gpu_test api_device_memory_gpu_test"
timeout 300 cmake --build $B -j16 --target api_host_path_bench $T > "$O/build.log" 2>&1
echo "build rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
for t in $T; do
  timeout 120 $B/tests/$t --gtest_brief=1 > "$O/$t.txt" 2>&1
  echo "$t rc=$? $(grep -E '^\[  (PASSED|FAILED) ' "$O/$t.txt" | tr '\n' ' ')" | tee -a "$O/record.txt"
done
timeout 120 $B/bench/api_host_path_bench --sections saturation > "$O/saturation_1.txt" 2>&1
echo "saturation rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
grep -E "pieces|of the pieces|capacity run|saturation B" "$O/saturation_1.txt" | tee -a "$O/record.txt"
mkdir -p "$O/host-path"
timeout 240 $B/bench/api_host_path_bench --out "$O/host-path" --commit $COMMIT > "$O/host-path/host_path.txt" 2>&1
echo "api_host_path_bench rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
grep -E "pieces|of the pieces|capacity run|saturation B|runtime B=1|host cpu per" "$O/host-path/host_path.txt" | tee -a "$O/record.txt"
cat "$O/host-path/summary.json" >> "$O/record.txt"
echo "end $(date -u +%FT%TZ)" >> "$O/record.txt"
