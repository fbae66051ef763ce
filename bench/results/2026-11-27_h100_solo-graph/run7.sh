#!/bin/bash
# Seventh device call (H100): where `Executor::Run`'s B=1 time goes: the B=1 rows once more, now
# with Run's own timed row (its piece's plan, pack, launch, wait and copy-out medians).
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; cd "$(dirname "$0")/../../.."
B=/tmp/attnrt-build  # DCHECKS off
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > "$O/device.txt"
echo "commit $COMMIT, start $(date -u +%FT%TZ)" > "$O/record.txt"
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF > "$O/cfg.log" 2>&1
timeout 150 cmake --build $B -j16 --target api_host_path_bench > "$O/build.log" 2>&1
echo "build rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
timeout 60 $B/bench/api_host_path_bench --sections b1 > "$O/b1.txt" 2>&1
echo "b1 rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
grep -E -A4 "executor Run|pieces, B=1" "$O/b1.txt" | tee -a "$O/record.txt"
echo "end $(date -u +%FT%TZ)" >> "$O/record.txt"
