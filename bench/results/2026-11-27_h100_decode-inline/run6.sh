#!/bin/bash
# Sixth device call (H100): the Runtime's threaded tests after their helpers were shared
# (api_runtime_gpu_test, CUDA and CPU), and the scheduler's tests, at the session's final code.
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; cd "$(dirname "$0")/../../.."
B=/tmp/attnrt-build-tests  # DCHECKS on, as the README's test command builds
nvidia-smi --query-gpu=name,driver_version --format=csv > "$O/device.txt"
echo "commit $COMMIT, start $(date -u +%FT%TZ)" > "$O/record.txt"
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=ON > "$O/cfg.log" 2>&1
timeout 300 cmake --build $B -j16 --target api_runtime_gpu_test scheduler_test > "$O/build.log" 2>&1
echo "build rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
for t in api_runtime_gpu_test scheduler_test; do
  timeout 150 $B/tests/$t > "$O/$t.txt" 2>&1
  echo "$t rc=$? $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' $O/$t.txt | tr '\n' ' ')" | tee -a "$O/record.txt"
done
echo "end $(date -u +%FT%TZ)" >> "$O/record.txt"
