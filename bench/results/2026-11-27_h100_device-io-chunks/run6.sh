#!/bin/bash
# Sixth device call (H100): the step reads q and writes out/lse in place for device-memory
# pieces on the split-KV paths (no q gather, no scatter). The decode kernels' in-place test and
# edge tests, the executor's tests, the Runtime's device-memory and FP8 tests, memcheck over the
# in-place kernel test and the chunk test; then the lone-piece A/B of this tree against 34294f8
# (chunks with gather and scatter), alternating.
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; cd "$(dirname "$0")/../../.."
NEW=/tmp/attnrt-build-new; OLD=/tmp/attnrt-build-old  # DCHECKS off
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > "$O/device.txt"
echo "commit $COMMIT (old: 34294f8), start $(date -u +%FT%TZ)" > "$O/record.txt"
cmake -S . -B $NEW -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF > "$O/cfg.log" 2>&1
cmake -S old_tree -B $OLD -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF > "$O/cfg_old.log" 2>&1
timeout 300 cmake --build $NEW -j12 --target api_host_path_bench cuda_executor_gpu_test decode_gpu_test api_device_memory_gpu_test api_fp8_kv_cache_test api_runtime_gpu_test > "$O/build.log" 2>&1 &
timeout 300 cmake --build $OLD -j4 --target api_host_path_bench > "$O/build_old.log" 2>&1 &
wait
echo "builds done at $(date -u +%T)" | tee -a "$O/record.txt"
run() {  # name, timeout, binary, filter
  timeout $2 $NEW/tests/$3 --gtest_filter="$4" > "$O/$1.txt" 2>&1
  echo "$1 rc=$? $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' $O/$1.txt | tr '\n' ' ')" | tee -a "$O/record.txt"
}
run decode_gpu_test 150 decode_gpu_test '*DecodeEdgeTest*'
run cuda_executor_gpu_test 150 cuda_executor_gpu_test '*'
run api_device_memory_gpu_test 60 api_device_memory_gpu_test '*'
run api_fp8_kv_cache_test 60 api_fp8_kv_cache_test '*'
run api_runtime_gpu_test 90 api_runtime_gpu_test '*'
timeout 90 compute-sanitizer --tool memcheck --error-exitcode 9 $NEW/tests/decode_gpu_test --gtest_filter='*RowsInPlace*' > "$O/memcheck_kernel.txt" 2>&1
echo "memcheck kernel rc=$? $(grep -E 'ERROR SUMMARY' $O/memcheck_kernel.txt | tail -1)" | tee -a "$O/record.txt"
timeout 90 compute-sanitizer --tool memcheck --error-exitcode 9 $NEW/tests/cuda_executor_gpu_test --gtest_filter='*Chunk*Rows64:*StagingMemoryRequestsRunInPlace*' > "$O/memcheck_executor.txt" 2>&1
echo "memcheck executor rc=$? $(grep -E 'ERROR SUMMARY' $O/memcheck_executor.txt | tail -1)" | tee -a "$O/record.txt"
for r in new_1 old_1 new_2; do
  v=${r%_*}; [ $v = new ] && B=$NEW || B=$OLD
  timeout 80 $B/bench/api_host_path_bench --sections none --lone-ab --quick > "$O/lone_$r.txt" 2>&1
  echo "lone_$r rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
  grep -E "^lone" "$O/lone_$r.txt" | tee -a "$O/record.txt"
done
echo "end $(date -u +%FT%TZ)" >> "$O/record.txt"
