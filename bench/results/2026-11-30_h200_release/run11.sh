#!/bin/bash
# Eleventh device call (H200): tail_probe.cu with two tiles in flight a warp (does claiming tiles from a per-item counter shorten a
# GQA-shaped step's one-wave tail?).
set -u
O=$1; mkdir -p "$O"; cd "$(dirname "$0")"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$O/device.txt"
date -u +%FT%TZ >> "$O/device.txt"
nvcc -O3 -std=c++20 -arch=sm_90 tail_probe.cu -o /tmp/tail_probe > "$O/build.log" 2>&1
echo "build rc=$?" | tee "$O/record.txt"
timeout 60 /tmp/tail_probe > "$O/probe.txt" 2>&1
echo "probe rc=$?" | tee -a "$O/record.txt"
cat "$O/probe.txt"
tar -czf "$O.tgz" -C "$(dirname "$O")" "$(basename "$O")" && rm -rf "$O"
