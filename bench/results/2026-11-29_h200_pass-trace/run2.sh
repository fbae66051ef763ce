#!/bin/bash
# Second device call (H200): as run1.sh, the saturation section three times with the pass trace,
# now with each run's longest pieces stage by stage (a stall of milliseconds holding every batch
# slot); no host section.
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; cd "$(dirname "$0")/../../.."
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.total --format=csv > "$O/device.txt"
echo "commit $COMMIT, start $(date -u +%FT%TZ)" > "$O/record.txt"
C="-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF"
cmake -S . -B build-h200 $C > "$O/cfg.log" 2>&1
timeout 300 cmake --build build-h200 -j16 --target api_host_path_bench > "$O/build.log" 2>&1; echo "build rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
vmstat 1 > "$O/vmstat.txt" 2>&1 &
VM=$!
for i in 1 2 3; do
  timeout 150 build-h200/bench/api_host_path_bench --sections saturation --pass-trace > "$O/saturation_$i.txt" 2>&1
  echo "saturation $i rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
  grep -E "^saturation B=|70% load, run [0-9]: p99|batching thread|pieces over 1 ms" "$O/saturation_$i.txt" | cut -c1-640 | head -40
done
kill $VM
echo "end $(date -u +%FT%TZ)" >> "$O/record.txt"
