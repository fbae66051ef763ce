#!/bin/bash
# Fourth device call (H200): the open loops now leave their first 20 ms out of the percentiles
# (a warm-up, its p99 printed beside); is the batching thread's sleep behind the mid-run
# clusters of queued requests at max batch 32? Section saturation (T=512) with the default
# batcher_spin (auto: 100 us) and with 1 s (the thread polls throughout), alternating twice.
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; cd "$(dirname "$0")/../../.."
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.total --format=csv > "$O/device.txt"
echo "commit $COMMIT, start $(date -u +%FT%TZ)" > "$O/record.txt"
C="-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF"
cmake -S . -B build-h200 $C > "$O/cfg.log" 2>&1
timeout 300 cmake --build build-h200 -j16 --target api_host_path_bench > "$O/build.log" 2>&1; echo "build rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
for i in 1 2; do
  for spin in -1 1000000; do
    timeout 150 build-h200/bench/api_host_path_bench --sections saturation --batcher-spin-us $spin > "$O/sat_${i}_spin$spin.txt" 2>&1
    echo "saturation $i spin $spin rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
    grep -E "70% load (tail|start)|^saturation B=" "$O/sat_${i}_spin$spin.txt" | sed 's/; largest.*; the producers/; the producers/'
  done
done
echo "end $(date -u +%FT%TZ)" >> "$O/record.txt"
