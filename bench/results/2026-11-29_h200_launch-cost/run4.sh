#!/bin/bash
# Fourth device call (H200): the saturation section at T=512 alternating whole batches
# (--part-size 0) and parts (auto) twice more, at the tree whose queue delays no longer wrap;
# then the whole record (api_host_path_bench, parts by default) into host_path/summary.json.
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; cd "$(dirname "$0")/../../.."
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.total --format=csv > "$O/device.txt"
echo "commit $COMMIT, start $(date -u +%FT%TZ)" > "$O/record.txt"
C="-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF"
cmake -S . -B build-h200 $C > "$O/cfg.log" 2>&1
timeout 400 cmake --build build-h200 -j16 --target api_host_path_bench > "$O/build.log" 2>&1; echo "build rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
for round in 1 2; do
  for p in 0 -1; do
    timeout 100 build-h200/bench/api_host_path_bench --sections saturation --part-size $p > "$O/saturation_p${p}_$round.txt" 2>&1
    echo "saturation part-size $p round $round rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
  done
done
timeout 200 build-h200/bench/api_host_path_bench --out "$O/host_path" --commit "$COMMIT" > "$O/record_run.txt" 2>&1; echo "record rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
echo "end $(date -u +%FT%TZ)" >> "$O/record.txt"
for f in "$O"/saturation_*.txt; do echo "== $f"; grep -E "^saturation B=128|70% load, run [0-9]: p99|stolen" "$f" | sed -e 's/tail: [^;]*; largest: /L: /' -e 's/(latency max[^)]*)//g' -e 's/; the producers.*//' | grep -oE "^saturation B=128.*|run [0-9]: p99 [0-9]+ us|stolen by the hypervisor [0-9]+ ms"; done
cat "$O/host_path/summary.json" | head -30
tar -czf "$O.tgz" -C "$(dirname "$O")" "$(basename "$O")" && rm -rf "$O"
