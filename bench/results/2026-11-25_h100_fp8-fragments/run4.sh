#!/bin/bash
# Fourth device call (issues 13 and 14): GPU tests of the FP8 paths and the FP16 decode tests,
# compute-sanitizer (memcheck, racecheck, synccheck, initcheck) over the FP8 kernels; then, alone on
# the GPU, the decode bench rows of the FP8 shapes and their FP16 bases with PyTorch SDPA in the
# same call (sdpa_compare.py), and attnrt-check with its speed table.
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; cd "$(dirname "$0")/../../.."
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > "$O/device.txt"
echo "commit $COMMIT, start $(date -u +%FT%TZ)" > "$O/record.txt"
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
  > "$O/cfg.log" 2>&1 || { echo "configure failed"; tail -20 "$O/cfg.log"; }
timeout 200 cmake --build build-gpu -j16 --target check decode_fp8_gpu_test decode_gpu_test \
  api_fp8_kv_cache_test cuda_executor_gpu_test kernels_decode_bench > "$O/build.log" 2>&1
echo "build rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
grep -E "error" "$O/build.log" | head
cd build-gpu
F='AllCombos/DecodeFp8SweepTest.*D128*:AllCombos/DecodeFp8SweepTest.*D64_bs16*:DecodeFp8Test.*:Variants/*'
job() {  # name, command...
  local n=$1; shift; timeout 170 "$@" > "$O/$n.log" 2>&1; echo "$n rc=$?" >> "$O/jobs.txt"
}
job fp8 ./tests/decode_fp8_gpu_test &
job api_fp8 ./tests/api_fp8_kv_cache_test &
job cuda_executor ./tests/cuda_executor_gpu_test &
for i in 0 1 2 3; do GTEST_SHARD_INDEX=$i GTEST_TOTAL_SHARDS=4 job decode_$i ./tests/decode_gpu_test & done
for tool in memcheck racecheck synccheck initcheck; do
  job san_$tool compute-sanitizer --tool $tool --error-exitcode 9 ./tests/decode_fp8_gpu_test --gtest_filter="$F" &
done
wait
sort "$O/jobs.txt" | tee -a "$O/record.txt"
for f in "$O"/*.log; do
  case $f in *build*|*cfg*) continue;; esac
  echo "$(basename $f): $(grep -E '^\[  (PASSED|FAILED)  \]' $f | tr '\n' ' ') skipped=$(grep -c '^\[  SKIPPED \] [A-Z]' $f) $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $f | tr '\n' ' ')" | tee -a "$O/record.txt"
done
echo "tests done at $(date -u +%T)" | tee -a "$O/record.txt"
timeout 100 ./bench/kernels_decode_bench \
  --benchmark_filter='BM_ReadCeiling|(mha_b32_h32_t4096_bs16|b1_h32_t65536|gqa32_8_b32_t4096|gqa64_8_b32_t4096|b1_h32_t4096|b32_h8_t128_d64_append)(_fp8)?/default' \
  --benchmark_out="$O/kernels_decode_bench.json" --benchmark_out_format=json > "$O/kernels_decode_bench.txt" 2>&1
echo "bench rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
timeout 100 python3 ../bench/sdpa_compare.py --out "$O/sdpa_compare.json" --gbench-json "$O/kernels_decode_bench.json" \
  --shapes mha_b32_h32_t4096_bs16,b1_h32_t65536,gqa32_8_b32_t4096,gqa64_8_b32_t4096,b1_h32_t4096,b32_h8_t128_d64,b32_h8_t128_d64_append \
  > "$O/sdpa_compare.txt" 2>&1
echo "sdpa_compare rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
cat "$O/sdpa_compare.txt" | tail -40
timeout 150 ./examples/attnrt-check --kv-cache-type all --block-sizes 16 --head-dims 64,128 --groups 1,4 \
  --seed 7 --json "$O/check.json" > "$O/check.log" 2>&1
echo "attnrt-check rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
tail -45 "$O/check.log"
