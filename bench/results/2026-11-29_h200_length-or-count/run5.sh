#!/bin/bash
# Fifth device call (H200): do the runtime's threads wait for a CPU in the bad runs? The
# saturation section at T=512 twice, each 70%-load run now printing every thread's run-queue
# wait (tools/thread_waits.h, /proc/self/task/*/schedstat) beside its host canary; nproc and
# the load beside.
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; cd "$(dirname "$0")/../../.."
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.total --format=csv > "$O/device.txt"
{ nproc; cat /proc/loadavg; grep -c processor /proc/cpuinfo; cat /sys/fs/cgroup/cpu.max 2>/dev/null; } > "$O/cpus.txt"
echo "commit $COMMIT, start $(date -u +%FT%TZ)" > "$O/record.txt"
C="-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF"
cmake -S . -B build-h200 $C > "$O/cfg.log" 2>&1
timeout 300 cmake --build build-h200 -j16 --target api_host_path_bench > "$O/build.log" 2>&1; echo "build rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
for i in 1 2; do
  timeout 150 build-h200/bench/api_host_path_bench --sections saturation > "$O/saturation_$i.txt" 2>&1
  echo "saturation $i rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
done
echo "end $(date -u +%FT%TZ)" >> "$O/record.txt"
cat "$O/cpus.txt"
for f in "$O"/saturation_*.txt; do echo "== $f"; grep -E "^saturation B=|70% load, run [0-9]: p99|threads waiting|canary: [1-9]" "$f" | sed -e 's/tail: [^;]*; largest: /L: /' -e 's/(latency max[^)]*)//g' -e 's/; the producers.*//' | cut -c1-420; done
tar -czf "$O.tgz" -C "$(dirname "$O")" "$(basename "$O")" && rm -rf "$O"
