#!/bin/bash
# Fourth device call (H100): the bare B=1 step's GPU span alone, with the host writing its
# inputs and reading its outputs between replays (as the executor does), and the same with a
# write-combined input; beside the executor's timed Run piece: `--sections b1` twice.
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; D=$(cd "$(dirname "$0")" && pwd); cd "$D/../../.."
B=/tmp/attnrt-build
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > "$O/device.txt"
echo "commit $COMMIT, start $(date -u +%FT%TZ)" > "$O/record.txt"
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF > "$O/cfg.log" 2>&1
timeout 200 cmake --build $B -j16 --target api_host_path_bench > "$O/build.log" 2>&1
echo "build rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
for r in 1 2; do
  timeout 60 $B/bench/api_host_path_bench --sections b1 > "$O/b1_$r.txt" 2>&1
  echo "b1_$r rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
  grep -E "^floor B=1 |copy kernels|step, timed|executor Run|graph \(Decode\)|graph \(Submit" "$O/b1_$r.txt" | tee -a "$O/record.txt"
done
echo "end $(date -u +%FT%TZ)" >> "$O/record.txt"
