#!/bin/bash
# First device call (2026-11-26): build the working tree (every target) and, beside it, the
# benchmarks of the previous commit (build-snap/old, 1512790: the separate merge kernel); run
# every test binary in parallel (the two longest in gtest shards), checked as gpu-check does.
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; cd "$(dirname "$0")/../../.."
source scripts/gpu-check.sh   # defines gtest_problem and friends, returns
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > "$O/device.txt"
echo "commit $COMMIT, start $(date -u +%FT%TZ)" > "$O/record.txt"
cfg() { cmake -S "$1" -B "$2" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF; }
cfg . build-gpu > "$O/cfg.log" 2>&1 || { echo "configure failed"; tail -20 "$O/cfg.log"; }
cfg build-snap/old build-old > "$O/cfg_old.log" 2>&1 || { echo "configure old failed"; tail -20 "$O/cfg_old.log"; }
( timeout 400 cmake --build build-old -j6 --target kernels_decode_bench api_host_path_bench > "$O/build_old.log" 2>&1; echo "old build rc=$?" >> "$O/record.txt" ) &
timeout 330 cmake --build build-gpu -j12 -- -k 0 > "$O/build.log" 2>&1
echo "build rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
grep -E "error|FAILED" "$O/build.log" | head -20
cd build-gpu/tests
for b in $(ls | grep -E '_test$'); do
  case $b in decode_gpu_test) for i in 0 1 2 3 4 5 6 7; do echo "$b $i 8"; done ;;
    gemm_path_gpu_test|decode_fp8_gpu_test) for i in 0 1 2 3; do echo "$b $i 4"; done ;;
    *) echo "$b 0 1" ;; esac
done > "$O/jobs.txt"
run_job() {
  GTEST_SHARD_INDEX=$2 GTEST_TOTAL_SHARDS=$3 timeout 220 "./$1" > "$O/t_$1.$2.log" 2>&1
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
wait
tail -3 "$O/record.txt"
echo "end $(date -u +%FT%TZ)" >> "$O/record.txt"
