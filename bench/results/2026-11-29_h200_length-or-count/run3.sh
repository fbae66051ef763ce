#!/bin/bash
# Third device call (H200): where the completion thread's 2 ms delays come from (r2's record:
# pieces "taken" 2.3 ms after launch with a quiet host canary). The saturation section at
# T=512 (each run's longest pieces now with the previous batch's Settle and done callback, and
# the previous piece's wait), then the rows at T=640 once more (the growth change).
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; cd "$(dirname "$0")/../../.."
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.total --format=csv > "$O/device.txt"
echo "commit $COMMIT, start $(date -u +%FT%TZ)" > "$O/record.txt"
C="-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF"
cmake -S . -B build-h200 $C > "$O/cfg.log" 2>&1
timeout 300 cmake --build build-h200 -j16 --target api_host_path_bench > "$O/build.log" 2>&1; echo "build rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
for s in "--sections saturation" "--sections long --long-context 640" "--sections saturation"; do
  n=$(echo $s | tr -c 'a-z0-9\n' '_')
  timeout 150 build-h200/bench/api_host_path_bench $s > "$O/$n.$(date +%s).txt" 2>&1
  echo "$s rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
done
echo "end $(date -u +%FT%TZ)" >> "$O/record.txt"
for f in "$O"/__sections*.txt; do echo "== $f"; grep -E "^saturation B=|70% load, run [0-9]: p99|pieces over 1 ms" "$f" | sed -e 's/tail: [^;]*; largest: /L: /' -e 's/(latency max[^)]*)//g' -e 's/; the producers.*//' | cut -c1-700; done
tar -czf "$O.tgz" -C "$(dirname "$O")" "$(basename "$O")" && rm -rf "$O"
