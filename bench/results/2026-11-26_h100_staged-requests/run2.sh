#!/bin/bash
# Second device call (H100): as r1, but the record pool no longer grows into staging (r1:
# cudaHostAlloc on the submit path stalled the producers and halved an overloaded scheduler);
# past the staged working set requests are staged on the heap and batches mix both kinds.
# The Runtime's GPU tests (the staged test's backlog now mixes), then --staging-ab.
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; cd "$(dirname "$0")/../../.."
source scripts/gpu-check.sh
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > "$O/device.txt"
echo "commit $COMMIT, start $(date -u +%FT%TZ)" > "$O/record.txt"
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF > "$O/cfg.log" 2>&1
timeout 240 cmake --build build-gpu -j16 --target api_host_path_bench api_runtime_gpu_test > "$O/build.log" 2>&1
echo "build rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
for t in api_runtime_gpu_test; do
  timeout 120 build-gpu/tests/$t > "$O/$t.log" 2>&1
  echo "$t rc=$? $(gtest_count "$O/$t.log" ran) ran, $(gtest_count "$O/$t.log" passed) passed; problem: $(gtest_problem "$O/$t.log")" | tee -a "$O/record.txt"
done
timeout 330 build-gpu/bench/api_host_path_bench --sections none --staging-ab --commit $COMMIT > "$O/staging_ab.txt" 2>&1
echo "api_host_path_bench --staging-ab rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
grep -E "^runtime B=1|^host cpu per request|^saturation B|pieces, 1.5x" "$O/staging_ab.txt"
echo "end $(date -u +%FT%TZ)" >> "$O/record.txt"
