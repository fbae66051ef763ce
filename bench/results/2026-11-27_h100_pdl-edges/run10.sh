#!/bin/bash
# Tenth device call (H100): two full api_host_path_bench records of this tree on a machine that
# ran nothing else first (r7's and r9's each followed a compute-sanitizer run stopped at its
# time limit).
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; D=$(cd "$(dirname "$0")" && pwd); cd "$D/../../.."
B=/tmp/attnrt-build  # DCHECKS off
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > "$O/device.txt"
echo "commit $COMMIT, start $(date -u +%FT%TZ)" > "$O/record.txt"
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF > "$O/cfg.log" 2>&1
timeout 240 cmake --build $B -j16 --target api_host_path_bench > "$O/build.log" 2>&1
echo "build rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
for r in run_1 run_2; do
  timeout 150 $B/bench/api_host_path_bench --out "$O/$r" --commit $COMMIT > "$O/$r.txt" 2>&1
  echo "$r rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
  grep -E "^saturation B|^runtime B=1|executor Run  |host cpu per request at B=128" "$O/$r.txt" | tee -a "$O/record.txt"
done
echo "end $(date -u +%FT%TZ)" >> "$O/record.txt"
