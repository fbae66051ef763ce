#!/bin/bash
# Ninth device call (H100): is zero-copy I/O (kernels on mapped pinned memory, no memcpy node)
# a faster B=1 round trip than the memcpy nodes? The floor both ways and the executor with a
# zero-copy request, in the B=1 section, three runs.
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; cd "$(dirname "$0")/../../.."
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > "$O/device.txt"
echo "commit $COMMIT, start $(date -u +%FT%TZ)" > "$O/record.txt"
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF > "$O/cfg.log" 2>&1
timeout 200 cmake --build build-gpu -j16 --target api_host_path_bench > "$O/build.log" 2>&1
echo "build rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
for r in 1 2 3; do
  timeout 60 build-gpu/bench/api_host_path_bench --b1-only > "$O/b1_$r.txt" 2>&1
  echo "b1 run $r rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
done
cat "$O/b1_1.txt"
grep -H -E "floor B=1|executor|runtime B=1" "$O"/b1_2.txt "$O"/b1_3.txt | sed 's|.*/b1_||'
echo "end $(date -u +%FT%TZ)" >> "$O/record.txt"
