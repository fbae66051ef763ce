#!/bin/bash
# Third device call (H100): the pack pool with atomics and spinning helpers (woken ahead by
# the launcher). Saturation at max batch 32 and 128 with the pool's helpers at 0 and auto (3),
# twice, alternating; then the host path's record (the benchmark writes summary.json).
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; cd "$(dirname "$0")/../../.."
B=/tmp/attnrt-build-bench  # DCHECKS off
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > "$O/device.txt"
echo "commit $COMMIT, start $(date -u +%FT%TZ)" > "$O/record.txt"
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF > "$O/cfg.log" 2>&1
timeout 300 cmake --build $B -j16 --target api_host_path_bench cuda_executor_gpu_test copy_pool_test > "$O/build.log" 2>&1
echo "build rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
for t in copy_pool_test cuda_executor_gpu_test; do
  timeout 60 $B/tests/$t --gtest_brief=1 > "$O/$t.txt" 2>&1
  echo "$t rc=$? $(grep -E '^\[  (PASSED|FAILED) ' "$O/$t.txt" | tr '\n' ' ')" | tee -a "$O/record.txt"
done
for round in 1 2; do
  for p in 0 -1; do
    timeout 100 $B/bench/api_host_path_bench --sections saturation --pack-threads $p > "$O/saturation_pack${p}_$round.txt" 2>&1
    echo "round $round pack threads $p rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
    grep -E "pieces|saturation B" "$O/saturation_pack${p}_$round.txt" | tee -a "$O/record.txt"
  done
done
mkdir -p "$O/host-path"
timeout 200 $B/bench/api_host_path_bench --out "$O/host-path" --commit $COMMIT > "$O/host-path/host_path.txt" 2>&1
echo "api_host_path_bench rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
grep -E "pieces|saturation B|runtime B=1|host cpu per" "$O/host-path/host_path.txt" | tee -a "$O/record.txt"
cat "$O/host-path/summary.json" >> "$O/record.txt"
echo "end $(date -u +%FT%TZ)" >> "$O/record.txt"
