#!/bin/bash
# Sixth device call (H200): as run5.sh, the generations now staggered (parents start new forks
# in turn, parents / 32 a round; r5 switched all 1,024 at once every 32 rounds). Fifth call:: the saturation section with the sequences growing a token a round
# through each run (--tokens-per-sequence 0, as every record before) and at stationary lengths
# (forks of the reset sequences, a generation every 32 rounds: the new default), alternating,
# twice; the host canary beside every 70%-load run.
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; cd "$(dirname "$0")/../../.."
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.total --format=csv > "$O/device.txt"
echo "commit $COMMIT, start $(date -u +%FT%TZ)" > "$O/record.txt"
C="-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF"
cmake -S . -B build-h200 $C > "$O/cfg.log" 2>&1
timeout 300 cmake --build build-h200 -j16 --target api_host_path_bench > "$O/build.log" 2>&1; echo "build rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
for i in 1 2; do
  for g in 0 32; do
    timeout 200 build-h200/bench/api_host_path_bench --sections saturation --tokens-per-sequence $g > "$O/sat_${i}_g$g.txt" 2>&1
    echo "saturation $i G=$g rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
    grep -E "^saturation B=|capacity run|70% load, run [0-9]: p99|host canary" "$O/sat_${i}_g$g.txt" | sed -e 's/tail: .*; the producers/the producers/' | cut -c1-300
  done
done
echo "end $(date -u +%FT%TZ)" >> "$O/record.txt"
