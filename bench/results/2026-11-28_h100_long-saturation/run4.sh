#!/bin/bash
# Fourth device call (H100): the busy-gather test again (its batches now staged first, then
# submitted back to back), then saturation with staged pieces in place always / only when idle
# at max batch 32 and 128, T=2048 and T=4096 (where to switch: r3 measured T=512 and 4096).
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; D=$(cd "$(dirname "$0")" && pwd); cd "$D/../../.."
B=/tmp/attnrt-build  # DCHECKS off
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > "$O/device.txt"
echo "commit $COMMIT, start $(date -u +%FT%TZ)" > "$O/record.txt"
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF > "$O/cfg.log" 2>&1
timeout 240 cmake --build $B -j16 --target api_host_path_bench cuda_executor_gpu_test > "$O/build.log" 2>&1
echo "build rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
timeout 200 $B/tests/cuda_executor_gpu_test --gtest_filter='*Staged*:*Busy*:*Pipelined*:*DeviceAndHost*:*Solo*' > "$O/executor_test.txt" 2>&1
echo "cuda_executor_gpu_test rc=$? $(grep -E '^\[  (PASSED|FAILED) |^\[  FAILED  \]' "$O/executor_test.txt" | tr '\n' ' ')" | tee -a "$O/record.txt"
for T in 2048 4096; do
  timeout 150 $B/bench/api_host_path_bench --sections none --in-place-ab --long-context $T > "$O/ab_t$T.txt" 2>&1
  echo "ab T=$T rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
  grep -E "^saturation B|capacity run|read and written in place|^\[" "$O/ab_t$T.txt" | tee -a "$O/record.txt"
done
echo "end $(date -u +%FT%TZ)" >> "$O/record.txt"
