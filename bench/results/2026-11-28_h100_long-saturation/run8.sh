#!/bin/bash
# Eighth device call (H100): tune_window --criteria at T=4096 (256 sequences), max batch 32 and
# 128, as scripts/gpu-check.sh --phase criteria now runs it beside T=512.
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; D=$(cd "$(dirname "$0")" && pwd); cd "$D/../../.."
B=/tmp/attnrt-build  # DCHECKS off
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > "$O/device.txt"
echo "commit $COMMIT, start $(date -u +%FT%TZ)" > "$O/record.txt"
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF > "$O/cfg.log" 2>&1
timeout 150 cmake --build $B -j16 --target tune_window > "$O/build.log" 2>&1
echo "build rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
for b in 32 128; do
  timeout 60 $B/examples/tune_window --device cuda --no-sweep --criteria $b --criteria-window-us 200 \
    --duration 0.5 --context 4096 --sequences 256 --producers $((b >= 128 ? 8 : 4)) \
    > "$O/criteria_b${b}_t4096.txt" 2>&1
  echo "criteria b=$b rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
  tail -6 "$O/criteria_b${b}_t4096.txt" | tee -a "$O/record.txt"
done
echo "end $(date -u +%FT%TZ)" >> "$O/record.txt"
