#!/bin/bash
# Fifth device call (H100): the host path's full record at the session's last code change
# (the planner, mapped_staging_bytes' 128 MiB default), written by the benchmark; a second run if
# the device time left allows.
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; cd "$(dirname "$0")/../../.."
START=$(date +%s)
B=/tmp/attnrt-build  # DCHECKS off
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > "$O/device.txt"
echo "commit $COMMIT, start $(date -u +%FT%TZ)" > "$O/record.txt"
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF > "$O/cfg.log" 2>&1
timeout 200 cmake --build $B -j16 --target api_host_path_bench > "$O/build.log" 2>&1
echo "build rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
for r in run_1 run_2; do
  LEFT=$(( 320 - ($(date +%s) - START) )); [ $LEFT -lt 110 ] && break
  timeout $LEFT $B/bench/api_host_path_bench --out "$O/$r" --commit $COMMIT > "$O/$r.txt" 2>&1
  echo "$r rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
  grep -E "^saturation B|^runtime B=1|host cpu per request at B=128" "$O/$r.txt" | tee -a "$O/record.txt"
done
echo "end $(date -u +%FT%TZ)" >> "$O/record.txt"
