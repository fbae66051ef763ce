#!/bin/bash
# Fourth device call (H200): the session's landed tree (8563b6e: Submit's fused copy-and-check,
# streaming stores for requests of 8 KiB or more; the pack's streaming copies of r3 reverted).
# Every test binary in shards, then the host-path record twice (summary.json written by
# api_host_path_bench, one directory a run).
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; cd "$(dirname "$0")/../../.."
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.total --format=csv > "$O/device.txt"
echo "commit $COMMIT, start $(date -u +%FT%TZ)" > "$O/record.txt"
C="-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF"
cmake -S . -B build-h200 $C > "$O/cfg.log" 2>&1
timeout 200 cmake --build build-h200 -j16 > "$O/build.log" 2>&1; echo "build rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
SHARD_TIMEOUT=140 timeout 170 scripts/gpu-test-shards.sh build-h200 "$O/tests" --jobs 8 > "$O/tests.txt" 2>&1
echo "gpu-test-shards rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
tail -1 "$O/tests.txt"; grep -v "rc=0" "$O/tests/summary.txt" | head
for i in 1 2; do
  timeout 120 build-h200/bench/api_host_path_bench --out "$O/host_path_$i" --commit "$COMMIT" > "$O/host_path_$i.txt" 2>&1
  echo "host path record $i rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
  mv "$O/host_path_$i.txt" "$O/host_path_$i/"
  grep -E "^runtime B=1 graph \(Decode\)|^floor B=1  |host cpu per request|^saturation B=" "$O/host_path_$i/host_path_$i.txt"
done
echo "end $(date -u +%FT%TZ)" >> "$O/record.txt"
tar -C "$O" -czf "$O/p.tgz" tests tests.txt build.log cfg.log && rm -rf "$O/tests" "$O/tests.txt" "$O/build.log" "$O/cfg.log"
