#!/bin/bash
# Tenth device call (H100): host-memory-only graphs of small buckets move their staging with copy
# kernels on the pinned buffers (kernel_copy_max_bytes, 64 KiB) instead of memcpy nodes. GPU
# tests of the executor and API, then the B=1 section three times (its A/B row: memcpy nodes).
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; cd "$(dirname "$0")/../../.."
source scripts/gpu-check.sh
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > "$O/device.txt"
echo "commit $COMMIT, start $(date -u +%FT%TZ)" > "$O/record.txt"
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF > "$O/cfg.log" 2>&1
T="cuda_executor_gpu_test api_runtime_gpu_test api_wiring_gpu_test api_sequence_safety_gpu_test cuda_executor_gemm_gpu_test api_device_memory_gpu_test api_fp8_kv_cache_test api_c_test"
timeout 250 cmake --build build-gpu -j16 --target api_host_path_bench $T > "$O/build.log" 2>&1
echo "build rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
for t in $T; do ( timeout 120 build-gpu/tests/$t > "$O/t_$t.log" 2>&1; echo "$t rc=$?" >> "$O/rc.txt" ) & done
wait
for t in $T; do
  p=$(gtest_problem "$O/t_$t.log")
  echo "$t $(grep "^$t rc" "$O/rc.txt" | sed 's/.* //') $(grep -E '^\[  PASSED  \]' "$O/t_$t.log") skipped=$(grep -c '^\[  SKIPPED \] [A-Z]' "$O/t_$t.log") ${p:+PROBLEM: $p}" | tee -a "$O/record.txt"
done
timeout 60 compute-sanitizer --tool memcheck --print-limit 20 build-gpu/tests/cuda_executor_gpu_test > "$O/memcheck_cuda_executor.log" 2>&1
echo "memcheck cuda_executor_gpu_test rc=$? $(grep -E 'ERROR SUMMARY' "$O/memcheck_cuda_executor.log")" | tee -a "$O/record.txt"
for r in 1 2 3; do
  timeout 60 build-gpu/bench/api_host_path_bench --b1-only > "$O/b1_$r.txt" 2>&1
  echo "b1 run $r rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
done
cat "$O/b1_1.txt"
grep -H -E "floor B=1|executor|runtime B=1" "$O"/b1_2.txt "$O"/b1_3.txt | sed 's|.*/b1_||'
echo "end $(date -u +%FT%TZ)" >> "$O/record.txt"
