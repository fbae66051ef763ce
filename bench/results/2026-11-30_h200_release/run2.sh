#!/bin/bash
# Second device call (H200): release_probe.cu (why r1's launch-before-pack rows ran ~9 us slower).
set -u
O=$1; mkdir -p "$O"; cd "$(dirname "$0")"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$O/device.txt"
date -u +%FT%TZ >> "$O/device.txt"
nvcc -O2 -std=c++20 -arch=sm_90 release_probe.cu -o /tmp/release_probe > "$O/build.log" 2>&1
echo "build rc=$?" | tee "$O/record.txt"
timeout 120 /tmp/release_probe > "$O/probe.txt" 2>&1
echo "probe rc=$?" | tee -a "$O/record.txt"
cat "$O/probe.txt"
tar -czf "$O.tgz" -C "$(dirname "$O")" "$(basename "$O")" && rm -rf "$O"
