#!/bin/bash
# Eighth device call (H200): the host-path record (summary.json written by api_host_path_bench)
# of this tree, then the saturation section once more with stationary lengths (forks staggered,
# --tokens-per-sequence 32). COMMIT is passed in: the device copy's git metadata named the
# session's first commit (aeb16c1) in r1-r7.
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; cd "$(dirname "$0")/../../.."
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.total --format=csv > "$O/device.txt"
echo "commit $COMMIT, start $(date -u +%FT%TZ)" > "$O/record.txt"
C="-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF"
cmake -S . -B build-h200 $C > "$O/cfg.log" 2>&1
timeout 300 cmake --build build-h200 -j16 --target api_host_path_bench > "$O/build.log" 2>&1; echo "build rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
timeout 200 build-h200/bench/api_host_path_bench --out "$O/host_path" --commit "$COMMIT" > "$O/host_path.txt" 2>&1
echo "host path record rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
mv "$O/host_path.txt" "$O/host_path/" 2>/dev/null
grep -E "^runtime B=1 graph \(Decode\)|^floor B=1  |host cpu per request|^saturation B=|host canary" "$O/host_path/host_path.txt" | cut -c1-260
timeout 100 build-h200/bench/api_host_path_bench --sections saturation --tokens-per-sequence 32 > "$O/sat_g32.txt" 2>&1
echo "saturation G=32 rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
grep -E "^saturation B=|70% load, run [0-9]: p99" "$O/sat_g32.txt" | sed -e 's/tail: .*; the producers/the producers/' | cut -c1-260
echo "end $(date -u +%FT%TZ)" >> "$O/record.txt"
