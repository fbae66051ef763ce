#!/bin/bash
# Fourth device call (H100): Decode (the scheduler's inline step) now stages a host-memory
# request in a record of the mapped staging pool, so the executor runs it in place on its solo
# device-memory graph. Builds this tree (every target) and 48b23db's api_host_path_bench; the whole
# api_host_path_bench at this commit (writes summary.json: the README's column); B=1 of 48b23db
# and this commit alternating, twice; then every test binary in gtest shards (decode_gpu_test's
# tuned-table test as a job of its own), last because the device time left may cut them.
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; cd "$(dirname "$0")/../../.."
source scripts/gpu-check.sh   # defines gtest_problem and friends, returns
NEW=/tmp/attnrt-build-new; OLD=/tmp/attnrt-build-old  # DCHECKS off
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > "$O/device.txt"
echo "commit $COMMIT (old: 48b23db), start $(date -u +%FT%TZ)" > "$O/record.txt"
cfg() { cmake -S "$1" -B "$2" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF; }
cfg . $NEW > "$O/cfg.log" 2>&1 || { echo "configure failed"; tail -20 "$O/cfg.log"; }
cfg old_tree $OLD > "$O/cfg_old.log" 2>&1 || { echo "configure old failed"; tail -20 "$O/cfg_old.log"; }
( timeout 420 cmake --build $OLD -j4 --target api_host_path_bench > "$O/build_old.log" 2>&1; echo "old build rc=$? at $(date -u +%T)" >> "$O/record.txt" ) &
timeout 330 cmake --build $NEW -j14 -- -k 0 > "$O/build.log" 2>&1
echo "build rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
grep -E "error|FAILED" "$O/build.log" | head -20
grep -E "^old build" "$O/record.txt"
mkdir -p "$O/new_1"
timeout 150 $NEW/bench/api_host_path_bench --out "$O/new_1" --commit $COMMIT > "$O/new_1/host_path.txt" 2>&1
echo "new_1 rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
grep -E "^saturation B|read and written in place|NOT OVERLOADED|^runtime B=1|^ *executor|^floor|host cpu per request at B=128|^\[" "$O/new_1/host_path.txt" | tee -a "$O/record.txt"
for r in old_1 new_2 old_2 new_3; do
  v=${r%_*}; [ $v = new ] && B=$NEW || B=$OLD
  timeout 60 $B/bench/api_host_path_bench --sections b1 > "$O/ab_$r.txt" 2>&1
  echo "ab_$r rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
  grep -E "^runtime B=1|^ *executor|^floor|of the pieces" "$O/ab_$r.txt" | tee -a "$O/record.txt"
done
cd $NEW/tests
for b in $(ls | grep -E '_test$'); do
  case $b in decode_gpu_test) echo "$b tuned 1"; for i in 0 1 2 3 4 5 6 7 8 9 10 11; do echo "$b $i 12"; done ;;
    gemm_path_gpu_test|decode_fp8_gpu_test) for i in 0 1 2 3; do echo "$b $i 4"; done ;;
    *) echo "$b 0 1" ;; esac
done > "$O/jobs.txt"
run_job() {  # decode_gpu_test's longest test alone ("tuned"), the rest in shards
  local f='-TunedLaunchTableTest.EveryRowLaunchesAndMatchesReference'
  [ "$2" = tuned ] && f='TunedLaunchTableTest.EveryRowLaunchesAndMatchesReference'
  if [ "$2" = tuned ]; then set -- "$1" 0 1 "$2"; fi
  GTEST_FILTER=$([ "$1" = decode_gpu_test ] && echo "$f" || echo '*') GTEST_SHARD_INDEX=$2 GTEST_TOTAL_SHARDS=$3 \
    timeout "$([ "${4:-}" = tuned ] && echo 230 || echo 200)" "./$1" > "$O/t_$1.${4:-$2}.log" 2>&1
  echo "$1.${4:-$2} rc=$?"
}
export -f run_job; export O
xargs -P 12 -L 1 bash -c 'run_job "$@"' _ < "$O/jobs.txt" > "$O/rc.txt"
echo "tests done at $(date -u +%T)" | tee -a "$O/record.txt"
fails=0
while read -r b i n; do
  rc=$(grep "^$b.$i rc=" "$O/rc.txt" | sed 's/.*rc=//')
  log="$O/t_$b.$i.log"
  p=$(gtest_problem "$log")
  sk=$(grep -c "^\[  SKIPPED \] [A-Za-z]" "$log")
  line="$b shard $i/$n rc=$rc $(grep -E '^\[  PASSED  \] [0-9]+' "$log" | tail -1) skipped=$sk ${p:+PROBLEM: $p}"
  echo "$line" >> "$O/record.txt"
  if [ "$rc" != 0 ] || [ -n "$p" ]; then fails=$((fails+1)); echo "$line"; grep -E "Failure|FAILED  \]" -A3 "$log" | head -20; fi
done < "$O/jobs.txt"
echo "jobs with a problem: $fails of $(wc -l < "$O/jobs.txt")" | tee -a "$O/record.txt"
echo "end $(date -u +%FT%TZ)" >> "$O/record.txt"
