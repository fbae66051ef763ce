#!/bin/bash
# Fifth device call (H200): the host-path record twice (summary.json written by
# api_host_path_bench, one directory a run), its 70%-load p99s now three runs pooled, each
# without its first 20 ms (warm-up; the p99 with it recorded beside).
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; cd "$(dirname "$0")/../../.."
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.total --format=csv > "$O/device.txt"
echo "commit $COMMIT, start $(date -u +%FT%TZ)" > "$O/record.txt"
C="-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF"
cmake -S . -B build-h200 $C > "$O/cfg.log" 2>&1
timeout 300 cmake --build build-h200 -j16 --target api_host_path_bench > "$O/build.log" 2>&1; echo "build rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
for i in 1 2; do
  timeout 200 build-h200/bench/api_host_path_bench --out "$O/host_path_$i" --commit "$COMMIT" > "$O/host_path_$i.txt" 2>&1
  echo "host path record $i rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
  mv "$O/host_path_$i.txt" "$O/host_path_$i/"
  grep -E "^runtime B=1 graph \(Decode\)|^floor B=1  |host cpu per request|^saturation B=" "$O/host_path_$i/host_path_$i.txt"
done
echo "end $(date -u +%FT%TZ)" >> "$O/record.txt"
