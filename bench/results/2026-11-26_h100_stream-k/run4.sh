#!/bin/bash
# Fourth device call (H100). r3: the kernel loses 1.3-2.4% to shuffled blocks where the read
# probe loses 0.9% (4 KB chunks), and its ncu DRAM throughput is 85-90% against SDPA's 89-91%.
# Does a deeper per-warp ring (more bytes in flight) close it? The FP16 ring at 3 (today), 4 and
# 6 stages, each a build of its own (ATTNRT_TC_FP16_STAGES), the same sweep of every launch
# configuration, shuffled blocks.
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; cd "$(dirname "$0")/../../.."
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > "$O/device.txt"
echo "commit $COMMIT, start $(date -u +%FT%TZ)" > "$O/record.txt"
for S in 3 4 6; do
  ( cmake -S . -B build-s$S -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF \
      -DCMAKE_CUDA_FLAGS="-DATTNRT_TC_FP16_STAGES=$S" > "$O/cfg_s$S.log" 2>&1
    timeout 300 cmake --build build-s$S -j6 --target kernels_launch_sweep_bench > "$O/build_s$S.log" 2>&1
    echo "build s$S rc=$? at $(date -u +%T)" >> "$O/record.txt" ) &
done
wait
F="128:32:8:32;128:64:8:32;128:32:32:32;128:32:32:1"
for R in 3a 4 6 3b; do
  S=${R:0:1}
  timeout 100 build-s$S/bench/kernels_launch_sweep_bench --commit "$COMMIT s$S" --contexts 4096 \
    --families "$F" --json-out "$O/sweep_s$R.json" > "$O/sweep_s$R.txt" 2> "$O/sweep_s$R.progress"
  echo "sweep s$R rc=$? at $(date -u +%T)" >> "$O/record.txt"
  echo "== stages $R"; grep -A8 "^D    G" "$O/sweep_s$R.txt"
done
cat "$O/record.txt"
echo "end $(date -u +%FT%TZ)" >> "$O/record.txt"
