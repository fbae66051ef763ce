#!/bin/bash
# Eighth device call (H100): r7's memcheck stopped at its 300 s limit inside
# GraphReplayIsBitIdenticalToEager (6.9 s under memcheck on 2026-11-23). Is it the programmatic
# graph edges under compute-sanitizer? memcheck over the edge probe (a two-kernel graph with one
# programmatic edge), then that test under memcheck on the tree before the edges (05b2113) and
# on this one, each with a time limit; the test without a sanitizer on this tree.
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; D=$(cd "$(dirname "$0")" && pwd); cd "$D/../../.."
B=/tmp/attnrt-build; BO=/tmp/attnrt-build-old
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > "$O/device.txt"
echo "commit $COMMIT (old tree: old_tree/), start $(date -u +%FT%TZ)" > "$O/record.txt"
nvcc -O2 -gencode=arch=compute_90,code=sm_90 -o /tmp/edge_probe "$D/edge_probe.cu" > "$O/edge_probe_memcheck.txt" 2>&1
timeout 60 compute-sanitizer --tool memcheck /tmp/edge_probe >> "$O/edge_probe_memcheck.txt" 2>&1
echo "edge probe under memcheck rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
tail -4 "$O/edge_probe_memcheck.txt" | tee -a "$O/record.txt"
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF > "$O/cfg.log" 2>&1
cmake -S old_tree -B $BO -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF > "$O/cfg_old.log" 2>&1
(timeout 200 cmake --build $BO -j8 --target cuda_executor_gpu_test > "$O/build_old.log" 2>&1
 echo "build old rc=$? at $(date -u +%T)" | tee -a "$O/record.txt") &
timeout 300 cmake --build $B -j12 --target cuda_executor_gpu_test > "$O/build.log" 2>&1
echo "build rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
wait
F='--gtest_filter=*GraphReplayIsBitIdenticalToEager'
timeout 60 $B/tests/cuda_executor_gpu_test $F > "$O/graph_replay_plain.txt" 2>&1
echo "new, no sanitizer rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
timeout 90 compute-sanitizer --tool memcheck $BO/tests/cuda_executor_gpu_test $F > "$O/graph_replay_memcheck_old.txt" 2>&1
echo "old, memcheck rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
timeout 150 compute-sanitizer --tool memcheck $B/tests/cuda_executor_gpu_test $F > "$O/graph_replay_memcheck_new.txt" 2>&1
echo "new, memcheck rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
for f in graph_replay_plain graph_replay_memcheck_old graph_replay_memcheck_new; do
  echo "$f:" >> "$O/record.txt"; grep -E "OK \]|FAILED|ERROR SUMMARY" "$O/$f.txt" | tee -a "$O/record.txt"
done
echo "end $(date -u +%FT%TZ)" >> "$O/record.txt"
