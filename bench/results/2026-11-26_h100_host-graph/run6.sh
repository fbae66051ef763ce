#!/bin/bash
# Sixth device call (2026-11-26): the host-memory-only graph against the commit before it
# (build-snap/prev, 65d3e73). GPU tests of the executor and the API first, then
# api_host_path_bench's floor and B=1 rows alternating prev / new three times each, then the full
# api_host_path_bench of the new commit writing its summary.json (issue 11's record).
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; cd "$(dirname "$0")/../../.."
source scripts/gpu-check.sh
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > "$O/device.txt"
echo "commit $COMMIT (prev: 65d3e73), start $(date -u +%FT%TZ)" > "$O/record.txt"
cfg() { cmake -S "$1" -B "$2" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF; }
cfg . build-gpu > "$O/cfg.log" 2>&1; cfg build-snap/prev build-prev > "$O/cfg_prev.log" 2>&1
( timeout 250 cmake --build build-prev -j5 --target api_host_path_bench > "$O/build_prev.log" 2>&1; echo "prev build rc=$?" >> "$O/record.txt" ) &
T="cuda_executor_gpu_test api_runtime_gpu_test api_wiring_gpu_test api_sequence_safety_gpu_test cuda_executor_gemm_gpu_test api_device_memory_gpu_test api_fp8_kv_cache_test"
timeout 250 cmake --build build-gpu -j11 --target api_host_path_bench $T > "$O/build.log" 2>&1
echo "build rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
wait
for t in $T; do ( timeout 150 build-gpu/tests/$t > "$O/t_$t.log" 2>&1; echo "$t rc=$?" >> "$O/rc.txt" ) & done
wait
for t in $T; do
  p=$(gtest_problem "$O/t_$t.log")
  echo "$t $(grep "^$t rc" "$O/rc.txt" | sed 's/.* //') $(grep -E '^\[  PASSED  \]' "$O/t_$t.log") skipped=$(grep -c '^\[  SKIPPED \] [A-Z]' "$O/t_$t.log") ${p:+PROBLEM: $p}" | tee -a "$O/record.txt"
done
for v in prev new prev2 new2 prev3 new3; do
  b=build-gpu; [ ${v%[23]} = prev ] && b=build-prev
  timeout 60 $b/bench/api_host_path_bench --b1-only > "$O/host_$v.txt" 2>&1
  echo "host path $v rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
done
grep -H -E "runtime B=1|of it" "$O"/host_*.txt | sed 's|.*/host_||'
mkdir -p "$O/summary"
timeout 240 build-gpu/bench/api_host_path_bench --out "$O/summary" --commit $COMMIT > "$O/host_path_full.txt" 2>&1
echo "full host path rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
tail -12 "$O/host_path_full.txt"
echo "end $(date -u +%FT%TZ)" >> "$O/record.txt"
