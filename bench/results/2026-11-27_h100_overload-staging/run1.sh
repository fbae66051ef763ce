#!/bin/bash
# First device call (H100): the saturation section with the capacity measured on both paths
# (host-memory requests copied, requests staged in place), alternating the schedulers' mapped
# staging at its default (128 MiB: a 1.5x backlog spills onto the heap and the copy path) and
# at 2048 MiB (the whole 65,536-deep queue in mapped records: every piece in place).
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; D=$(cd "$(dirname "$0")" && pwd); cd "$D/../../.."
B=/tmp/attnrt-build  # DCHECKS off
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > "$O/device.txt"
echo "commit $COMMIT, start $(date -u +%FT%TZ)" > "$O/record.txt"
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF > "$O/cfg.log" 2>&1
timeout 240 cmake --build $B -j16 --target api_host_path_bench > "$O/build.log" 2>&1
echo "build rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
for r in 128_a 2048_a 128_b 2048_b; do
  mb=${r%_*}
  timeout 110 $B/bench/api_host_path_bench --out "$O/$r" --commit $COMMIT --sections saturation --mapped-staging-mb $mb > "$O/$r.txt" 2>&1
  echo "$r rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
  grep -E "^saturation B|capacity run|of the pieces" "$O/$r.txt" | tee -a "$O/record.txt"
done
echo "end $(date -u +%FT%TZ)" >> "$O/record.txt"
