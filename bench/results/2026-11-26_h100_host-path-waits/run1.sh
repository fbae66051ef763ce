#!/bin/bash
# First device call of the 2026-11-26 afternoon session: the waits on the host path (result_spin,
# sleep_through_steps, the batcher polling only when it can dispatch) and the GraphShape /
# WorkspaceFor refactor. GPU tests of the executor and the API, then api_host_path_bench in full
# (its A/B rows compare the new defaults with the old behaviour in the same process; it writes
# summary.json), then the floor and B=1 rows twice more for their spread.
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; cd "$(dirname "$0")/../../.."
source scripts/gpu-check.sh
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > "$O/device.txt"
echo "commit $COMMIT, start $(date -u +%FT%TZ), nproc $(nproc)" > "$O/record.txt"
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF > "$O/cfg.log" 2>&1
T="cuda_executor_gpu_test api_runtime_gpu_test api_wiring_gpu_test api_sequence_safety_gpu_test cuda_executor_gemm_gpu_test api_device_memory_gpu_test api_fp8_kv_cache_test api_c_test"
timeout 250 cmake --build build-gpu -j16 --target api_host_path_bench $T > "$O/build.log" 2>&1
echo "build rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
for t in $T; do ( timeout 150 build-gpu/tests/$t > "$O/t_$t.log" 2>&1; echo "$t rc=$?" >> "$O/rc.txt" ) & done
wait
for t in $T; do
  p=$(gtest_problem "$O/t_$t.log")
  echo "$t $(grep "^$t rc" "$O/rc.txt" | sed 's/.* //') $(grep -E '^\[  PASSED  \]' "$O/t_$t.log") skipped=$(grep -c '^\[  SKIPPED \] [A-Z]' "$O/t_$t.log") ${p:+PROBLEM: $p}" | tee -a "$O/record.txt"
done
mkdir -p "$O/summary"
timeout 280 build-gpu/bench/api_host_path_bench --out "$O/summary" --commit $COMMIT > "$O/host_path_full.txt" 2>&1
echo "full host path rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
for v in 2 3; do
  timeout 45 build-gpu/bench/api_host_path_bench --b1-only > "$O/b1_$v.txt" 2>&1
  echo "b1 run $v rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
done
cat "$O/host_path_full.txt"
grep -H -E "runtime B=1|of it|A/B|with the decode" "$O"/b1_*.txt | sed 's|.*/b1_||'
echo "end $(date -u +%FT%TZ)" >> "$O/record.txt"
