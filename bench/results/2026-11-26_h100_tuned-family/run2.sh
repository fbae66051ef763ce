#!/bin/bash
# Second device call (H100): the new table (r1's sweep) compiled in. The kernel GPU tests (every
# row launches and matches the reference; the default variant plans each row's family), then
# the decode benchmark's default and split_kv_simt rows over the allocator's blocks against
# PyTorch SDPA in the same run.
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; cd "$(dirname "$0")/../../.."
B=/tmp/attnrt-build-bench
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > "$O/device.txt"
echo "commit $COMMIT, start $(date -u +%FT%TZ)" > "$O/record.txt"
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF > "$O/cfg.log" 2>&1
timeout 280 cmake --build $B -j16 --target decode_gpu_test decode_fp8_gpu_test launch_table_test kernels_decode_bench > "$O/build.log" 2>&1
echo "build rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
for t in launch_table_test decode_gpu_test decode_fp8_gpu_test; do
  timeout 150 $B/tests/$t > "$O/$t.log" 2>&1
  echo "$t rc=$? $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$O/$t.log" | tr '\n' ' ')" | tee -a "$O/record.txt"
done
timeout 200 $B/bench/kernels_decode_bench --blocks allocator \
  --benchmark_filter='BM_ReadCeiling|/default/|/split_kv_simt/' \
  --benchmark_out="$O/kernels_decode_bench.json" --benchmark_out_format=json > "$O/kernels_decode_bench.txt" 2>&1
echo "kernels_decode_bench rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
PYTHONUNBUFFERED=1 timeout 120 python3 bench/sdpa_compare.py --out "$O/sdpa_compare.json" \
  --gbench-json "$O/kernels_decode_bench.json" > "$O/sdpa_compare.txt" 2>&1
echo "sdpa_compare rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
echo "end $(date -u +%FT%TZ)" >> "$O/record.txt"
