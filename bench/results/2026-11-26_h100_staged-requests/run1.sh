#!/bin/bash
# First device call (H100): the gather/scatter kernels with every load of a thread in flight,
# a lean device-memory graph (H2D meta -> gather -> step -> scatter), and requests staged in
# mapped memory at Submit (RuntimeOptions::stage_in_mapped_memory) against the default pack
# (memcpy, or streaming stores): api_host_path_bench --staging-ab. Then the executor's and the
# Runtime's GPU tests, and memcheck over the staged/device-memory executor tests.
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; cd "$(dirname "$0")/../../.."
source scripts/gpu-check.sh
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > "$O/device.txt"
echo "commit $COMMIT, start $(date -u +%FT%TZ)" > "$O/record.txt"
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF > "$O/cfg.log" 2>&1
timeout 240 cmake --build build-gpu -j16 --target api_host_path_bench cuda_executor_gpu_test api_runtime_gpu_test api_device_memory_gpu_test > "$O/build.log" 2>&1
echo "build rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
for t in cuda_executor_gpu_test api_runtime_gpu_test api_device_memory_gpu_test; do
  timeout 120 build-gpu/tests/$t > "$O/$t.log" 2>&1
  echo "$t rc=$? $(gtest_count "$O/$t.log" ran) ran, $(gtest_count "$O/$t.log" passed) passed; problem: $(gtest_problem "$O/$t.log")" | tee -a "$O/record.txt"
done
timeout 120 compute-sanitizer --tool memcheck --error-exitcode 1 build-gpu/tests/cuda_executor_gpu_test --gtest_filter='*StagingMemory*:*DeviceAndHost*:*GraphReplay*' > "$O/memcheck_executor.log" 2>&1
echo "memcheck executor (staging, device+host, replay) rc=$? $(grep -c 'ERROR SUMMARY: 0' "$O/memcheck_executor.log") clean summaries" | tee -a "$O/record.txt"
timeout 300 build-gpu/bench/api_host_path_bench --sections none --staging-ab --commit $COMMIT > "$O/staging_ab.txt" 2>&1
echo "api_host_path_bench --staging-ab rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
grep -E "^runtime B=1|^host cpu per request|^saturation B" "$O/staging_ab.txt"
echo "end $(date -u +%FT%TZ)" >> "$O/record.txt"
