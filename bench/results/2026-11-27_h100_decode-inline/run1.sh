#!/bin/bash
# First device call (H100): Runtime::Decode (the step on the caller's thread) and the copy-out
# through the pack pool. Builds this commit and d0563ec (the tree before them) side by side; the
# GPU tests of what changed; memcheck over the new executor test; the whole api_host_path_bench
# at this commit (writes summary.json); then saturation old / new.
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; cd "$(dirname "$0")/../../.."
NEW=/tmp/attnrt-build-new; OLD=/tmp/attnrt-build-old  # DCHECKS off
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > "$O/device.txt"
echo "commit $COMMIT (old: d0563ec), start $(date -u +%FT%TZ)" > "$O/record.txt"
cmake -S . -B $NEW -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF > "$O/cfg.log" 2>&1
cmake -S old_tree -B $OLD -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF > "$O/cfg_old.log" 2>&1
timeout 300 cmake --build $NEW -j12 --target api_host_path_bench cuda_executor_gpu_test api_runtime_gpu_test api_c_test copy_pool_test > "$O/build.log" 2>&1 &
timeout 300 cmake --build $OLD -j4 --target api_host_path_bench > "$O/build_old.log" 2>&1 &
wait
echo "builds done at $(date -u +%T): $(ls $NEW/bench/api_host_path_bench $OLD/bench/api_host_path_bench 2>&1 | tr '\n' ' ')" | tee -a "$O/record.txt"
for t in copy_pool_test api_c_test api_runtime_gpu_test; do
  timeout 120 $NEW/tests/$t > "$O/$t.txt" 2>&1
  echo "$t rc=$? $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' $O/$t.txt | tr '\n' ' ')" | tee -a "$O/record.txt"
done
timeout 150 $NEW/tests/cuda_executor_gpu_test --gtest_filter='*Run*:*Pipelined*:*Staging*:*Staged*:*Split*:*LargerThan*:*DeviceAndHost*' > "$O/cuda_executor_gpu_test.txt" 2>&1
echo "cuda_executor_gpu_test (filtered) rc=$? $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' $O/cuda_executor_gpu_test.txt | tr '\n' ' ')" | tee -a "$O/record.txt"
timeout 100 compute-sanitizer --tool memcheck --error-exitcode 9 $NEW/tests/cuda_executor_gpu_test --gtest_filter='*RunCompletesOnTheCallingThread*' > "$O/memcheck.txt" 2>&1
echo "memcheck rc=$? $(grep -E 'ERROR SUMMARY' $O/memcheck.txt | tail -1)" | tee -a "$O/record.txt"
mkdir -p "$O/new_1"
timeout 150 $NEW/bench/api_host_path_bench --out "$O/new_1" --commit $COMMIT > "$O/new_1/host_path.txt" 2>&1
echo "new_1 rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
grep -E "runtime B=1|executor \(caller|host cpu per request|saturation B|pieces, 1.5x|completion thread" "$O/new_1/host_path.txt" | tee -a "$O/record.txt"
timeout 70 $OLD/bench/api_host_path_bench --sections saturation > "$O/old_sat_1.txt" 2>&1
echo "old_sat_1 rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
grep -E "saturation B|pieces, 1.5x|completion thread" "$O/old_sat_1.txt" | tee -a "$O/record.txt"
echo "end $(date -u +%FT%TZ)" >> "$O/record.txt"
