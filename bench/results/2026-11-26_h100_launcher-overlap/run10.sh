#!/bin/bash
# Tenth device call (H100): does the stream run dry at 1.5x load? Each piece now records whether
# the previous one had already completed when it was launched (PieceTimings::
# launched_into_idle_stream); saturation twice with 3 pipeline buffers, once with 4.
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; cd "$(dirname "$0")/../../.."
B=/tmp/attnrt-build-bench  # DCHECKS off
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > "$O/device.txt"
echo "commit $COMMIT, start $(date -u +%FT%TZ)" > "$O/record.txt"
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF > "$O/cfg.log" 2>&1
timeout 300 cmake --build $B -j16 --target api_host_path_bench > "$O/build.log" 2>&1
echo "build rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
for run in "3 1" "3 2" "4 1"; do
  set -- $run
  timeout 100 $B/bench/api_host_path_bench --sections saturation --buffers $1 > "$O/saturation_b$1_$2.txt" 2>&1
  echo "buffers $1 round $2 rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
  grep -E "pieces,|idle stream|capacity run|saturation B" "$O/saturation_b$1_$2.txt" | tee -a "$O/record.txt"
done
echo "end $(date -u +%FT%TZ)" >> "$O/record.txt"
