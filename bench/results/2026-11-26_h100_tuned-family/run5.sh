#!/bin/bash
# Fifth device call (H100): run4 with a skewed batch (1 x 32768 + rest x 512) scored with the long
# class in the sweep (r4 picked 2-warp CTAs for D=128 G=1 long plans, which doubled the skewed
# shape: 682 -> 1245 us). The sweep with two context classes (plans of max_kv_length <= 8192
# scored at 256-4096 tokens, the rest at 16K-64K), both families, allocator blocks, append +
# decode. Then, in the same call, its table compiled into this copy of the tree: the table's
# tests, the executor's two-class test, the default rows of the decode benchmark against SDPA.
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; cd "$(dirname "$0")/../../.."
B=/tmp/attnrt-build-bench
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > "$O/device.txt"
echo "commit $COMMIT, start $(date -u +%FT%TZ)" > "$O/record.txt"
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF > "$O/cfg.log" 2>&1
timeout 200 cmake --build $B -j16 --target kernels_launch_sweep_bench > "$O/build.log" 2>&1
echo "build rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
timeout 200 $B/bench/kernels_launch_sweep_bench --commit "$COMMIT" \
  --table-out "$O/tc_launch_table.inc" --json-out "$O/kernels_launch_sweep.json" \
  > "$O/kernels_launch_sweep.txt" 2> "$O/kernels_launch_sweep.progress"
echo "sweep rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
cp "$O/tc_launch_table.inc" kernels/tc_launch_table.inc
timeout 150 cmake --build $B -j16 --target launch_table_test decode_gpu_test cuda_executor_gpu_test \
  kernels_decode_bench > "$O/build2.log" 2>&1
echo "build with the new table rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
timeout 30 $B/tests/launch_table_test > "$O/launch_table_test.log" 2>&1
echo "launch_table_test rc=$?" | tee -a "$O/record.txt"
timeout 60 $B/tests/decode_gpu_test --gtest_filter='TunedLaunchTableTest.DefaultVariant*:Families/*' \
  > "$O/decode_gpu_test.log" 2>&1
echo "decode_gpu_test (table, families) rc=$? $(grep -E '^\[  (PASSED|FAILED) ' "$O/decode_gpu_test.log" | tr '\n' ' ')" | tee -a "$O/record.txt"
timeout 90 $B/tests/cuda_executor_gpu_test --gtest_filter='*SplitKvContextClasses*:*CapturedShortReplaysLong*' \
  > "$O/cuda_executor_gpu_test.log" 2>&1
echo "cuda_executor_gpu_test (classes) rc=$? $(grep -E '^\[  (PASSED|FAILED) ' "$O/cuda_executor_gpu_test.log" | tr '\n' ' ')" | tee -a "$O/record.txt"
timeout 240 $B/bench/kernels_decode_bench --blocks allocator --benchmark_filter='BM_ReadCeiling|/default/' \
  --benchmark_out="$O/kernels_decode_bench.json" --benchmark_out_format=json > "$O/kernels_decode_bench.txt" 2>&1
echo "kernels_decode_bench rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
PYTHONUNBUFFERED=1 timeout 90 python3 bench/sdpa_compare.py --out "$O/sdpa_compare.json" \
  --gbench-json "$O/kernels_decode_bench.json" > "$O/sdpa_compare.txt" 2>&1
echo "sdpa_compare rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
echo "end $(date -u +%FT%TZ)" >> "$O/record.txt"
