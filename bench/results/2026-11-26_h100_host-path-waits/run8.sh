#!/bin/bash
# Eighth device call: the benchmark after its refactor (one Watchdog in tools/, one replay-timing
# loop): the floors, B=1 and host-CPU sections once.
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; cd "$(dirname "$0")/../../.."
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > "$O/device.txt"
echo "commit $COMMIT, start $(date -u +%FT%TZ)" > "$O/record.txt"
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF > "$O/cfg.log" 2>&1
timeout 200 cmake --build build-gpu -j16 --target api_host_path_bench > "$O/build.log" 2>&1
echo "build rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
timeout 120 build-gpu/bench/api_host_path_bench --sections b1,host > "$O/b1_host.txt" 2>&1
echo "b1+host rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
cat "$O/b1_host.txt"
echo "end $(date -u +%FT%TZ)" >> "$O/record.txt"
