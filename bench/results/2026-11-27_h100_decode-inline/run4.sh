#!/bin/bash
# Fourth device call (H100): the record at the session's code: memcheck over the executor's Run
# test (after the condition-variable change), then the whole api_host_path_bench twice (each
# writes its summary.json; r2's host was loaded).
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; cd "$(dirname "$0")/../../.."
NEW=/tmp/attnrt-build-new  # DCHECKS off
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > "$O/device.txt"
echo "commit $COMMIT, start $(date -u +%FT%TZ)" > "$O/record.txt"
cmake -S . -B $NEW -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF > "$O/cfg.log" 2>&1
timeout 300 cmake --build $NEW -j16 --target api_host_path_bench cuda_executor_gpu_test > "$O/build.log" 2>&1
echo "build rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
timeout 100 compute-sanitizer --tool memcheck --error-exitcode 9 $NEW/tests/cuda_executor_gpu_test --gtest_filter='*RunCompletesOnTheCallingThread*' > "$O/memcheck.txt" 2>&1
echo "memcheck rc=$? $(grep -E 'ERROR SUMMARY' $O/memcheck.txt | tail -1)" | tee -a "$O/record.txt"
for r in 1 2; do
  mkdir -p "$O/run_$r"
  timeout 170 $NEW/bench/api_host_path_bench --out "$O/run_$r" --commit $COMMIT > "$O/run_$r/host_path.txt" 2>&1
  echo "run_$r rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
  grep -E "^floor B=1 |runtime B=1|of Decode|executor \(caller|host cpu per request|saturation B" "$O/run_$r/host_path.txt" | tee -a "$O/record.txt"
done
echo "end $(date -u +%FT%TZ)" >> "$O/record.txt"
