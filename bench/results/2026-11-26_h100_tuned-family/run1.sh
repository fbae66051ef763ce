#!/bin/bash
# First device call (H100): the launch sweep with both kernel families (tensor cores and SIMT),
# append + decode, blocks placed by the KV cache's allocator: the table variant split_kv reads.
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; cd "$(dirname "$0")/../../.."
B=/tmp/attnrt-build-bench
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > "$O/device.txt"
echo "commit $COMMIT, start $(date -u +%FT%TZ)" > "$O/record.txt"
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF > "$O/cfg.log" 2>&1
timeout 260 cmake --build $B -j16 --target kernels_launch_sweep_bench > "$O/build.log" 2>&1
echo "build rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
timeout 420 $B/bench/kernels_launch_sweep_bench --commit "$COMMIT" \
  --table-out "$O/tc_launch_table.inc" --json-out "$O/kernels_launch_sweep.json" \
  > "$O/kernels_launch_sweep.txt" 2> "$O/kernels_launch_sweep.progress"
echo "sweep rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
grep "pick" "$O/kernels_launch_sweep.txt" | tee -a "$O/record.txt"
echo "end $(date -u +%FT%TZ)" >> "$O/record.txt"
