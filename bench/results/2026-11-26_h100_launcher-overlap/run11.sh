#!/bin/bash
# Eleventh device call (H100): the host path's record at the session's final code (the
# benchmark writes summary.json), after a saturation-only run for one more sample.
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; cd "$(dirname "$0")/../../.."
B=/tmp/attnrt-build-bench  # DCHECKS off
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > "$O/device.txt"
echo "commit $COMMIT, start $(date -u +%FT%TZ)" > "$O/record.txt"
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF > "$O/cfg.log" 2>&1
timeout 300 cmake --build $B -j16 --target api_host_path_bench > "$O/build.log" 2>&1
echo "build rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
timeout 100 $B/bench/api_host_path_bench --sections saturation > "$O/saturation_1.txt" 2>&1
echo "saturation rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
grep -E "pieces,|idle stream|capacity run|saturation B" "$O/saturation_1.txt" | tee -a "$O/record.txt"
mkdir -p "$O/host-path"
timeout 240 $B/bench/api_host_path_bench --out "$O/host-path" --commit $COMMIT > "$O/host-path/host_path.txt" 2>&1
echo "api_host_path_bench rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
grep -E "pieces,|idle stream|capacity run|saturation B|runtime B=1|host cpu per" "$O/host-path/host_path.txt" | tee -a "$O/record.txt"
cat "$O/host-path/summary.json" >> "$O/record.txt"
echo "end $(date -u +%FT%TZ)" >> "$O/record.txt"
