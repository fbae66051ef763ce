#!/bin/bash
# Second device call (issue 13): the swept FP8 launch table adopted; the FP8 test and bench rows
# again, and an Nsight Compute look at the FP8 kernel on the GQA and MHA shapes.
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; cd "$(dirname "$0")/../../.."
echo "commit $COMMIT, start $(date -u +%FT%TZ)" > "$O/record.txt"
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
  > "$O/cfg.log" 2>&1 || { echo "configure failed"; tail -20 "$O/cfg.log"; }
timeout 200 cmake --build build-gpu -j16 --target decode_fp8_gpu_test kernels_decode_bench > "$O/build.log" 2>&1
echo "build rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
cd build-gpu
timeout 60 ./tests/decode_fp8_gpu_test > "$O/decode_fp8_gpu_test.log" 2>&1
echo "decode_fp8_gpu_test rc=$? $(grep -E '^\[  (PASSED|FAILED)  \]' "$O/decode_fp8_gpu_test.log" | tr '\n' ' ')" | tee -a "$O/record.txt"
timeout 120 ./bench/kernels_decode_bench \
  --benchmark_filter='BM_ReadCeiling|(mha_b32_h32_t4096_bs16|b1_h32_t65536|gqa32_8_b32_t4096|gqa64_8_b32_t4096|b1_h32_t4096)(_fp8)?/default' \
  --benchmark_out="$O/kernels_decode_bench.json" --benchmark_out_format=json > "$O/kernels_decode_bench.txt" 2>&1
echo "bench rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
grep -E "median" "$O/kernels_decode_bench.txt" | sed -E 's/min_time.*manual_time_median//' | awk '{print $1, $2, $3}'
for s in gqa32_8_b32_t4096_fp8 mha_b32_h32_t4096_bs16_fp8 gqa32_8_b32_t4096; do
  timeout 100 ncu -k regex:TcDecode --launch-skip 3 --launch-count 1 --section SpeedOfLight \
    --section WarpStateStats --section Occupancy --section LaunchStats --section MemoryWorkloadAnalysis \
    ./bench/kernels_decode_bench --benchmark_filter="BM_Decode/$s/default" --benchmark_min_time=0.001s \
    > "$O/ncu_$s.txt" 2>&1
  echo "ncu $s rc=$?" | tee -a "$O/record.txt"
done
