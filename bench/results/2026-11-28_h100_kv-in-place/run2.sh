#!/bin/bash
# Second device call (H100, warm: r1's builds in /tmp): decode_gpu_test shard 0 of 10 again
# alone (r1's ran past its 200 s beside eleven other jobs); the whole api_host_path_bench at
# this commit (writes summary.json); then B=1 and saturation (T=512) of 48b23db (old: the gather
# of the new k/v before the in-place step) and this commit alternating, twice.
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; cd "$(dirname "$0")/../../.."
source scripts/gpu-check.sh
NEW=/tmp/attnrt-build-new; OLD=/tmp/attnrt-build-old  # DCHECKS off
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > "$O/device.txt"
echo "commit $COMMIT (old: 48b23db), start $(date -u +%FT%TZ)" > "$O/record.txt"
timeout 240 cmake --build $NEW -j14 > "$O/build.log" 2>&1; echo "build rc=$?" >> "$O/record.txt"
(cd $NEW/tests && GTEST_SHARD_INDEX=0 GTEST_TOTAL_SHARDS=10 timeout 250 ./decode_gpu_test > "$O/t_decode_gpu_test.0.log" 2>&1)
rc=$?; p=$(gtest_problem "$O/t_decode_gpu_test.0.log")
echo "decode_gpu_test shard 0/10 rc=$rc $(grep -E '^\[  PASSED  \] [0-9]+' "$O/t_decode_gpu_test.0.log") skipped=$(grep -c "^\[  SKIPPED \] [A-Za-z]" "$O/t_decode_gpu_test.0.log") ${p:+PROBLEM: $p} at $(date -u +%T)" | tee -a "$O/record.txt"
mkdir -p "$O/new_1"
timeout 150 $NEW/bench/api_host_path_bench --out "$O/new_1" --commit $COMMIT > "$O/new_1/host_path.txt" 2>&1
echo "new_1 rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
grep -E "^saturation B|read and written in place|NOT OVERLOADED|^runtime B=1|^ *executor|^floor|host cpu per request at B=128|^\[" "$O/new_1/host_path.txt" | tee -a "$O/record.txt"
for r in old_1 new_2 old_2 new_3; do
  v=${r%_*}; [ $v = new ] && B=$NEW || B=$OLD
  timeout 80 $B/bench/api_host_path_bench --sections b1,saturation > "$O/ab_$r.txt" 2>&1
  echo "ab_$r rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
  grep -E "^saturation B|^runtime B=1|^ *executor|^floor" "$O/ab_$r.txt" | tee -a "$O/record.txt"
done
echo "end $(date -u +%FT%TZ)" >> "$O/record.txt"
