#!/bin/bash
# Second device call (H200): the launch-configuration sweep on this GPU (FP16, both families,
# two context classes, allocator blocks, append + decode: as the H100 table of 2026-11-26), its
# table compiled into this copy of the tree, the table's tests (every row against the reference),
# then the default rows of kernels_decode_bench and the SDPA comparison with that table. r1 is the
# same benchmark with the H100 table on this GPU kind (an earlier call). Outputs in one tarball.
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; cd "$(dirname "$0")/../../.."
B=$PWD/build-h200
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.total --format=csv > "$O/device.txt"
echo "commit $COMMIT, start $(date -u +%FT%TZ)" > "$O/record.txt"
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF > "$O/cfg.log" 2>&1
timeout 200 cmake --build $B -j16 --target kernels_launch_sweep_bench > "$O/build.log" 2>&1
echo "build rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
timeout 200 $B/bench/kernels_launch_sweep_bench --commit "$COMMIT" \
  --table-out "$O/tc_launch_table.inc" --json-out "$O/kernels_launch_sweep.json" \
  > "$O/kernels_launch_sweep.txt" 2> "$O/kernels_launch_sweep.progress"
echo "sweep rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
cp "$O/tc_launch_table.inc" kernels/tc_launch_table.inc
timeout 150 cmake --build $B -j16 --target launch_table_test decode_gpu_test kernels_decode_bench > "$O/build2.log" 2>&1
echo "build with the new table rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
timeout 30 $B/tests/launch_table_test > "$O/launch_table_test.log" 2>&1
echo "launch_table_test rc=$? $(grep -E '^\[  (PASSED|FAILED) ' "$O/launch_table_test.log" | tr '\n' ' ')" | tee -a "$O/record.txt"
timeout 90 $B/tests/decode_gpu_test --gtest_filter='TunedLaunchTableTest.*:Families/*' \
  > "$O/decode_gpu_test.log" 2>&1
echo "decode_gpu_test (table, families) rc=$? $(grep -E '^\[  (PASSED|FAILED) ' "$O/decode_gpu_test.log" | tr '\n' ' ')" | tee -a "$O/record.txt"
timeout 200 $B/bench/kernels_decode_bench --blocks allocator --benchmark_filter='BM_ReadCeiling|/default/' \
  --benchmark_out="$O/kernels_decode_bench.json" --benchmark_out_format=json > "$O/kernels_decode_bench.txt" 2>&1
echo "kernels_decode_bench rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
PYTHONUNBUFFERED=1 timeout 60 python3 bench/sdpa_compare.py --out "$O/sdpa_compare.json" \
  --gbench-json "$O/kernels_decode_bench.json" > "$O/sdpa_compare.txt" 2>&1
echo "sdpa_compare rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
echo "end $(date -u +%FT%TZ)" >> "$O/record.txt"
grep -A30 "winner" "$O/sdpa_compare.txt"
tar -C "$(dirname "$O")" -czf "$O.tgz" "$(basename "$O")" && rm -rf "$O"
