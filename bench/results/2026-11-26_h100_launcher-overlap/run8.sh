#!/bin/bash
# Eighth device call (H100): compute-sanitizer memcheck and racecheck over the executor's GPU
# tests (the launcher thread, staged rows on the host path, sequence calls after Submit), then
# the host path's record at the final code (the benchmark writes summary.json).
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; cd "$(dirname "$0")/../../.."
B=/tmp/attnrt-build-bench  # DCHECKS off
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > "$O/device.txt"
echo "commit $COMMIT, start $(date -u +%FT%TZ)" > "$O/record.txt"
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF > "$O/cfg.log" 2>&1
timeout 300 cmake --build $B -j16 --target api_host_path_bench cuda_executor_gpu_test > "$O/build.log" 2>&1
echo "build rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
F='*Pipelined*:*SequenceCalls*:*StagingMemory*:*DeviceAndHost*:*Split*'
for tool in memcheck racecheck; do
  timeout 150 compute-sanitizer --tool $tool --error-exitcode 3 $B/tests/cuda_executor_gpu_test \
    --gtest_brief=1 --gtest_filter="$F" > "$O/sanitizer_$tool.txt" 2>&1
  echo "$tool rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|^\[  (PASSED|FAILED) ' "$O/sanitizer_$tool.txt" | tr '\n' ' ')" | tee -a "$O/record.txt"
done
mkdir -p "$O/host-path"
timeout 240 $B/bench/api_host_path_bench --out "$O/host-path" --commit $COMMIT > "$O/host-path/host_path.txt" 2>&1
echo "api_host_path_bench rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
grep -E "pieces|of the pieces|capacity run|saturation B|runtime B=1|host cpu per" "$O/host-path/host_path.txt" | tee -a "$O/record.txt"
cat "$O/host-path/summary.json" >> "$O/record.txt"
echo "end $(date -u +%FT%TZ)" >> "$O/record.txt"
