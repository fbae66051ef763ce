#!/bin/bash
# First device call (H100): is the GQA gap the wave's per-SM imbalance? The split_kv kernel's
# every launch configuration at T=4096 for B=32 (256 or 128 work items: 8 SMs hold one 4-warp
# CTA where the others hold two) against B=33 (264 / 132: every SM the same), MHA beside it.
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; cd "$(dirname "$0")/../../.."
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > "$O/device.txt"
echo "commit $COMMIT, start $(date -u +%FT%TZ)" > "$O/record.txt"
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF > "$O/cfg.log" 2>&1
timeout 250 cmake --build build-gpu -j16 --target kernels_launch_sweep_bench > "$O/build.log" 2>&1
echo "build rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
timeout 200 build-gpu/bench/kernels_launch_sweep_bench --commit $COMMIT --contexts 4096 \
  --families "128:32:8:32,33;128:32:4:32,33;128:32:32:32,33" --json-out "$O/sweep.json" > "$O/sweep.txt" 2> "$O/sweep.progress"
echo "sweep rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
cat "$O/sweep.txt"
echo "end $(date -u +%FT%TZ)" >> "$O/record.txt"
