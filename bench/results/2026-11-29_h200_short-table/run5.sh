#!/bin/bash
# Fifth device call (H200, the session's last ~300 s): the open-batch bookkeeping of both
# executors in one helper (runtime/batch_plan.h OpenBatch): the CUDA executor's GPU tests
# (batches in parts among them) and the Runtime's wiring tests on the GPU, DCHECKs on.
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; cd "$(dirname "$0")/../../.."
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$O/device.txt"
echo "commit $COMMIT, start $(date -u +%FT%TZ)" > "$O/record.txt"
B=/tmp/build-dchecks
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=ON > "$O/cfg.log" 2>&1
timeout 150 cmake --build $B -j16 --target cuda_executor_gpu_test api_wiring_gpu_test > "$O/build.log" 2>&1
echo "build rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
for t in cuda_executor_gpu_test api_wiring_gpu_test; do
  timeout 45 $B/tests/$t > "$O/$t.txt" 2>&1
  echo "$t rc=$? $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$O/$t.txt" | tr '\n' ' ')" | tee -a "$O/record.txt"
done
echo "end $(date -u +%FT%TZ)" >> "$O/record.txt"
tar -czf "$O.tgz" -C "$(dirname "$O")" "$(basename "$O")" && rm -rf "$O"
