#!/bin/bash
# First device call (H100): the host path's full record with the split-KV step reading and
# writing device-memory requests in place (not measured under load before): api_host_path_bench
# twice, each writing its summary.json; then memcheck over the executor's staging and chunk tests
# with the time left.
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; cd "$(dirname "$0")/../../.."
START=$(date +%s)
B=/tmp/attnrt-build  # DCHECKS off
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > "$O/device.txt"
echo "commit $COMMIT, start $(date -u +%FT%TZ)" > "$O/record.txt"
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF > "$O/cfg.log" 2>&1
timeout 240 cmake --build $B -j16 --target api_host_path_bench cuda_executor_gpu_test > "$O/build.log" 2>&1
echo "build rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
for r in run_1 run_2; do
  timeout 160 $B/bench/api_host_path_bench --out "$O/$r" --commit $COMMIT > "$O/$r.txt" 2>&1
  echo "$r rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
  grep -E "saturation B|pieces, 70|floor|B=1|per request" "$O/$r.txt" | head -30 | tee -a "$O/record.txt"
done
LEFT=$(( 585 - ($(date +%s) - START) ))
if [ $LEFT -gt 30 ]; then
  timeout $LEFT compute-sanitizer --tool memcheck --error-exitcode 9 $B/tests/cuda_executor_gpu_test --gtest_filter='*StagingMemoryRequestsRunInPlace*:*Chunk*' > "$O/memcheck_executor.txt" 2>&1
  echo "memcheck executor rc=$? (limit $LEFT s) $(grep -E 'ERROR SUMMARY' $O/memcheck_executor.txt | tail -1) $(grep -cE '^\[       OK' $O/memcheck_executor.txt) OK" | tee -a "$O/record.txt"
fi
echo "end $(date -u +%FT%TZ)" >> "$O/record.txt"
