#!/bin/bash
# Ninth device call (H200): the plan's prefetches and the block allocator's huge pages (this tree)
# against f2f434f (.ab/head, r8's tree): section saturation (T=512), new then old, once each.
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; cd "$(dirname "$0")/../../.."
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.total --format=csv > "$O/device.txt"
echo "commit $COMMIT (old: f2f434f in .ab/head), start $(date -u +%FT%TZ)" > "$O/record.txt"
C="-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF"
cmake -S . -B build-h200 $C > "$O/cfg.log" 2>&1
cmake -S .ab/head -B .ab/build $C > "$O/cfg_old.log" 2>&1
(timeout 300 cmake --build build-h200 -j8 --target api_host_path_bench > "$O/build.log" 2>&1; echo "build new rc=$?" >> "$O/record.txt") &
(timeout 300 cmake --build .ab/build -j8 --target api_host_path_bench > "$O/build_old.log" 2>&1; echo "build old rc=$?" >> "$O/record.txt") &
wait; echo "builds done at $(date -u +%T)" | tee -a "$O/record.txt"; cat "$O/record.txt"
for i in 1; do
  for side in new old; do
    bin=build-h200/bench/api_host_path_bench; [ $side = old ] && bin=.ab/build/bench/api_host_path_bench
    timeout 60 $bin --sections saturation > "$O/sat_${i}_$side.txt" 2>&1
    echo "saturation $i $side rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
    grep -E "^saturation B=|scheduler's latency|pieces, 70% load, run 1" "$O/sat_${i}_$side.txt" | cut -c1-260 | sed -e 's/(of batch.*x); //' -e 's/capacity .* 1.5x/1.5x/' -e 's/tail: .*; the producers/the producers/'
  done
done
echo "end $(date -u +%FT%TZ)" >> "$O/record.txt"
