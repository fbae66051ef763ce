#!/bin/bash
# Fourth device call (H200): set_params_probe.cu, then the host-path record at this commit
# (api_host_path_bench, every section; it writes host_path/summary.json itself).
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; cd "$(dirname "$0")"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$O/device.txt"
date -u +%FT%TZ >> "$O/device.txt"
nvcc -O2 -std=c++20 -arch=sm_90 set_params_probe.cu -o /tmp/set_params_probe > "$O/probe_build.log" 2>&1
echo "probe build rc=$?" | tee "$O/record.txt"
timeout 60 /tmp/set_params_probe > "$O/set_params_probe.txt" 2>&1
echo "probe rc=$?" | tee -a "$O/record.txt"
cd ../../..
cmake -S . -B /tmp/b -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF > "$O/cfg.log" 2>&1
timeout 240 cmake --build /tmp/b -j16 --target api_host_path_bench > "$O/build.log" 2>&1
echo "build rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
timeout 280 /tmp/b/bench/api_host_path_bench --out "$O/host_path" --commit "$COMMIT" > "$O/host_path.txt" 2>&1
echo "host_path rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
mv "$O/host_path.txt" "$O/host_path/" 2>/dev/null
cat "$O/set_params_probe.txt"
grep -E "^floor B=1  |^runtime B=1 graph|host cpu per request|^saturation B=" "$O/host_path/host_path.txt" | cut -c1-200
cat "$O/host_path/summary.json" | head -3
tar -czf "$O.tgz" -C "$(dirname "$O")" "$(basename "$O")" && rm -rf "$O"
