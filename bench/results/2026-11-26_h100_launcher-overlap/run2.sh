#!/bin/bash
# Second device call (H100): where the launcher's pack goes (q/k/v copies now timed apart; the
# piece's block rows under one table lock). Saturation at max batch 32 and 128 with the pack
# pool's helper threads at 0, auto (3) and 7; a one-thread copy study (pinned_copy.cu).
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; cd "$(dirname "$0")/../../.."
B=/tmp/attnrt-build-bench  # DCHECKS off
R=bench/results/2026-11-26_h100_launcher-overlap
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > "$O/device.txt"
echo "commit $COMMIT, start $(date -u +%FT%TZ), host cores $(nproc)" > "$O/record.txt"
lscpu | grep -E "Model name|^CPU\(s\)|NUMA node\(s\)|L3" >> "$O/record.txt"
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF > "$O/cfg.log" 2>&1
timeout 300 cmake --build $B -j16 --target api_host_path_bench cuda_executor_gpu_test > "$O/build.log" 2>&1
echo "build rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
nvcc -O2 -Xcompiler -mavx2 -o /tmp/pinned_copy $R/pinned_copy.cu && /tmp/pinned_copy > "$O/pinned_copy.txt" 2>&1
cat "$O/pinned_copy.txt" | tee -a "$O/record.txt"
timeout 60 $B/tests/cuda_executor_gpu_test --gtest_brief=1 --gtest_filter='*Pipelined*:*SequenceCalls*:*Split*' > "$O/cuda_executor_gpu_test.txt" 2>&1
echo "cuda_executor_gpu_test rc=$? $(grep -E '^\[  (PASSED|FAILED) ' "$O/cuda_executor_gpu_test.txt" | tr '\n' ' ')" | tee -a "$O/record.txt"
for p in 0 -1 7; do
  timeout 100 $B/bench/api_host_path_bench --sections saturation --pack-threads $p > "$O/saturation_pack$p.txt" 2>&1
  echo "pack threads $p rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
  grep -E "pieces|saturation B" "$O/saturation_pack$p.txt" | tee -a "$O/record.txt"
done
echo "end $(date -u +%FT%TZ)" >> "$O/record.txt"
