#!/bin/bash
# Fifth device call (H100): 0a2bc8b (small buckets pack staged requests: the Runtime's B=1 takes
# the host-memory graph) against 1301631 (before it), alternating three times, B=1 rows and host
# CPU with the per-thread split; the executor's and the Runtime's GPU tests at 0a2bc8b and
# memcheck over the staging tests.
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; cd "$(dirname "$0")/../../.."
NEW=/tmp/attnrt-build-new; OLD=/tmp/attnrt-build-old  # DCHECKS off
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > "$O/device.txt"
echo "commit $COMMIT (old: 1301631), start $(date -u +%FT%TZ)" > "$O/record.txt"
cmake -S . -B $NEW -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF > "$O/cfg.log" 2>&1
cmake -S old_tree -B $OLD -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF -DCONCURRENTQUEUE_ROOT=$PWD/.deps/concurrentqueue > "$O/cfg_old.log" 2>&1
timeout 300 cmake --build $NEW -j16 --target api_host_path_bench cuda_executor_gpu_test api_runtime_gpu_test > "$O/build.log" 2>&1
echo "build rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
timeout 200 cmake --build $OLD -j16 --target api_host_path_bench > "$O/build_old.log" 2>&1
echo "build old rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
timeout 120 $NEW/tests/cuda_executor_gpu_test > "$O/cuda_executor_gpu_test.txt" 2>&1
echo "cuda_executor_gpu_test rc=$? $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' $O/cuda_executor_gpu_test.txt | tr '\n' ' ')" | tee -a "$O/record.txt"
timeout 120 $NEW/tests/api_runtime_gpu_test > "$O/api_runtime_gpu_test.txt" 2>&1
echo "api_runtime_gpu_test rc=$? $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' $O/api_runtime_gpu_test.txt | tr '\n' ' ')" | tee -a "$O/record.txt"
timeout 150 compute-sanitizer --tool memcheck --error-exitcode 9 $NEW/tests/cuda_executor_gpu_test --gtest_filter='*SmallBucketsPackStaged*:*StagingMemoryRequests*' > "$O/memcheck.txt" 2>&1
echo "memcheck rc=$? $(grep -E 'ERROR SUMMARY' $O/memcheck.txt | tail -1)" | tee -a "$O/record.txt"
for i in 1 2 3; do
  for v in old new; do
    B=$OLD; [ $v = new ] && B=$NEW
    timeout 120 $B/bench/api_host_path_bench --sections b1,host > "$O/${v}_$i.txt" 2>&1
    echo "$v run $i rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
    grep -E "runtime B=1 graph|executor \(caller|host cpu per request|by thread" "$O/${v}_$i.txt" | tee -a "$O/record.txt"
  done
done
echo "end $(date -u +%FT%TZ)" >> "$O/record.txt"
