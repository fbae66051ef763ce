#!/bin/bash
# First device call (H200, the kind lent this session): the tree at HEAD built with DCHECKS off
# into build-h200/ (kept for the next call if the machine stays warm); every test binary in gtest
# shards; then the default rows of kernels_decode_bench over the allocator's layout and the SDPA
# comparison in the same call. The launch table is the H100's (swept there on 2026-11-26).
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; cd "$(dirname "$0")/../../.."
source scripts/gpu-check.sh   # defines gtest_problem and friends, returns
B=$PWD/build-h200
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.total --format=csv > "$O/device.txt"
echo "commit $COMMIT, start $(date -u +%FT%TZ)" > "$O/record.txt"
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF > "$O/cfg.log" 2>&1 || { echo "configure failed"; tail -20 "$O/cfg.log"; }
timeout 300 cmake --build $B -j16 -- -k 0 > "$O/build.log" 2>&1
echo "build rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
grep -E "error|FAILED" "$O/build.log" | head -20
pushd $B/tests > /dev/null
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
popd > /dev/null
timeout 200 $B/bench/kernels_decode_bench --blocks allocator --benchmark_filter='BM_ReadCeiling|/default/' \
  --benchmark_out="$O/kernels_decode_bench.json" --benchmark_out_format=json > "$O/kernels_decode_bench.txt" 2>&1
echo "kernels_decode_bench rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
PYTHONUNBUFFERED=1 timeout 60 python3 bench/sdpa_compare.py --out "$O/sdpa_compare.json" \
  --gbench-json "$O/kernels_decode_bench.json" > "$O/sdpa_compare.txt" 2>&1
echo "sdpa_compare rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
tail -40 "$O/sdpa_compare.txt"
echo "end $(date -u +%FT%TZ)" >> "$O/record.txt"
