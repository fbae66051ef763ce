#!/bin/bash
# Seventh device call (H100): 5ca827d (a stream per pipeline buffer: copies overlap the previous
# piece's compute) -- the executor's and the API's GPU tests, memcheck and racecheck over the
# executor's tests; then against 2d1fda2 (one stream) alternating twice, the whole
# api_host_path_bench; each run of the new code writes summary.json.
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; cd "$(dirname "$0")/../../.."
NEW=/tmp/attnrt-build-new; OLD=/tmp/attnrt-build-old  # DCHECKS off
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > "$O/device.txt"
echo "commit $COMMIT (old: 2d1fda2), start $(date -u +%FT%TZ)" > "$O/record.txt"
T="cuda_executor_gpu_test cuda_executor_gemm_gpu_test api_runtime_gpu_test api_wiring_gpu_test api_sequence_safety_gpu_test api_device_memory_gpu_test"
cmake -S . -B $NEW -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF > "$O/cfg.log" 2>&1
cmake -S old_tree -B $OLD -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF > "$O/cfg_old.log" 2>&1
timeout 300 cmake --build $NEW -j16 --target api_host_path_bench $T > "$O/build.log" 2>&1
echo "build rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
(timeout 200 cmake --build $OLD -j8 --target api_host_path_bench > "$O/build_old.log" 2>&1; echo "build old rc=$? at $(date -u +%T)" >> "$O/record.txt") &
for t in $T; do
  timeout 150 $NEW/tests/$t > "$O/$t.txt" 2>&1
  echo "$t rc=$? $(grep -E '^\[  (PASSED|FAILED) ' $O/$t.txt | tr '\n' ' ')" | tee -a "$O/record.txt"
done
wait
F='*Pipelined*:*SequenceCallsRightAfterSubmit*:*InjectedLaunchFailure*:*SmallBucketsPackStaged*:*GraphReplayIsBitIdentical*'
for tool in memcheck racecheck; do
  timeout 150 compute-sanitizer --tool $tool --error-exitcode 9 $NEW/tests/cuda_executor_gpu_test --gtest_filter="$F" > "$O/$tool.txt" 2>&1
  echo "$tool rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $O/$tool.txt | tail -1)" | tee -a "$O/record.txt"
done
for i in 1 2; do
  for v in old new; do
    if [ $v = new ]; then
      mkdir -p "$O/new_$i"
      timeout 150 $NEW/bench/api_host_path_bench --out "$O/new_$i" --commit $COMMIT > "$O/new_$i/host_path.txt" 2>&1
      echo "new run $i rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
      F="$O/new_$i/host_path.txt"
    else
      timeout 150 $OLD/bench/api_host_path_bench > "$O/old_$i.txt" 2>&1
      echo "old run $i rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
      F="$O/old_$i.txt"
    fi
    grep -E "runtime B=1 graph|executor \(caller|host cpu per request|saturation B|pieces, capacity|pieces, 1.5x|pieces, 70" "$F" | tee -a "$O/record.txt"
  done
done
echo "end $(date -u +%FT%TZ)" >> "$O/record.txt"
