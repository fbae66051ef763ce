#!/bin/bash
# First device call of the fifth 2026-11-29 session (H200): the host-path record of this tree
# (summary.json by api_host_path_bench), then whether the 70%-load runs' large late clusters
# (~262 k requests into a run at T=512: every one of the 1,024 sequences then at 768 tokens, and
# the run's 2^18th request) follow the lengths or the request count: the same saturation rows
# started at T=640 (768 tokens after 131 k requests) and T=384 (after 393 k, past a max batch 32
# run), each twice with the pass trace. Then the plan bench over many sequences on this host's CPU.
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; cd "$(dirname "$0")/../../.."
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.total --format=csv > "$O/device.txt"
echo "commit $COMMIT, start $(date -u +%FT%TZ)" > "$O/record.txt"
C="-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF"
cmake -S . -B build-h200 $C > "$O/cfg.log" 2>&1
timeout 300 cmake --build build-h200 -j16 --target api_host_path_bench runtime_plan_bench > "$O/build.log" 2>&1; echo "build rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
timeout 200 build-h200/bench/api_host_path_bench --out "$O/host_path" --commit "$COMMIT" > "$O/host_path.txt" 2>&1
echo "host path record rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
mv "$O/host_path.txt" "$O/host_path/" 2>/dev/null
grep -E "^runtime B=1 graph \(Decode\)|^floor B=1  |host cpu per request|^saturation B=" "$O/host_path/host_path.txt" | cut -c1-260
for T in 640 384 640 384; do
  timeout 120 build-h200/bench/api_host_path_bench --sections long --long-context $T --pass-trace > "$O/long_$T.$(date +%s).txt" 2>&1
  echo "long T=$T rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
done
for f in "$O"/long_*.txt; do echo "== $f"; grep -E "^saturation B=|70% load, run [0-9]: p99|host canary" "$f" | sed -e 's/tail: .*largest/largest/' | cut -c1-300; done
timeout 60 build-h200/bench/runtime_plan_bench --benchmark_filter='PlanFillSettle128Over' --benchmark_repetitions=3 > "$O/plan_bench.txt" 2>&1
echo "plan bench rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"; grep -E "Over/.*_median" "$O/plan_bench.txt"
echo "end $(date -u +%FT%TZ)" >> "$O/record.txt"
