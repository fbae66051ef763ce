#!/bin/bash
# Sixth device call (H200): SchedulerOptions::dispatch_when_idle (what is pending goes at once
# while nothing is in flight; the window holds requests back only behind a busy device) against
# the default, in api_host_path_bench's saturation sections (T=512 and T=4096), alternating twice.
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; cd "$(dirname "$0")/../../.."
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.total --format=csv > "$O/device.txt"
echo "commit $COMMIT, start $(date -u +%FT%TZ)" > "$O/record.txt"
C="-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF"
cmake -S . -B build-h200 $C > "$O/cfg.log" 2>&1
timeout 300 cmake --build build-h200 -j16 --target api_host_path_bench > "$O/build.log" 2>&1; echo "build rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
for i in 1 2; do
  for mode in default idle; do
    flag=""; [ $mode = idle ] && flag="--dispatch-when-idle"
    timeout 130 build-h200/bench/api_host_path_bench --sections saturation,long $flag > "$O/sat_${i}_$mode.txt" 2>&1
    echo "saturation $i $mode rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
    grep -E "^saturation B=" "$O/sat_${i}_$mode.txt" | sed -e 's/(of batch.*x); //' -e 's/capacity .* 1.5x/1.5x/'
  done
done
echo "end $(date -u +%FT%TZ)" >> "$O/record.txt"
