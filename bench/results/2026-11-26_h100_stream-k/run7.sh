#!/bin/bash
# Seventh device call (H100), after the review: api_host_path_bench's two floors now share one
# RoundTrip (buffers, stream, graph) and the split_kv ring depth is one constant. The B=1
# section (every floor, memcpy nodes and copy kernels) and the split_kv decode tests.
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; cd "$(dirname "$0")/../../.."
source scripts/gpu-check.sh
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > "$O/device.txt"
echo "commit $COMMIT, start $(date -u +%FT%TZ)" > "$O/record.txt"
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF > "$O/cfg.log" 2>&1
timeout 200 cmake --build build-gpu -j16 --target api_host_path_bench decode_gpu_test > "$O/build.log" 2>&1
echo "build rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
timeout 60 build-gpu/bench/api_host_path_bench --sections b1 --commit $COMMIT > "$O/host_path_b1.txt" 2>&1
echo "api_host_path_bench b1 rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
timeout 120 build-gpu/tests/decode_gpu_test --gtest_filter='*split_kv*:*LaunchConfig*:*TunedLaunch*' > "$O/decode_split_kv.log" 2>&1
echo "decode_gpu_test split_kv rc=$? $(gtest_count "$O/decode_split_kv.log" ran) ran, $(gtest_count "$O/decode_split_kv.log" passed) passed; problem: $(gtest_problem "$O/decode_split_kv.log")" | tee -a "$O/record.txt"
head -12 "$O/host_path_b1.txt"
echo "end $(date -u +%FT%TZ)" >> "$O/record.txt"
