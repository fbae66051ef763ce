#!/bin/bash
# Tenth device call (H200): is the machine taking the runtime's CPU away? `vmstat 1` (its `st`
# column: time stolen by the hypervisor; `cs`: context switches) and /proc/stat's cpu lines
# around api_host_path_bench's saturation section (T=512), once.
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; cd "$(dirname "$0")/../../.."
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.total --format=csv > "$O/device.txt"
echo "commit $COMMIT, start $(date -u +%FT%TZ)" > "$O/record.txt"
nproc > "$O/cpu.txt"; lscpu >> "$O/cpu.txt" 2>&1
C="-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF"
cmake -S . -B build-h200 $C > /dev/null 2>&1
timeout 200 cmake --build build-h200 -j16 --target api_host_path_bench > /dev/null 2>&1; echo "build rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
grep '^cpu' /proc/stat > "$O/stat_before.txt"
vmstat -w 1 > "$O/vmstat.txt" 2>&1 &
V=$!
timeout 100 build-h200/bench/api_host_path_bench --sections saturation > "$O/sat.txt" 2>&1
echo "saturation rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
kill $V
grep '^cpu' /proc/stat > "$O/stat_after.txt"
grep -E "^saturation B=" "$O/sat.txt" | sed -e 's/(of batch.*x); //' -e 's/capacity .* 1.5x/1.5x/'
cat "$O/vmstat.txt" | head -40
paste <(head -1 "$O/stat_before.txt") <(head -1 "$O/stat_after.txt")
echo "end $(date -u +%FT%TZ)" >> "$O/record.txt"
