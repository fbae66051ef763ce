#!/bin/bash
# Third device call (issue 13): 3-stage FP8 kernel; every FP8 GPU test (three variants now), the
# FP8 launch sweep again, its table adopted and the bench rebuilt, the FP8 and FP16 rows, ncu.
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; cd "$(dirname "$0")/../../.."
echo "commit $COMMIT, start $(date -u +%FT%TZ)" > "$O/record.txt"
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
  > "$O/cfg.log" 2>&1 || { echo "configure failed"; tail -20 "$O/cfg.log"; }
timeout 240 cmake --build build-gpu -j16 --target decode_fp8_gpu_test api_fp8_kv_cache_test \
  kernels_decode_bench kernels_launch_sweep_bench > "$O/build.log" 2>&1
echo "build rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
grep -E "error" "$O/build.log" | head
cd build-gpu
timeout 100 ./tests/decode_fp8_gpu_test > "$O/decode_fp8_gpu_test.log" 2>&1
echo "decode_fp8_gpu_test rc=$? $(grep -E '^\[  (PASSED|FAILED)  \]' "$O/decode_fp8_gpu_test.log" | tr '\n' ' ')" | tee -a "$O/record.txt"
grep -E "^\[  FAILED" "$O/decode_fp8_gpu_test.log" | head; grep -B2 -A6 "Failure" "$O/decode_fp8_gpu_test.log" | head -30
timeout 60 ./tests/api_fp8_kv_cache_test > "$O/api_fp8_kv_cache_test.log" 2>&1
echo "api_fp8_kv_cache_test rc=$? $(grep -E '^\[  (PASSED|FAILED)  \]' "$O/api_fp8_kv_cache_test.log" | tr '\n' ' ') skipped=$(grep -c '^\[  SKIPPED \] [A-Z]' "$O/api_fp8_kv_cache_test.log")" | tee -a "$O/record.txt"
timeout 120 ./bench/kernels_launch_sweep_bench --kv-cache-type fp8_e4m3 --commit "$COMMIT" \
  --table-out "$O/tc_fp8_launch_table.inc" --json-out "$O/kernels_launch_sweep_fp8.json" \
  > "$O/kernels_launch_sweep_fp8.txt" 2> "$O/kernels_launch_sweep_fp8.progress"
echo "sweep rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
cp "$O/tc_fp8_launch_table.inc" ../kernels/tc_fp8_launch_table.inc
timeout 60 cmake --build . -j16 --target kernels_decode_bench > "$O/build2.log" 2>&1
echo "rebuild with the swept table rc=$?" | tee -a "$O/record.txt"
timeout 120 ./bench/kernels_decode_bench \
  --benchmark_filter='BM_ReadCeiling|(mha_b32_h32_t4096_bs16|b1_h32_t65536|gqa32_8_b32_t4096|gqa64_8_b32_t4096|b1_h32_t4096|b32_h8_t128_d64_append)(_fp8)?/(default|split_kv_simt|simple)' \
  --benchmark_out="$O/kernels_decode_bench.json" --benchmark_out_format=json > "$O/kernels_decode_bench.txt" 2>&1
echo "bench rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
grep -E "median" "$O/kernels_decode_bench.txt" | sed -E 's/min_time.*manual_time_median//' | awk '{print $1, $2, $3}'
grep -iE "mismatch|error" "$O/kernels_decode_bench.txt" | head -5
timeout 60 ncu -k regex:TcDecode --launch-skip 3 --launch-count 1 --section SpeedOfLight \
  --section WarpStateStats --section Occupancy --section LaunchStats \
  ./bench/kernels_decode_bench --benchmark_filter="BM_Decode/gqa32_8_b32_t4096_fp8/default" \
  --benchmark_min_time=0.001s > "$O/ncu_gqa32_8_fp8.txt" 2>&1
echo "ncu rc=$?" | tee -a "$O/record.txt"
