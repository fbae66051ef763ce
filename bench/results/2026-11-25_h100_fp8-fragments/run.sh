#!/bin/bash
# One device call (issue 13): build, the FP8 and split_kv GPU tests, the FP8 launch sweep, the
# decode bench's FP8 rows and their FP16 peers, all on one GPU in one call.
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; cd "$(dirname "$0")/../../.."
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > "$O/device.txt"
echo "commit $COMMIT, start $(date -u +%FT%TZ)" > "$O/record.txt"
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
  > "$O/cfg.log" 2>&1 || { echo "configure failed"; tail -20 "$O/cfg.log"; }
timeout 260 cmake --build build-gpu -j16 --target decode_fp8_gpu_test decode_gpu_test \
  kernels_decode_bench kernels_launch_sweep_bench > "$O/build.log" 2>&1
echo "build rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
grep -E "error" "$O/build.log" | head -20
cd build-gpu
timeout 60 ./tests/decode_fp8_gpu_test > "$O/decode_fp8_gpu_test.log" 2>&1
echo "decode_fp8_gpu_test rc=$? $(grep -E '^\[  (PASSED|FAILED)  \]' "$O/decode_fp8_gpu_test.log" | tr '\n' ' ')" | tee -a "$O/record.txt"
grep -E "Failure|FAILED|max_abs|Expected|Which is" "$O/decode_fp8_gpu_test.log" | head -20
timeout 90 ./tests/decode_gpu_test --gtest_filter='*SplitKv*:*split_kv*:TunedLaunchTableTest.*' > "$O/decode_gpu_test.log" 2>&1
echo "decode_gpu_test (split_kv filter) rc=$? $(grep -E '^\[  (PASSED|FAILED)  \]' "$O/decode_gpu_test.log" | tr '\n' ' ')" | tee -a "$O/record.txt"
timeout 150 ./bench/kernels_launch_sweep_bench --kv-cache-type fp8_e4m3 --commit "$COMMIT" \
  --table-out "$O/tc_fp8_launch_table.inc" --json-out "$O/kernels_launch_sweep_fp8.json" \
  > "$O/kernels_launch_sweep_fp8.txt" 2> "$O/kernels_launch_sweep_fp8.progress"
echo "sweep rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
timeout 150 ./bench/kernels_decode_bench \
  --benchmark_filter='BM_ReadCeiling|(mha_b32_h32_t4096_bs16|b1_h32_t65536|gqa32_8_b32_t4096|b1_h32_t4096|b32_h8_t128_d64_append)(_fp8)?/default' \
  --benchmark_out="$O/kernels_decode_bench.json" --benchmark_out_format=json > "$O/kernels_decode_bench.txt" 2>&1
echo "bench rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
grep -E "BM_" "$O/kernels_decode_bench.txt" | head -30
