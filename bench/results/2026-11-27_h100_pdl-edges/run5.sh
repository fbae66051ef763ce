#!/bin/bash
# Fifth device call (H100): which of the two programmatic edges of the executor's host graph
# pays (H2D copy kernel -> compute, compute -> D2H copy kernel): a temporary switch,
# ATTNRT_EXP_EDGES (bit 0: the H2D edge, bit 1: the D2H edge), `--sections b1` for 3, 0, 1, 2
# twice over.
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; D=$(cd "$(dirname "$0")" && pwd); cd "$D/../../.."
B=/tmp/attnrt-build
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > "$O/device.txt"
echo "commit $COMMIT, start $(date -u +%FT%TZ)" > "$O/record.txt"
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF > "$O/cfg.log" 2>&1
timeout 200 cmake --build $B -j16 --target api_host_path_bench > "$O/build.log" 2>&1
echo "build rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
for r in 3_1 0_1 1_1 2_1 3_2 0_2 1_2 2_2; do
  ATTNRT_EXP_EDGES=${r%_*} timeout 60 $B/bench/api_host_path_bench --sections b1 > "$O/b1_edges$r.txt" 2>&1
  echo "b1_edges$r rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
  grep -E "copy kernels  |step, timed  |executor Run|graph \(Decode\)" "$O/b1_edges$r.txt" | tee -a "$O/record.txt"
done
echo "end $(date -u +%FT%TZ)" >> "$O/record.txt"
