#!/bin/bash
# First device call (H100): programmatic edges in the executor's host graphs (the compute captured
# behind the H2D copy kernel; the D2H copy kernel after it by a programmatic edge) against the
# tree before it (05b2113). First a probe of what capture makes of a PDL launch behind a kernel
# node. Builds both trees (DCHECKS off), runs the executor's GPU tests of the new one, then
# `--sections b1` alternating old / new twice.
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; D=$(cd "$(dirname "$0")" && pwd); cd "$D/../../.."
B=/tmp/attnrt-build; BO=/tmp/attnrt-build-old
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > "$O/device.txt"
echo "commit $COMMIT (old tree: old_tree/), start $(date -u +%FT%TZ)" > "$O/record.txt"
nvcc -O2 -gencode=arch=compute_90,code=sm_90 -o /tmp/edge_probe "$D/edge_probe.cu" > "$O/edge_probe.txt" 2>&1 && /tmp/edge_probe >> "$O/edge_probe.txt" 2>&1
cat "$O/edge_probe.txt" >> "$O/record.txt"
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF > "$O/cfg.log" 2>&1
cmake -S old_tree -B $BO -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF > "$O/cfg_old.log" 2>&1
(timeout 200 cmake --build $BO -j8 --target api_host_path_bench > "$O/build_old.log" 2>&1
 echo "build old rc=$? at $(date -u +%T)" | tee -a "$O/record.txt") &
timeout 300 cmake --build $B -j12 --target api_host_path_bench cuda_executor_gpu_test > "$O/build.log" 2>&1
echo "build rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
wait
timeout 120 $B/tests/cuda_executor_gpu_test > "$O/cuda_executor_gpu_test.txt" 2>&1
echo "cuda_executor_gpu_test rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
tail -3 "$O/cuda_executor_gpu_test.txt" >> "$O/record.txt"
for r in old_1 new_1 old_2 new_2; do
  BIN=$B; [ "${r%_*}" = old ] && BIN=$BO
  timeout 60 $BIN/bench/api_host_path_bench --sections b1 > "$O/b1_$r.txt" 2>&1
  echo "b1_$r rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
  grep -E "^floor B=1 |copy kernels|executor Run|graph \(Decode\)|graph \(Submit" "$O/b1_$r.txt" | tee -a "$O/record.txt"
done
echo "end $(date -u +%FT%TZ)" >> "$O/record.txt"
