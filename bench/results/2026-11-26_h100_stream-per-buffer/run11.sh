#!/bin/bash
# Eleventh device call (H100): with a stream per buffer the launcher's pack is the Runtime's
# limit at max batch 128; saturation with the default 3 pack helpers, with 6, and with 6 and 4
# pipeline buffers, alternating twice (no code change: the benchmark's --pack-threads/--buffers).
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; cd "$(dirname "$0")/../../.."
B=/tmp/attnrt-build-bench  # DCHECKS off
nvidia-smi --query-gpu=name,driver_version --format=csv > "$O/device.txt"
echo "commit $COMMIT, start $(date -u +%FT%TZ)" > "$O/record.txt"
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF > "$O/cfg.log" 2>&1
timeout 300 cmake --build $B -j16 --target api_host_path_bench > "$O/build.log" 2>&1
echo "build rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
for i in 1 2; do
  for cfg in "default:" "pack6:--pack-threads 6" "pack6_buf4:--pack-threads 6 --buffers 4"; do
    name=${cfg%%:*}; args=${cfg#*:}
    timeout 90 $B/bench/api_host_path_bench --sections saturation $args > "$O/${name}_$i.txt" 2>&1
    echo "$name run $i rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
    grep -E "saturation B|pieces, 1.5x" "$O/${name}_$i.txt" | tee -a "$O/record.txt"
  done
done
echo "end $(date -u +%FT%TZ)" >> "$O/record.txt"
