#!/bin/bash
# Eighth device call (H100): the A/B that run7 had no time left for: 5ca827d (a stream per
# pipeline buffer) against 2d1fda2 (one stream), new / old / new, the whole api_host_path_bench
# (each new run writes summary.json); then memcheck over the pipelined-batches test.
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; cd "$(dirname "$0")/../../.."
NEW=/tmp/attnrt-build-new; OLD=/tmp/attnrt-build-old  # DCHECKS off
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > "$O/device.txt"
echo "commit $COMMIT (old: 2d1fda2), start $(date -u +%FT%TZ)" > "$O/record.txt"
cmake -S . -B $NEW -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF > "$O/cfg.log" 2>&1
cmake -S old_tree -B $OLD -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF > "$O/cfg_old.log" 2>&1
timeout 300 cmake --build $NEW -j16 --target api_host_path_bench cuda_executor_gpu_test > "$O/build.log" 2>&1
echo "build rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
timeout 200 cmake --build $OLD -j16 --target api_host_path_bench > "$O/build_old.log" 2>&1
echo "build old rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
for r in new_1 old_1 new_2; do
  v=${r%_*}
  if [ $v = new ]; then
    mkdir -p "$O/$r"
    timeout 130 $NEW/bench/api_host_path_bench --out "$O/$r" --commit $COMMIT > "$O/$r/host_path.txt" 2>&1
    echo "$r rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
    F="$O/$r/host_path.txt"
  else
    timeout 130 $OLD/bench/api_host_path_bench > "$O/$r.txt" 2>&1
    echo "$r rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
    F="$O/$r.txt"
  fi
  grep -E "runtime B=1 graph|executor \(caller|host cpu per request|saturation B|pieces, capacity|pieces, 1.5x|pieces, 70" "$F" | tee -a "$O/record.txt"
done
timeout 170 compute-sanitizer --tool memcheck --error-exitcode 9 $NEW/tests/cuda_executor_gpu_test --gtest_filter='*PipelinedBatchesAndForksMatch*' > "$O/memcheck.txt" 2>&1
echo "memcheck rc=$? $(grep -E 'ERROR SUMMARY' $O/memcheck.txt | tail -1)" | tee -a "$O/record.txt"
echo "end $(date -u +%FT%TZ)" >> "$O/record.txt"
