#!/bin/bash
# Fifth device call (H100): the record of this study. decode_gpu_test (the CTA-size guard of
# TcKernelForDim changed) and read_ceiling_gpu_test; then kernels_decode_bench (default and
# split_kv_simt rows, as 2026-11-25) with the new paged-ceiling counters, and sdpa_compare.py
# with its floor/SDPA column; then memcheck over the launch-configuration tests.
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; cd "$(dirname "$0")/../../.."
source scripts/gpu-check.sh
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > "$O/device.txt"
echo "commit $COMMIT, start $(date -u +%FT%TZ)" > "$O/record.txt"
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF > "$O/cfg.log" 2>&1
timeout 250 cmake --build build-gpu -j16 --target kernels_decode_bench decode_gpu_test read_ceiling_gpu_test > "$O/build.log" 2>&1
echo "build rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
for t in decode_gpu_test read_ceiling_gpu_test; do
  timeout 200 build-gpu/tests/$t > "$O/$t.log" 2>&1
  echo "$t rc=$? $(gtest_count "$O/$t.log" ran) ran, $(gtest_count "$O/$t.log" passed) passed; problem: $(gtest_problem "$O/$t.log")" | tee -a "$O/record.txt"
done
timeout 240 build-gpu/bench/kernels_decode_bench --benchmark_filter='BM_ReadCeiling|/(default|split_kv_simt)/' \
  --benchmark_out="$O/kernels_decode_bench.json" --benchmark_out_format=json > "$O/kernels_decode_bench.txt" 2>&1
echo "kernels_decode_bench rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
PYTHONUNBUFFERED=1 timeout 150 python3 bench/sdpa_compare.py --out "$O/sdpa_compare.json" \
  --gbench-json "$O/kernels_decode_bench.json" > "$O/sdpa_compare.txt" 2>&1
echo "sdpa_compare rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
timeout 100 compute-sanitizer --tool memcheck --print-limit 20 build-gpu/tests/decode_gpu_test \
  --gtest_filter='*LaunchConfig*:*TunedLaunch*' > "$O/memcheck_launch_config.log" 2>&1
echo "memcheck launch configs rc=$? $(grep -E 'ERROR SUMMARY' "$O/memcheck_launch_config.log") $(gtest_count "$O/memcheck_launch_config.log" passed) passed" | tee -a "$O/record.txt"
cat "$O/sdpa_compare.txt"
echo "end $(date -u +%FT%TZ)" >> "$O/record.txt"
