#!/bin/bash
# Third device call (H100): r2 read B=32 T=512 saturation ~3% under 48b23db's (the fused append
# read the new k/v from the request synchronously, a PCIe round trip inside the step); now it
# comes with its tile by cp.async and goes to its page from shared memory. Also: staged B=1
# pieces on an in-place path stay in place (no packing) and a solo piece there runs the
# device-memory graph without its compute-order event nodes. Builds this tree (every target)
# and 48b23db's api_host_path_bench; every test binary in gtest shards; memcheck and racecheck
# over decode cases that read the new K/V in place; then B=1 and saturation (T=512) old / new
# alternating, twice.
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
cd $NEW/tests
for b in $(ls | grep -E '_test$'); do
  case $b in decode_gpu_test) for i in 0 1 2 3 4 5 6 7 8 9; do echo "$b $i 10"; done ;;
    gemm_path_gpu_test|decode_fp8_gpu_test) for i in 0 1 2 3; do echo "$b $i 4"; done ;;
    *) echo "$b 0 1" ;; esac
done > "$O/jobs.txt"
run_job() {
  GTEST_SHARD_INDEX=$2 GTEST_TOTAL_SHARDS=$3 timeout 200 "./$1" > "$O/t_$1.$2.log" 2>&1
  echo "$1.$2 rc=$?"
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
san() {  # tool name binary filter
  timeout 100 compute-sanitizer --tool $1 --error-exitcode 9 ./$3 --gtest_filter="$4" > "$O/san_$1_$2.txt" 2>&1
  echo "$1 $2 rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $O/san_$1_$2.txt | tail -1) $(grep -E '^\[  PASSED  \]' $O/san_$1_$2.txt)" >> "$O/record.txt"
}
F='AllCombos/DecodeSweepTest.MatchesReference/split_kv_D128_bs16_G4:AllCombos/DecodeSweepTest.MatchesReference/split_kv_D64_bs32_G8:AllCombos/DecodeSweepTest.MatchesReference/split_kv_D256_bs16_G1:AllCombos/DecodeSweepTest.MatchesReference/split_kv_simt_D128_bs16_G4'
san memcheck decode decode_gpu_test "$F" &
san racecheck decode decode_gpu_test 'AllCombos/DecodeSweepTest.MatchesReference/split_kv_D128_bs16_G4:AllCombos/DecodeSweepTest.MatchesReference/split_kv_D256_bs8_G2' &
san memcheck fp8 decode_fp8_gpu_test '*split_kv_D128_bs16_G4*' &
wait
grep -E "^(memcheck|racecheck|old build)" "$O/record.txt"
cd - > /dev/null
for r in new_1 old_1 new_2 old_2; do
  v=${r%_*}; [ $v = new ] && B=$NEW || B=$OLD
  timeout 80 $B/bench/api_host_path_bench --sections b1,saturation > "$O/ab_$r.txt" 2>&1
  echo "ab_$r rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
  grep -E "^saturation B|^runtime B=1|^ *executor|^floor" "$O/ab_$r.txt" | tee -a "$O/record.txt"
done
echo "end $(date -u +%FT%TZ)" >> "$O/record.txt"
