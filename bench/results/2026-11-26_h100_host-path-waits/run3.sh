#!/bin/bash
# Third device call: the host-CPU section hung in run1 (device-memory requests) and run2 (host
# memory, H200). Now the benchmark's own watchdog prints the scheduler's metrics and every named
# thread's state and system call when a run overstays. The host section twice, then saturation.
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; cd "$(dirname "$0")/../../.."
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > "$O/device.txt"
echo "commit $COMMIT, start $(date -u +%FT%TZ)" > "$O/record.txt"
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF > "$O/cfg.log" 2>&1
timeout 200 cmake --build build-gpu -j16 --target api_host_path_bench > "$O/build.log" 2>&1
echo "build rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
for i in 1 2; do
  timeout 110 build-gpu/bench/api_host_path_bench --sections host > "$O/host_$i.txt" 2>&1
  echo "host $i rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
  cat "$O/host_$i.txt"
done
timeout 230 build-gpu/bench/api_host_path_bench --sections saturation > "$O/saturation.txt" 2>&1
echo "saturation rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
cat "$O/saturation.txt"
echo "end $(date -u +%FT%TZ)" >> "$O/record.txt"
