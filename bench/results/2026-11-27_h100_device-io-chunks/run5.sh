#!/bin/bash
# Fifth device call (H100): memcheck over the chunk test (chunks of 64 rows), the lone-piece A/B
# again, then saturation (max batch 32 and 128) at the default (chunks of 64 rows) and with one
# chunk (--chunk-rows 0), alternating, twice.
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; cd "$(dirname "$0")/../../.."
B=/tmp/attnrt-build  # DCHECKS off
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > "$O/device.txt"
echo "commit $COMMIT, start $(date -u +%FT%TZ)" > "$O/record.txt"
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF > "$O/cfg.log" 2>&1
timeout 300 cmake --build $B -j16 --target api_host_path_bench cuda_executor_gpu_test > "$O/build.log" 2>&1
echo "build rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
timeout 120 compute-sanitizer --tool memcheck --error-exitcode 9 $B/tests/cuda_executor_gpu_test --gtest_filter='*Chunk*Rows64' > "$O/memcheck.txt" 2>&1
echo "memcheck rc=$? $(grep -E 'ERROR SUMMARY' $O/memcheck.txt | tail -1)" | tee -a "$O/record.txt"
timeout 120 $B/bench/api_host_path_bench --sections none --lone-ab > "$O/lone.txt" 2>&1
echo "lone rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
grep -E "^lone" "$O/lone.txt" | tee -a "$O/record.txt"
for r in 64_1 0_1 64_2 0_2; do
  timeout 70 $B/bench/api_host_path_bench --sections saturation --chunk-rows ${r%_*} > "$O/sat_$r.txt" 2>&1
  echo "sat_$r rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
  grep -E "saturation B|pieces, 70|idle stream" "$O/sat_$r.txt" | tee -a "$O/record.txt"
done
echo "end $(date -u +%FT%TZ)" >> "$O/record.txt"
