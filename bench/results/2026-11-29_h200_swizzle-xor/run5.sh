#!/bin/bash
# Fifth device call (H200): kDevice pointers checked against the device allocations seen before
# (cuMemGetAddressRange) instead of one cudaPointerGetAttributes per pointer. The executor's GPU
# tests (the new one included) and the Runtime's device-memory tests on the new build; then
# api_host_path_bench's host CPU section, 42f409d (.ab/head) and this tree alternating twice.
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; cd "$(dirname "$0")/../../.."
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.total --format=csv > "$O/device.txt"
echo "commit $COMMIT (+ working tree), start $(date -u +%FT%TZ)" > "$O/record.txt"
OLD=$PWD/.ab/head; cp -r .deps "$OLD/.deps"
C="-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF"
cmake -S . -B build-h200 $C > "$O/cfg.log" 2>&1
cmake -S "$OLD" -B "$OLD/build" $C >> "$O/cfg.log" 2>&1
(timeout 170 cmake --build "$OLD/build" -j6 --target api_host_path_bench > "$O/build_old.log" 2>&1; echo "build old rc=$? at $(date -u +%T)" >> "$O/record.txt") &
timeout 170 cmake --build build-h200 -j10 --target api_host_path_bench cuda_executor_gpu_test api_device_memory_gpu_test api_runtime_gpu_test > "$O/build.log" 2>&1; echo "build rc=$? at $(date -u +%T)" >> "$O/record.txt"
wait
cat "$O/record.txt"
mkdir -p "$O/tests"
for t in cuda_executor_gpu_test api_device_memory_gpu_test api_runtime_gpu_test; do
  timeout 120 build-h200/tests/$t > "$O/tests/$t.log" 2>&1 &
done
wait
for f in "$O"/tests/*.log; do echo "$(basename $f) $(grep -E '^\[  (PASSED|FAILED|SKIPPED) *\] [0-9]' $f | tr '\n' ' ')" | tee -a "$O/record.txt"; done
grep -E "KnownAllocation" "$O/tests/cuda_executor_gpu_test.log" | head -3
mkdir -p "$O/host"
for i in 1 2; do
  for side in old new; do
    b=build-h200; [ $side = old ] && b=$OLD/build
    timeout 40 $b/bench/api_host_path_bench --sections host > "$O/host/${side}_$i.txt" 2>&1
    echo "host $side $i rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
    grep -E "host cpu per request|by thread" "$O/host/${side}_$i.txt"
  done
done
echo "end $(date -u +%FT%TZ)" >> "$O/record.txt"
tar -C "$O" -czf "$O/p.tgz" host tests build.log build_old.log cfg.log && rm -rf "$O/host" "$O/tests" "$O"/build*.log "$O/cfg.log"
