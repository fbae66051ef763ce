#!/bin/bash
# Second device call (H100): the solo graph also for a batch of one submitted to an idle
# executor (Submit -> result), the next piece ordered after it by its done event. Builds the new
# tree and the tree before the solo graph (DCHECKS off), runs the executor's GPU tests, then
# `--sections b1` alternating old / new twice, then the host path's full record (summary.json
# written by the benchmark) on the new tree.
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; cd "$(dirname "$0")/../../.."
B=/tmp/attnrt-build; BO=/tmp/attnrt-build-old
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > "$O/device.txt"
echo "commit $COMMIT (old tree: old_tree/), start $(date -u +%FT%TZ)" > "$O/record.txt"
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF > "$O/cfg.log" 2>&1
cmake -S old_tree -B $BO -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF > "$O/cfg_old.log" 2>&1
timeout 300 cmake --build $B -j16 --target api_host_path_bench cuda_executor_gpu_test > "$O/build.log" 2>&1
echo "build rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
timeout 200 cmake --build $BO -j16 --target api_host_path_bench > "$O/build_old.log" 2>&1
echo "build old rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
timeout 120 $B/tests/cuda_executor_gpu_test > "$O/cuda_executor_gpu_test.txt" 2>&1
echo "cuda_executor_gpu_test rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
grep -E "Solo|PASSED|FAILED" "$O/cuda_executor_gpu_test.txt" >> "$O/record.txt"
for r in old_1 new_1 old_2 new_2; do
  BIN=$B; [ "${r%_*}" = old ] && BIN=$BO
  timeout 60 $BIN/bench/api_host_path_bench --sections b1 > "$O/b1_$r.txt" 2>&1
  echo "b1_$r rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
  grep -E "^floor B=1 |copy kernels|executor Run|graph \(Decode\)|graph \(Submit" "$O/b1_$r.txt" | tee -a "$O/record.txt"
done
timeout 150 $B/bench/api_host_path_bench --out "$O/run_1" --commit $COMMIT > "$O/run_1.txt" 2>&1
echo "run_1 rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
grep -E "^saturation B|^runtime B=1|host cpu per request at B=128" "$O/run_1.txt" | tee -a "$O/record.txt"
echo "end $(date -u +%FT%TZ)" >> "$O/record.txt"
