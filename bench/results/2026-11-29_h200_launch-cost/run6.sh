#!/bin/bash
# Sixth device call (H200): the metadata copy of only the needed blocks (a kernel node instead
# of a memcpy node past 64 KB). The kernel test, the executor's and the Runtime's GPU tests,
# memcheck over the kernel test and the executor's parts test; then the saturation section at
# T=512 alternating the tree before it (.ab/old = c99da8b) and this one, twice, and the lone
# staged pieces of both (--lone-ab: the graph launch call's host time).
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; cd "$(dirname "$0")/../../.."
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.total --format=csv > "$O/device.txt"
echo "commit $COMMIT (old: c99da8b in .ab/old), start $(date -u +%FT%TZ)" > "$O/record.txt"
C="-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF"
cmake -S . -B build-h200 $C > "$O/cfg.log" 2>&1
(cd .ab/old && cmake -S . -B build-h200 $C > "$O/cfg_old.log" 2>&1)
timeout 300 cmake --build build-h200 -j16 --target api_host_path_bench cuda_executor_gpu_test batch_io_test api_runtime_gpu_test api_device_memory_gpu_test api_wiring_gpu_test > "$O/build.log" 2>&1; echo "build rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
(cd .ab/old && timeout 300 cmake --build build-h200 -j16 --target api_host_path_bench > "$O/build_old.log" 2>&1); echo "build old rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
for t in batch_io_test cuda_executor_gpu_test api_runtime_gpu_test api_device_memory_gpu_test api_wiring_gpu_test; do
  timeout 200 build-h200/tests/$t > "$O/$t.txt" 2>&1; echo "$t rc=$? $(grep -E 'PASSED|FAILED' "$O/$t.txt" | head -2 | tr '\n' ' ')" | tee -a "$O/record.txt"
done
timeout 120 compute-sanitizer --tool memcheck --error-exitcode 9 build-h200/tests/batch_io_test > "$O/memcheck_batch_io.txt" 2>&1; echo "memcheck batch_io rc=$?" | tee -a "$O/record.txt"
timeout 150 compute-sanitizer --tool memcheck --error-exitcode 9 build-h200/tests/cuda_executor_gpu_test --gtest_filter='*InParts*:*Staged*' > "$O/memcheck_executor.txt" 2>&1; echo "memcheck executor rc=$?" | tee -a "$O/record.txt"
for round in 1 2; do
  (cd .ab/old && timeout 100 build-h200/bench/api_host_path_bench --sections saturation > "$O/saturation_old_$round.txt" 2>&1); echo "old $round rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
  timeout 100 build-h200/bench/api_host_path_bench --sections saturation > "$O/saturation_new_$round.txt" 2>&1; echo "new $round rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
done
echo "end $(date -u +%FT%TZ)" >> "$O/record.txt"
for f in "$O"/saturation_*.txt; do echo "== $f"; grep -E "^saturation B=128" "$f" | cut -c1-300; grep -E "pieces, 70% load, run" "$f" | grep "requests 128" | grep -oE "launch [0-9.]+ \(the graph launch [0-9.]+\), gpu [0-9.]+"; grep -oE "CPU stolen by the hypervisor [0-9]+ ms" "$f" | tail -3 | tr '\n' ' '; echo; done
tar -czf "$O.tgz" -C "$(dirname "$O")" "$(basename "$O")" && rm -rf "$O"
