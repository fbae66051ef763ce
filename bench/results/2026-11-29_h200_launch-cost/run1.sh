#!/bin/bash
# First device call (H200): what a graph launch costs the host by the graph's nodes
# (runtime_graph_launch_bench), and the saturation section at T=512 with --piece-log, whose
# pieces now time the cudaGraphLaunch call apart from the rest of their launch (11-20 us at
# max batch 32 and 128 in the last session, ~2.5 us at B=1).
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; cd "$(dirname "$0")/../../.."
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.total --format=csv > "$O/device.txt"
echo "commit $COMMIT, start $(date -u +%FT%TZ)" > "$O/record.txt"
C="-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF"
cmake -S . -B build-h200 $C > "$O/cfg.log" 2>&1
timeout 300 cmake --build build-h200 -j16 --target api_host_path_bench runtime_graph_launch_bench > "$O/build.log" 2>&1; echo "build rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
timeout 120 build-h200/bench/runtime_graph_launch_bench --benchmark_out="$O/graph_launch.json" --benchmark_out_format=json > "$O/graph_launch.txt" 2>&1
echo "graph launch rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
timeout 150 build-h200/bench/api_host_path_bench --sections saturation --piece-log "$O/pieces" > "$O/saturation.txt" 2>&1
echo "saturation rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
echo "end $(date -u +%FT%TZ)" >> "$O/record.txt"
cat "$O/graph_launch.txt" | grep -E "BM_|Run on"
grep -E "^saturation B=|70% load, run [0-9]: p99|medians: plan" "$O/saturation.txt" | sed -e 's/tail: [^;]*; largest: /L: /' -e 's/(latency max[^)]*)//g' -e 's/; the producers.*//' | cut -c1-400
tar -czf "$O.tgz" -C "$(dirname "$O")" "$(basename "$O")" && rm -rf "$O"
