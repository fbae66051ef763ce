#!/bin/bash
# First device call (H200): where the 70%-load p99 at T=512 comes from. api_host_path_bench's
# saturation section (T=512, max batch 32 and 128) three times, each 70%-load run printing its
# requests over the bound clustered by arrival time (tools/late_clusters.h) and the load
# generator's own lateness.
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; cd "$(dirname "$0")/../../.."
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.total --format=csv > "$O/device.txt"
echo "commit $COMMIT, start $(date -u +%FT%TZ)" > "$O/record.txt"
C="-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF"
cmake -S . -B build-h200 $C > "$O/cfg.log" 2>&1
timeout 300 cmake --build build-h200 -j16 --target api_host_path_bench > "$O/build.log" 2>&1; echo "build rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
for i in 1 2 3; do
  timeout 90 build-h200/bench/api_host_path_bench --sections saturation > "$O/sat_$i.txt" 2>&1
  echo "saturation $i rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
  grep -E "70% load tail|^saturation B=" "$O/sat_$i.txt"
done
echo "end $(date -u +%FT%TZ)" >> "$O/record.txt"
