#!/bin/bash
# Sixth device call (H100): the record. The full api_host_path_bench writing summary.json (now
# with the saturation also against the GPU's own bound), then a second full run for the spread.
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; cd "$(dirname "$0")/../../.."
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > "$O/device.txt"
echo "commit $COMMIT, start $(date -u +%FT%TZ)" > "$O/record.txt"
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF > "$O/cfg.log" 2>&1
timeout 200 cmake --build build-gpu -j16 --target api_host_path_bench > "$O/build.log" 2>&1
echo "build rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
mkdir -p "$O/summary"
timeout 150 build-gpu/bench/api_host_path_bench --out "$O/summary" --commit $COMMIT > "$O/host_path_full.txt" 2>&1
echo "full host path rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
cat "$O/host_path_full.txt"
timeout 150 build-gpu/bench/api_host_path_bench > "$O/host_path_full2.txt" 2>&1
echo "full host path (2) rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
grep -E "runtime B=1|A/B|floor B=1|host cpu per|^saturation" "$O/host_path_full2.txt"
echo "end $(date -u +%FT%TZ)" >> "$O/record.txt"
