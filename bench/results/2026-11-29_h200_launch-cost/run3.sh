#!/bin/bash
# Third device call (H200): batches in parts (SubmitPart; the scheduler hands a forming batch's
# requests over part_size at a time, so the executor plans them during the window). The CUDA
# executor's GPU tests of parts and of the paths beside them, memcheck over the parts test, then
# the saturation section alternating whole batches (--part-size 0) and parts (auto: 32 at max
# batch 128; max batch 32 has none), twice.
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; cd "$(dirname "$0")/../../.."
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.total --format=csv > "$O/device.txt"
echo "commit $COMMIT, start $(date -u +%FT%TZ)" > "$O/record.txt"
C="-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF"
cmake -S . -B build-h200 $C > "$O/cfg.log" 2>&1
timeout 400 cmake --build build-h200 -j16 --target api_host_path_bench cuda_executor_gpu_test > "$O/build.log" 2>&1; echo "build rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
timeout 200 build-h200/tests/cuda_executor_gpu_test > "$O/gpu_test.txt" 2>&1; echo "gpu tests rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
timeout 150 compute-sanitizer --tool memcheck --error-exitcode 9 build-h200/tests/cuda_executor_gpu_test --gtest_filter='*InParts*' > "$O/memcheck.txt" 2>&1; echo "memcheck rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
for round in 1 2; do
  for p in 0 -1; do
    timeout 100 build-h200/bench/api_host_path_bench --sections saturation --part-size $p > "$O/saturation_p${p}_$round.txt" 2>&1
    echo "saturation part-size $p round $round rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
  done
done
echo "end $(date -u +%FT%TZ)" >> "$O/record.txt"
grep -E "PASSED|FAILED|tests ran" "$O/gpu_test.txt" | head -5; grep -E "ERROR SUMMARY" "$O/memcheck.txt"
for f in "$O"/saturation_*.txt; do echo "== $f"; grep -E "^saturation B=|medians: plan.*70% load" "$f" | sed -e 's/(latency max[^)]*)//g' | cut -c1-330; done
tar -czf "$O.tgz" -C "$(dirname "$O")" "$(basename "$O")" && rm -rf "$O"
