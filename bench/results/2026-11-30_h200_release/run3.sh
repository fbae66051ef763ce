#!/bin/bash
# Third device call (H200): pack_probe.cu (the host's cost of writing the pinned staging).
set -u
O=$1; mkdir -p "$O"; cd "$(dirname "$0")"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$O/device.txt"
date -u +%FT%TZ >> "$O/device.txt"
lscpu | grep -E "Model name|Socket|Thread|MHz" >> "$O/device.txt"
nvcc -O2 -std=c++20 -arch=sm_90 -Xcompiler -mavx2 pack_probe.cu -o /tmp/pack_probe > "$O/build.log" 2>&1
echo "build rc=$?" | tee "$O/record.txt"
timeout 120 /tmp/pack_probe > "$O/probe.txt" 2>&1
echo "probe rc=$?" | tee -a "$O/record.txt"
cat "$O/device.txt" "$O/probe.txt"
tar -czf "$O.tgz" -C "$(dirname "$O")" "$(basename "$O")" && rm -rf "$O"
