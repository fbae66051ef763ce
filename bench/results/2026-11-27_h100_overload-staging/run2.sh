#!/bin/bash
# Second device call (H100): saturation with every record in mapped memory (2048 MiB), the
# schedulers' completion threads at 2 (default) and 4, and an open loop whose requests lie in
# device-visible memory (no copy at Submit or delivery).
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; D=$(cd "$(dirname "$0")" && pwd); cd "$D/../../.."
B=/tmp/attnrt-build  # DCHECKS off
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > "$O/device.txt"
echo "commit $COMMIT, start $(date -u +%FT%TZ)" > "$O/record.txt"
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF > "$O/cfg.log" 2>&1
timeout 240 cmake --build $B -j16 --target api_host_path_bench > "$O/build.log" 2>&1
echo "build rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
for r in ct2_a ct4_a dev_a ct4_b; do
  case $r in
    ct2*) flags="--completion-threads 2";;
    ct4*) flags="--completion-threads 4";;
    dev*) flags="--completion-threads 2 --device-memory-saturation";;
  esac
  timeout 100 $B/bench/api_host_path_bench --out "$O/$r" --commit $COMMIT --sections saturation --mapped-staging-mb 2048 $flags > "$O/$r.txt" 2>&1
  echo "$r ($flags) rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
  grep -E "^saturation B|capacity run" "$O/$r.txt" | tee -a "$O/record.txt"
done
echo "end $(date -u +%FT%TZ)" >> "$O/record.txt"
