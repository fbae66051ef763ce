#!/bin/bash
# Third device call (H200): as r2, the 70%-load line followed by its first 8 ms in 1 ms bins and
# each run's first four pieces; the host's load (uptime, top) before each run. Section
# saturation (T=512) twice.
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; cd "$(dirname "$0")/../../.."
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.total --format=csv > "$O/device.txt"
echo "commit $COMMIT, start $(date -u +%FT%TZ)" > "$O/record.txt"
C="-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF"
cmake -S . -B build-h200 $C > "$O/cfg.log" 2>&1
timeout 300 cmake --build build-h200 -j16 --target api_host_path_bench > "$O/build.log" 2>&1; echo "build rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
for i in 1 2; do
  { uptime; top -bn1 | head -15; } > "$O/load_$i.txt" 2>&1
  timeout 150 build-h200/bench/api_host_path_bench --sections saturation > "$O/sat_$i.txt" 2>&1
  echo "saturation $i rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
  grep -E "70% load (tail|start)|^saturation B=" "$O/sat_$i.txt"
done
echo "end $(date -u +%FT%TZ)" >> "$O/record.txt"
