#!/bin/bash
# Second device call (H200): do the large late clusters at 1.5x the prefilled length go with the
# block tables' growth? Every table prefilled to T reallocated at 1.5 T (SequenceTable's growth
# rule); 6aa9b6e spreads that point over 1.5-2 T by sequence id. The saturation rows at T=640
# (where all three max batch 128 runs of r1 had their largest cluster at 460 ms, 1.5 T), old
# tree (.ab/old, 302b44f) and new alternating, twice; then the host-path record of the new tree.
# Everything lands in one tarball (the device tool returns at most 8 files).
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; cd "$(dirname "$0")/../../.."
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.total --format=csv > "$O/device.txt"
echo "commit $COMMIT (old: .ab/old = 302b44f), start $(date -u +%FT%TZ)" > "$O/record.txt"
C="-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF"
cmake -S . -B build-h200 $C > "$O/cfg.log" 2>&1
cmake -S .ab/old -B .ab/old/build-h200 $C > "$O/cfg_old.log" 2>&1
timeout 300 cmake --build build-h200 -j16 --target api_host_path_bench > "$O/build.log" 2>&1; echo "build rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
timeout 300 cmake --build .ab/old/build-h200 -j16 --target api_host_path_bench > "$O/build_old.log" 2>&1; echo "build old rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
for i in 1 2; do
  for side in old new; do
    B=build-h200/bench/api_host_path_bench; [ $side = old ] && B=.ab/old/build-h200/bench/api_host_path_bench
    timeout 120 $B --sections long --long-context 640 > "$O/long640_${side}_$i.txt" 2>&1
    echo "long T=640 $side $i rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
  done
done
timeout 200 build-h200/bench/api_host_path_bench --out "$O/host_path" --commit "$COMMIT" > "$O/host_path.txt" 2>&1
echo "host path record rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
mv "$O/host_path.txt" "$O/host_path/" 2>/dev/null
echo "end $(date -u +%FT%TZ)" >> "$O/record.txt"
for f in "$O"/long640_*.txt; do echo "== $f"; grep -E "^saturation B=|70% load, run [0-9]: p99" "$f" | sed -e 's/tail: [^;]*; largest: /L: /' -e 's/(latency max[^)]*)//g' -e 's/; the producers.*//' | cut -c1-220; done
grep -E "^runtime B=1 graph \(Decode\)|^floor B=1  |host cpu per request|^saturation B=" "$O/host_path/host_path.txt" | cut -c1-260
tar -czf "$O.tgz" -C "$(dirname "$O")" "$(basename "$O")" && rm -rf "$O"
