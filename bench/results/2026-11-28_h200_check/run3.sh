#!/bin/bash
# Third device call (H200): the tree with one launch table per GPU model (the H200's from r2's
# sweep, picked by the device's name). Builds every target (DCHECKS off); the tables' host test,
# the tuned-table GPU tests (every row of both models' tables against the reference; the default
# variant plans this device's rows); the default rows of kernels_decode_bench and the SDPA
# comparison (the runtime's own pick, no table copied in); then the host-path benchmark
# (summary.json, written by it). Outputs in one tarball.
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; cd "$(dirname "$0")/../../.."
B=$PWD/build-h200
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.total --format=csv > "$O/device.txt"
echo "commit $COMMIT, start $(date -u +%FT%TZ)" > "$O/record.txt"
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF > "$O/cfg.log" 2>&1
timeout 300 cmake --build $B -j16 -- -k 0 > "$O/build.log" 2>&1
echo "build rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
grep -E "error|FAILED" "$O/build.log" | head -20
timeout 30 $B/tests/launch_table_test > "$O/launch_table_test.log" 2>&1
echo "launch_table_test rc=$? $(grep -E '^\[  (PASSED|FAILED) ' "$O/launch_table_test.log" | tr '\n' ' ')" | tee -a "$O/record.txt"
timeout 150 $B/tests/decode_gpu_test --gtest_filter='TunedLaunchTableTest.*:Families/*' \
  > "$O/decode_gpu_test.log" 2>&1
echo "decode_gpu_test (tables, families) rc=$? $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$O/decode_gpu_test.log" | tr '\n' ' ')" | tee -a "$O/record.txt"
timeout 200 $B/bench/kernels_decode_bench --blocks allocator --benchmark_filter='BM_ReadCeiling|/default/' \
  --benchmark_out="$O/kernels_decode_bench.json" --benchmark_out_format=json > "$O/kernels_decode_bench.txt" 2>&1
echo "kernels_decode_bench rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
PYTHONUNBUFFERED=1 timeout 60 python3 bench/sdpa_compare.py --out "$O/sdpa_compare.json" \
  --gbench-json "$O/kernels_decode_bench.json" > "$O/sdpa_compare.txt" 2>&1
echo "sdpa_compare rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
grep -A18 "winner" "$O/sdpa_compare.txt"
mkdir -p "$O/host_path"
timeout 120 $B/bench/api_host_path_bench --out "$O/host_path" --commit $COMMIT > "$O/host_path/host_path.txt" 2>&1
echo "api_host_path_bench rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
cat "$O/host_path/summary.json"
echo "end $(date -u +%FT%TZ)" >> "$O/record.txt"
tar -C "$(dirname "$O")" -czf "$O.tgz" "$(basename "$O")" && rm -rf "$O"
