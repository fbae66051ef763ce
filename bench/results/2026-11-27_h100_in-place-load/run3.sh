#!/bin/bash
# Third device call (H100): the scheduler's mapped_staging_bytes. Saturation (max batch 32 and
# 128: 1.5x offered, and p99 at 70% load) with the default 128 MiB of staged records against the
# working set's records only (--mapped-staging-mb 0, the behaviour before), alternating, twice.
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; cd "$(dirname "$0")/../../.."
B=/tmp/attnrt-build  # DCHECKS off
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > "$O/device.txt"
echo "commit $COMMIT, start $(date -u +%FT%TZ)" > "$O/record.txt"
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF > "$O/cfg.log" 2>&1
timeout 240 cmake --build $B -j16 --target api_host_path_bench > "$O/build.log" 2>&1
echo "build rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
for r in 128_1 0_1 128_2 0_2; do
  timeout 75 $B/bench/api_host_path_bench --sections saturation --mapped-staging-mb ${r%_*} > "$O/sat_$r.txt" 2>&1
  echo "sat_$r rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
  grep -E "^saturation B|host-memory only" "$O/sat_$r.txt" | tee -a "$O/record.txt"
done
echo "end $(date -u +%FT%TZ)" >> "$O/record.txt"
