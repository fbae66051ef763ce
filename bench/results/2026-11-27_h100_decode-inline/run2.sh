#!/bin/bash
# Second device call (H100): r1 had Decode at 35.8 us against 28.7 for the executor alone; the
# caller's futex wakes of the idle completion, launcher and batching threads are now gone. The
# whole api_host_path_bench at this commit (writes summary.json, with an executor Run row);
# then saturation old (d0563ec) / new alternating twice (copy-out through the pack pool).
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; cd "$(dirname "$0")/../../.."
NEW=/tmp/attnrt-build-new; OLD=/tmp/attnrt-build-old  # DCHECKS off
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > "$O/device.txt"
echo "commit $COMMIT (old: d0563ec), start $(date -u +%FT%TZ)" > "$O/record.txt"
cmake -S . -B $NEW -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF > "$O/cfg.log" 2>&1
cmake -S old_tree -B $OLD -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF > "$O/cfg_old.log" 2>&1
timeout 300 cmake --build $NEW -j12 --target api_host_path_bench api_runtime_gpu_test > "$O/build.log" 2>&1 &
timeout 300 cmake --build $OLD -j4 --target api_host_path_bench > "$O/build_old.log" 2>&1 &
wait
echo "builds done at $(date -u +%T)" | tee -a "$O/record.txt"
timeout 60 $NEW/tests/api_runtime_gpu_test > "$O/api_runtime_gpu_test.txt" 2>&1
echo "api_runtime_gpu_test rc=$? $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' $O/api_runtime_gpu_test.txt | tr '\n' ' ')" | tee -a "$O/record.txt"
mkdir -p "$O/new_1"
timeout 160 $NEW/bench/api_host_path_bench --out "$O/new_1" --commit $COMMIT > "$O/new_1/host_path.txt" 2>&1
echo "new_1 rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
grep -E "runtime B=1|of Decode|executor \(caller|host cpu per request|saturation B" "$O/new_1/host_path.txt" | tee -a "$O/record.txt"
for r in old_1 new_2 old_2 new_3; do
  v=${r%_*}; [ $v = new ] && B=$NEW || B=$OLD
  timeout 70 $B/bench/api_host_path_bench --sections saturation > "$O/sat_$r.txt" 2>&1
  echo "sat_$r rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
  grep -E "saturation B|pieces, 1.5x|completion thread" "$O/sat_$r.txt" | tee -a "$O/record.txt"
done
echo "end $(date -u +%FT%TZ)" >> "$O/record.txt"
