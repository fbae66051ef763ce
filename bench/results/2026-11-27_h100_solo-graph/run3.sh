#!/bin/bash
# Third device call (H100): what the per-piece timing events cost the saturation rows. The
# saturation section (max batch 32 and 128: capacity, 1.5x offered, p99 at 70% load) with the
# executors' record_timings on (the default, with the breakdown lines) and off
# (--untimed-saturation, the launch path a Runtime runs), alternating, twice.
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; cd "$(dirname "$0")/../../.."
B=/tmp/attnrt-build  # DCHECKS off
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > "$O/device.txt"
echo "commit $COMMIT, start $(date -u +%FT%TZ)" > "$O/record.txt"
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF > "$O/cfg.log" 2>&1
timeout 240 cmake --build $B -j16 --target api_host_path_bench > "$O/build.log" 2>&1
echo "build rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
for r in timed_1 untimed_1 timed_2 untimed_2; do
  FLAG=""; [ "${r%_*}" = untimed ] && FLAG=--untimed-saturation
  timeout 80 $B/bench/api_host_path_bench --sections saturation $FLAG > "$O/sat_$r.txt" 2>&1
  echo "sat_$r rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
  grep -E "^saturation B" "$O/sat_$r.txt" | tee -a "$O/record.txt"
done
echo "end $(date -u +%FT%TZ)" >> "$O/record.txt"
