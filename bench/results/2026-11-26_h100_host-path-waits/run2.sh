#!/bin/bash
# Second device call: run1's full api_host_path_bench stopped (its 280 s limit) in the host-CPU
# run with device-memory requests. That section alone, with a watchdog that takes every thread's
# backtrace (cuda-gdb) if it is still running after 90 s; then the saturation section.
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; cd "$(dirname "$0")/../../.."
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > "$O/device.txt"
echo "commit $COMMIT, start $(date -u +%FT%TZ)" > "$O/record.txt"
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF > "$O/cfg.log" 2>&1
timeout 200 cmake --build build-gpu -j16 --target api_host_path_bench > "$O/build.log" 2>&1
echo "build rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
watch() {  # $1 name, $2 seconds, rest: command
  local name=$1 limit=$2; shift 2
  "$@" > "$O/$name.txt" 2>&1 &
  local pid=$! i
  for i in $(seq 1 $limit); do sleep 1; kill -0 $pid 2>/dev/null || break; done
  if kill -0 $pid 2>/dev/null; then
    echo "$name still running after $limit s: backtraces" | tee -a "$O/record.txt"
    timeout 60 cuda-gdb -batch -p $pid -ex "info threads" -ex "thread apply all bt 25" > "$O/${name}_bt.txt" 2>&1
    kill -9 $pid
  fi
  wait $pid; echo "$name rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
}
watch host 90 build-gpu/bench/api_host_path_bench --sections host
cat "$O/host.txt"
watch saturation 200 build-gpu/bench/api_host_path_bench --sections saturation
cat "$O/saturation.txt"
grep -E "^Thread|^#[0-9]" "$O"/*_bt.txt 2>/dev/null | grep -v "libc.so\|pthread" | head -80
echo "end $(date -u +%FT%TZ)" >> "$O/record.txt"
