#!/bin/bash
# Seventh device call (H100): at max batch 32 the batching thread's host work per piece (plan 7,
# pack 41, launch 14 us) nearly fills the 69 us GPU step. Is the pack faster without the helper
# threads' hand-off? Saturation rows with pack_threads 0 and auto (3), alternating, three times.
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; cd "$(dirname "$0")/../../.."
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > "$O/device.txt"
echo "commit $COMMIT, start $(date -u +%FT%TZ)" > "$O/record.txt"
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF > "$O/cfg.log" 2>&1
timeout 200 cmake --build build-gpu -j16 --target api_host_path_bench > "$O/build.log" 2>&1
echo "build rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
for r in 1 2 3; do
  for p in 0 -1; do
    timeout 60 build-gpu/bench/api_host_path_bench --sections saturation --pack-threads $p > "$O/sat_p${p}_$r.txt" 2>&1
    echo "pack_threads $p round $r rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
  done
done
grep -H -E "pieces, (capacity|1.5x)|^saturation" "$O"/sat_*.txt | sed 's|.*/sat_||'
echo "end $(date -u +%FT%TZ)" >> "$O/record.txt"
