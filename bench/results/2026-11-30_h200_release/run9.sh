#!/bin/bash
# Ninth device call (H200): the host-path record at this commit (the prefetching kernels in):
# api_host_path_bench, every section, writing host_path/summary.json itself.
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; cd "$(dirname "$0")/../../.."
cmake -S . -B /tmp/rel -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF > "$O/cfg.log" 2>&1
timeout 200 cmake --build /tmp/rel -j16 --target api_host_path_bench > "$O/build.log" 2>&1
echo "build rc=$? at $(date -u +%T)" | tee "$O/record.txt"
timeout 200 /tmp/rel/bench/api_host_path_bench --out "$O/host_path" --commit "$COMMIT" > "$O/host_path.txt" 2>&1
echo "host_path rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
mv "$O/host_path.txt" "$O/host_path/" 2>/dev/null
grep -E "^floor B=1  |^runtime B=1 graph|host cpu per request at|^saturation B=" "$O/host_path/host_path.txt" | cut -c1-220
tar -czf "$O.tgz" -C "$(dirname "$O")" "$(basename "$O")" && rm -rf "$O"
