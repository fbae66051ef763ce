#!/bin/bash
# Sixth device call (H100): saturation at max batch 32 and 128 with 3 and 4 pipeline buffers
# (batches in flight), alternating, three rounds: is the launcher far enough ahead of the GPU?
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; cd "$(dirname "$0")/../../.."
B=/tmp/attnrt-build-bench  # DCHECKS off
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > "$O/device.txt"
echo "commit $COMMIT, start $(date -u +%FT%TZ)" > "$O/record.txt"
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF > "$O/cfg.log" 2>&1
timeout 300 cmake --build $B -j16 --target api_host_path_bench > "$O/build.log" 2>&1
echo "build rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
for round in 1 2 3; do
  for buffers in 3 4; do
    timeout 100 $B/bench/api_host_path_bench --sections saturation --buffers $buffers > "$O/saturation_b${buffers}_$round.txt" 2>&1
    echo "round $round buffers $buffers rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
    grep -E "pieces,|capacity run|saturation B" "$O/saturation_b${buffers}_$round.txt" | tee -a "$O/record.txt"
  done
done
echo "end $(date -u +%FT%TZ)" >> "$O/record.txt"
