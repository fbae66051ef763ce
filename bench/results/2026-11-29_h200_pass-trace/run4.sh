#!/bin/bash
# Fourth device call (H200): as run2.sh (saturation three times, the pass trace, the longest pieces),
# now with piece timings in a deque and a host canary beside each 70%-load run (a thread waking
# every 100 us, its wake-ups late by over 200 us logged): does a bad stretch stop it too?
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; cd "$(dirname "$0")/../../.."
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.total --format=csv > "$O/device.txt"
echo "commit $COMMIT, start $(date -u +%FT%TZ)" > "$O/record.txt"
C="-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF"
cmake -S . -B build-h200 $C > "$O/cfg.log" 2>&1
timeout 300 cmake --build build-h200 -j16 --target api_host_path_bench > "$O/build.log" 2>&1; echo "build rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
vmstat 1 > "$O/vmstat.txt" 2>&1 &
VM=$!
for i in 1 2 3; do
  timeout 150 build-h200/bench/api_host_path_bench --sections saturation --pass-trace > "$O/saturation_$i.txt" 2>&1
  echo "saturation $i rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
  grep -E "^saturation B=|70% load, run [0-9]: p99|batching thread|pieces over 1 ms|host canary" "$O/saturation_$i.txt" | cut -c1-640 | head -40
done
kill $VM
echo "end $(date -u +%FT%TZ)" >> "$O/record.txt"
