#!/bin/bash
# Second device call (H200): the graph-launch probe with programmatic edges, 768-byte kernel
# parameters and a graph shaped like the in-place step; lone staged pieces of 1, 32 and 128
# requests through Executor::Run (--lone-ab), each with the executor's host medians (plan,
# pack, launch, the graph launch call), beside the B=1 section.
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; cd "$(dirname "$0")/../../.."
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.total --format=csv > "$O/device.txt"
echo "commit $COMMIT, start $(date -u +%FT%TZ)" > "$O/record.txt"
C="-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF"
cmake -S . -B build-h200 $C > "$O/cfg.log" 2>&1
timeout 300 cmake --build build-h200 -j16 --target api_host_path_bench runtime_graph_launch_bench > "$O/build.log" 2>&1; echo "build rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
timeout 120 build-h200/bench/runtime_graph_launch_bench --benchmark_out="$O/graph_launch.json" --benchmark_out_format=json > "$O/graph_launch.txt" 2>&1
echo "graph launch rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
timeout 300 build-h200/bench/api_host_path_bench --sections b1 --lone-ab --out "$O/host_path" --commit "$COMMIT" > "$O/lone.txt" 2>&1
echo "lone rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
echo "end $(date -u +%FT%TZ)" >> "$O/record.txt"
grep -E "BM_" "$O/graph_launch.txt" | awk '{print $1, $NF, $(NF-1)}'
grep -E "^lone|floor|Decode|Run " "$O/lone.txt" | cut -c1-250
tar -czf "$O.tgz" -C "$(dirname "$O")" "$(basename "$O")" && rm -rf "$O"
