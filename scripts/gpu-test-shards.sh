#!/usr/bin/env bash
# On a GPU machine: runs every test binary of a build (BUILD/tests/*_test) at once in gtest
# shards, the long ones split (decode_gpu_test in 12 shards and its tuned-table test alone;
# gemm_path_gpu_test and decode_fp8_gpu_test in 4), JOBS at a time, each cut at its timeout;
# then checks every log as gpu-check.sh does (a crash, a failure, a GPU test skipped on a GPU
# host, a shard that ran nothing) and prints one line per job. A whole suite in ~1.5-4 min on
# an H100/H200 host instead of ctest's serial GPU tests: what the device calls of bench/results
# run.
#
#   scripts/gpu-test-shards.sh BUILD_DIR OUT_DIR [--jobs N] [--help]
#     writes OUT_DIR/jobs.txt (binary, shard, shards), OUT_DIR/t_<binary>.<shard>.log,
#     OUT_DIR/rc.txt and OUT_DIR/summary.txt; exits 1 when any job has a problem.
# Environment: SHARD_TIMEOUT (seconds per job, default 200; the tuned-table test 230).
set -uo pipefail
case "${1:-}" in -h|--help|"") sed -n '2,/^set -/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;; esac
build=$(cd "$1" && pwd) || exit 2
out=$2
shift 2
jobs=12
while [ $# -gt 0 ]; do
  case "$1" in
    --jobs) jobs=$2; shift 2 ;;
    *) echo "gpu-test-shards.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
mkdir -p "$out"
out=$(cd "$out" && pwd)
source "$(dirname "$0")/gpu-check.sh"  # gtest_problem and friends; returns when sourced

cd "$build/tests" || exit 2
for b in $(ls | grep -E '_test$'); do
  case $b in
    decode_gpu_test) echo "$b tuned 1"; for i in $(seq 0 11); do echo "$b $i 12"; done ;;
    gemm_path_gpu_test|decode_fp8_gpu_test) for i in 0 1 2 3; do echo "$b $i 4"; done ;;
    *) echo "$b 0 1" ;;
  esac
done > "$out/jobs.txt"

run_job() {  # binary shard shards: decode_gpu_test's longest test alone ("tuned"), the rest sharded
  local bin=$1 shard=$2 shards=$3 filter='*' limit=${SHARD_TIMEOUT:-200} index=$2
  if [ "$bin" = decode_gpu_test ]; then
    filter='-TunedLaunchTableTest.EveryRowLaunchesAndMatchesReference'
    if [ "$shard" = tuned ]; then
      filter='TunedLaunchTableTest.EveryRowLaunchesAndMatchesReference' index=0 limit=230
    fi
  fi
  GTEST_FILTER=$filter GTEST_SHARD_INDEX=$index GTEST_TOTAL_SHARDS=$shards \
    timeout "$limit" "./$bin" > "$OUT/t_$bin.$shard.log" 2>&1
  echo "$bin.$shard rc=$?"
}
export -f run_job
export OUT=$out
xargs -P "$jobs" -L 1 bash -c 'run_job "$@"' _ < "$out/jobs.txt" > "$out/rc.txt"

fails=0
: > "$out/summary.txt"
while read -r b i n; do
  rc=$(grep "^$b.$i rc=" "$out/rc.txt" | sed 's/.*rc=//')
  log="$out/t_$b.$i.log"
  problem=$(gtest_problem "$log")
  skipped=$(grep -c "^\[  SKIPPED \] [A-Za-z]" "$log")
  line="$b shard $i/$n rc=$rc $(grep -E '^\[  PASSED  \] [0-9]+' "$log" | tail -1) skipped=$skipped${problem:+ PROBLEM: $problem}"
  echo "$line" >> "$out/summary.txt"
  if [ "$rc" != 0 ] || [ -n "$problem" ]; then
    fails=$((fails + 1))
    echo "$line"
    grep -E "Failure|FAILED  \]" -A3 "$log" | head -20
  fi
done < "$out/jobs.txt"
echo "jobs with a problem: $fails of $(wc -l < "$out/jobs.txt")" | tee -a "$out/summary.txt"
[ $fails -eq 0 ]
