#!/bin/bash
# Fifth device call (H200): early_meta_probe.cu (could the decode kernel read its row's length
# and table from the pinned staging before the copy-in kernel ends?).
set -u
O=$1; mkdir -p "$O"; cd "$(dirname "$0")"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$O/device.txt"
date -u +%FT%TZ >> "$O/device.txt"
nvcc -O2 -std=c++20 -arch=sm_90 early_meta_probe.cu -o /tmp/early_meta_probe > "$O/build.log" 2>&1
echo "build rc=$?" | tee "$O/record.txt"
timeout 120 /tmp/early_meta_probe > "$O/probe.txt" 2>&1
echo "probe rc=$?" | tee -a "$O/record.txt"
cat "$O/probe.txt"
tar -czf "$O.tgz" -C "$(dirname "$O")" "$(basename "$O")" && rm -rf "$O"
