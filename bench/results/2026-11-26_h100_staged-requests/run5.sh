#!/bin/bash
# Fifth device call (H100): the host path's record at the new defaults (api_host_path_bench
# writes summary.json), then the decode kernels' default rows over the block tables the KV
# cache's allocator lays out (kernels_decode_bench --blocks allocator) against PyTorch SDPA.
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; cd "$(dirname "$0")/../../.."
B=/tmp/attnrt-build-bench  # DCHECKS off: not gpu-check's tree
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > "$O/device.txt"
echo "commit $COMMIT, start $(date -u +%FT%TZ)" > "$O/record.txt"
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF > "$O/cfg.log" 2>&1
timeout 240 cmake --build $B -j16 --target api_host_path_bench kernels_decode_bench > "$O/build.log" 2>&1
echo "build rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
mkdir -p "$O/host-path"
timeout 200 $B/bench/api_host_path_bench --out "$O/host-path" --commit $COMMIT > "$O/host-path/host_path.txt" 2>&1
echo "api_host_path_bench rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
timeout 230 $B/bench/kernels_decode_bench --blocks allocator --benchmark_filter='BM_ReadCeiling|/default/' \
  --benchmark_out="$O/kernels_decode_bench.json" --benchmark_out_format=json > "$O/kernels_decode_bench.txt" 2>&1
echo "kernels_decode_bench --blocks allocator rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
PYTHONUNBUFFERED=1 timeout 120 python3 bench/sdpa_compare.py --out "$O/sdpa_compare.json" \
  --gbench-json "$O/kernels_decode_bench.json" > "$O/sdpa_compare.txt" 2>&1
echo "sdpa_compare rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
grep -vE "^\s*$" "$O/host-path/host_path.txt" | grep -E "floor B=1 |runtime B=1|executor \(|host cpu per|saturation B" 
cat "$O/sdpa_compare.txt" | tail -30
echo "end $(date -u +%FT%TZ)" >> "$O/record.txt"
