#!/bin/bash
# Seventh device call (H100): the session's last code (busy_pack_min_rows reverted after r6; the
# busy gather at its defaults). One full api_host_path_bench record (T=512 and T=4096 saturation
# rows), then the in-place A/B at T=4096 once more.
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; D=$(cd "$(dirname "$0")" && pwd); cd "$D/../../.."
B=/tmp/attnrt-build  # DCHECKS off
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > "$O/device.txt"
echo "commit $COMMIT, start $(date -u +%FT%TZ)" > "$O/record.txt"
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF > "$O/cfg.log" 2>&1
timeout 200 cmake --build $B -j16 --target api_host_path_bench > "$O/build.log" 2>&1
echo "build rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
timeout 150 $B/bench/api_host_path_bench --out "$O/run_1" --commit $COMMIT > "$O/run_1.txt" 2>&1
echo "run_1 rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
grep -E "^saturation B|capacity run|scheduled|prefilled|read and written in place|NOT OVERLOADED|^runtime B=1|executor Run  |host cpu per request at B=128|^\[" "$O/run_1.txt" | tee -a "$O/record.txt"
timeout 100 $B/bench/api_host_path_bench --sections none --in-place-ab --long-context 4096 > "$O/ab.txt" 2>&1
echo "ab rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
grep -E "^saturation B" "$O/ab.txt" | tee -a "$O/record.txt"
echo "end $(date -u +%FT%TZ)" >> "$O/record.txt"
