#!/bin/bash
# Sixth device call (H100): b0d52ac (the batching thread polls only a window's last batcher_spin
# while requests wait for it) against bb67a02 (polls the first batcher_spin of every wait),
# alternating twice, the whole api_host_path_bench (B=1 rows, host CPU with the per-thread
# split, saturation at max batch 32 and 128); each run of the new code writes summary.json.
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; cd "$(dirname "$0")/../../.."
NEW=/tmp/attnrt-build-new; OLD=/tmp/attnrt-build-old  # DCHECKS off
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > "$O/device.txt"
echo "commit $COMMIT (old: bb67a02), start $(date -u +%FT%TZ)" > "$O/record.txt"
cmake -S . -B $NEW -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF > "$O/cfg.log" 2>&1
cmake -S old_tree -B $OLD -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF > "$O/cfg_old.log" 2>&1
timeout 300 cmake --build $NEW -j16 --target api_host_path_bench > "$O/build.log" 2>&1
echo "build rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
timeout 200 cmake --build $OLD -j16 --target api_host_path_bench > "$O/build_old.log" 2>&1
echo "build old rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
for i in 1 2; do
  for v in old new; do
    if [ $v = new ]; then
      mkdir -p "$O/new_$i"
      timeout 150 $NEW/bench/api_host_path_bench --out "$O/new_$i" --commit $COMMIT > "$O/new_$i/host_path.txt" 2>&1
      echo "new run $i rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
      F="$O/new_$i/host_path.txt"
    else
      timeout 150 $OLD/bench/api_host_path_bench > "$O/old_$i.txt" 2>&1
      echo "old run $i rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
      F="$O/old_$i.txt"
    fi
    grep -E "runtime B=1 graph|host cpu per request|by thread|saturation B|pieces, 1.5x|pieces, 70" "$F" | tee -a "$O/record.txt"
  done
done
echo "end $(date -u +%FT%TZ)" >> "$O/record.txt"
