#!/bin/bash
# One device call: build every test binary (+ the soak and the decode bench), run them all in
# parallel, check every log as gpu-check does, the CUDA soak, a 2-shape bench with its check.
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; cd "$(dirname "$0")"
source scripts/gpu-check.sh   # defines gtest_problem and friends, returns
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > "$O/device.txt"
echo "commit $COMMIT, start $(date -u +%FT%TZ)" > "$O/record.txt"
targets="$(cat targets.txt) api_soak_bench kernels_decode_bench"
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DATTNRT_DCHECKS=ON > "$O/cfg.log" 2>&1 || { echo "configure failed"; tail -20 "$O/cfg.log"; }
timeout 200 cmake --build build-gpu -j16 --target $targets > "$O/build.log" 2>&1
echo "build rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
cd build-gpu/tests
# Jobs "binary shard shards": the two longest binaries in 4 gtest shards each.
for b in $(ls | grep -E '_test$'); do
  case $b in decode_gpu_test|gemm_path_gpu_test) for i in 0 1 2 3; do echo "$b $i 4"; done ;;
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
  if [ "$rc" != 0 ] || [ -n "$p" ]; then fails=$((fails+1)); echo "$line"; grep -E "Failure|FAILED  \]" "$log" | head -8; fi
done < "$O/jobs.txt"
echo "jobs with a problem: $fails of $(wc -l < "$O/jobs.txt")" | tee -a "$O/record.txt"
cd ..
timeout 40 ./bench/api_soak_bench --device cuda --requests 150000 --no-overload > "$O/soak_cuda.txt" 2>&1
echo "soak rc=$?" | tee -a "$O/record.txt"; grep -E "soak:|device|rss flat|exactly" "$O/soak_cuda.txt"
timeout 40 ./bench/kernels_decode_bench --benchmark_filter='(b32_h8_t128_d64_append|b1_h32_t4096_fp8)/' --benchmark_counters_tabular=true > "$O/bench_check.txt" 2>&1
echo "bench check rc=$?" | tee -a "$O/record.txt"
echo "end $(date -u +%FT%TZ)" >> "$O/record.txt"
