#!/bin/bash
# Fifth device call (H100): one lookup per staged request in the plan's pointer check and the
# pack (AddressRanges::ContainsAll). The executor's staging and device-memory tests, memcheck over
# the staging tests, then saturation at this commit and at 606ea90 (r4's), alternating twice:
# the plan's median per piece in the 70%-load runs (device-memory pieces).
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; cd "$(dirname "$0")/../../.."
NEW=/tmp/attnrt-build-new; OLD=/tmp/attnrt-build-old  # DCHECKS off
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > "$O/device.txt"
echo "commit $COMMIT (old: 606ea90), start $(date -u +%FT%TZ)" > "$O/record.txt"
cmake -S . -B $NEW -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF > "$O/cfg.log" 2>&1
cmake -S old_tree -B $OLD -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF > "$O/cfg_old.log" 2>&1
timeout 300 cmake --build $NEW -j12 --target api_host_path_bench cuda_executor_gpu_test api_device_memory_gpu_test > "$O/build.log" 2>&1 &
timeout 300 cmake --build $OLD -j4 --target api_host_path_bench > "$O/build_old.log" 2>&1 &
wait
echo "builds done at $(date -u +%T)" | tee -a "$O/record.txt"
timeout 120 $NEW/tests/cuda_executor_gpu_test --gtest_filter='*Staging*:*Staged*:*DeviceAndHost*:*HostPointer*:*Run*' > "$O/cuda_executor_gpu_test.txt" 2>&1
echo "cuda_executor_gpu_test (filtered) rc=$? $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' $O/cuda_executor_gpu_test.txt | tr '\n' ' ')" | tee -a "$O/record.txt"
timeout 60 $NEW/tests/api_device_memory_gpu_test > "$O/api_device_memory_gpu_test.txt" 2>&1
echo "api_device_memory_gpu_test rc=$? $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' $O/api_device_memory_gpu_test.txt | tr '\n' ' ')" | tee -a "$O/record.txt"
timeout 90 compute-sanitizer --tool memcheck --error-exitcode 9 $NEW/tests/cuda_executor_gpu_test --gtest_filter='*StagingMemoryRequestsRunInPlace*:*SmallBucketsPackStaged*' > "$O/memcheck.txt" 2>&1
echo "memcheck rc=$? $(grep -E 'ERROR SUMMARY' $O/memcheck.txt | tail -1)" | tee -a "$O/record.txt"
for r in new_1 old_1 new_2 old_2; do
  v=${r%_*}; [ $v = new ] && B=$NEW || B=$OLD
  timeout 70 $B/bench/api_host_path_bench --sections saturation > "$O/sat_$r.txt" 2>&1
  echo "sat_$r rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
  grep -E "saturation B|pieces, 70|pieces, 1.5x" "$O/sat_$r.txt" | tee -a "$O/record.txt"
done
echo "end $(date -u +%FT%TZ)" >> "$O/record.txt"
