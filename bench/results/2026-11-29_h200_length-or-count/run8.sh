#!/bin/bash
# Eighth device call (H200): as r7 (the saturation section at T=512 twice with --piece-log), each
# 70%-load run now with every thread's page faults and the host's fault, huge-page and
# compaction counters and now the CPU time the hypervisor stole (r7: in the bad run the plans,
# packs and launches ran 4-14x slow for ~9 ms with no wait for a CPU and no page faults).
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; cd "$(dirname "$0")/../../.."
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.total --format=csv > "$O/device.txt"
echo "commit $COMMIT, start $(date -u +%FT%TZ)" > "$O/record.txt"
C="-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF"
cmake -S . -B build-h200 $C > "$O/cfg.log" 2>&1
timeout 300 cmake --build build-h200 -j16 --target api_host_path_bench > "$O/build.log" 2>&1; echo "build rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
for i in 1 2; do
  timeout 150 build-h200/bench/api_host_path_bench --sections saturation --piece-log "$O/pieces_$i" > "$O/saturation_$i.txt" 2>&1
  echo "saturation $i rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
done
nvidia-smi -q -d PERFORMANCE,CLOCK > "$O/nvidia-smi-after.txt" 2>&1; cat /sys/kernel/mm/transparent_hugepage/enabled /sys/kernel/mm/transparent_hugepage/defrag /sys/kernel/mm/transparent_hugepage/khugepaged/defrag > "$O/thp.txt" 2>&1
echo "end $(date -u +%FT%TZ)" >> "$O/record.txt"
for f in "$O"/saturation_*.txt; do echo "== $f"; grep -E "^saturation B=|70% load, run [0-9]: p99|threads waiting" "$f" | sed -e 's/tail: [^;]*; largest: /L: /' -e 's/(latency max[^)]*)//g' -e 's/; the producers.*//' | cut -c1-700; done
tar -czf "$O.tgz" -C "$(dirname "$O")" "$(basename "$O")" && rm -rf "$O"
