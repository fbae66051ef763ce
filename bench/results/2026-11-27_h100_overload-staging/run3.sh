#!/bin/bash
# Third device call (H100): two full api_host_path_bench records at the new defaults
# (max_queue_size 8192, mapped_staging_bytes auto: every queued request staged in mapped
# memory) and, between them, the saturation section with the open loop's requests in
# device-visible memory (a ring of distinct q/k/v/out rows; nothing copied at Submit or delivery).
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; D=$(cd "$(dirname "$0")" && pwd); cd "$D/../../.."
B=/tmp/attnrt-build  # DCHECKS off
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > "$O/device.txt"
echo "commit $COMMIT, start $(date -u +%FT%TZ)" > "$O/record.txt"
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF > "$O/cfg.log" 2>&1
timeout 240 cmake --build $B -j16 --target api_host_path_bench > "$O/build.log" 2>&1
echo "build rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
for r in run_1 device_memory run_2; do
  flags=""; [ $r = device_memory ] && flags="--sections saturation --device-memory-saturation"
  timeout 150 $B/bench/api_host_path_bench --out "$O/$r" --commit $COMMIT $flags > "$O/$r.txt" 2>&1
  echo "$r rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
  grep -E "^saturation B|capacity run|^runtime B=1|executor Run  |host cpu per request at B=128" "$O/$r.txt" | tee -a "$O/record.txt"
done
echo "end $(date -u +%FT%TZ)" >> "$O/record.txt"
