#!/bin/bash
# Second device call (H100; its first try found a fresh machine without r1's builds, so this
# builds both trees again): the whole api_host_path_bench at this commit (writes summary.json);
# B=1 and saturation (T=512) of 48b23db (old: the gather of the new k/v before the in-place
# step) and this commit alternating, twice; then decode_gpu_test shard 0 of 10 again, alone
# (r1's ran past its 200 s beside eleven other jobs).
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; cd "$(dirname "$0")/../../.."
source scripts/gpu-check.sh
NEW=/tmp/attnrt-build-new; OLD=/tmp/attnrt-build-old  # DCHECKS off
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > "$O/device.txt"
echo "commit $COMMIT (old: 48b23db), start $(date -u +%FT%TZ)" > "$O/record.txt"
cfg() { cmake -S "$1" -B "$2" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF; }
cfg . $NEW > "$O/cfg.log" 2>&1 || { echo "configure failed"; tail -20 "$O/cfg.log"; }
cfg old_tree $OLD > "$O/cfg_old.log" 2>&1 || { echo "configure old failed"; tail -20 "$O/cfg_old.log"; }
timeout 300 cmake --build $NEW -j11 --target api_host_path_bench decode_gpu_test > "$O/build.log" 2>&1 &
timeout 300 cmake --build $OLD -j5 --target api_host_path_bench > "$O/build_old.log" 2>&1 &
wait
echo "builds done at $(date -u +%T): $(ls $NEW/bench/api_host_path_bench $OLD/bench/api_host_path_bench $NEW/tests/decode_gpu_test 2>&1 | tr '\n' ' ')" | tee -a "$O/record.txt"
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
(cd $NEW/tests && GTEST_SHARD_INDEX=0 GTEST_TOTAL_SHARDS=10 timeout 200 ./decode_gpu_test > "$O/t_decode_gpu_test.0.log" 2>&1)
rc=$?; p=$(gtest_problem "$O/t_decode_gpu_test.0.log")
echo "decode_gpu_test shard 0/10 rc=$rc $(grep -E '^\[  PASSED  \] [0-9]+' "$O/t_decode_gpu_test.0.log") skipped=$(grep -c "^\[  SKIPPED \] [A-Za-z]" "$O/t_decode_gpu_test.0.log") ${p:+PROBLEM: $p} at $(date -u +%T)" | tee -a "$O/record.txt"
echo "end $(date -u +%FT%TZ)" >> "$O/record.txt"
