#!/bin/bash
# First device call (H200): where a small-batch split-KV step's time goes, CTA by CTA
# (bench/kernels_cta_trace_bench: the tensor-core kernel's phase stamps). B=1 H32 D128 over
# contexts, decode and append + decode, several launch configurations at T=4096, GQA 32/8 at
# B=1 and B=32 for contrast; then the GPU tests of the kernel-node helper (0f03f3a) and the
# executor (not run on a GPU since).
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; cd "$(dirname "$0")/../../.."
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.total --format=csv > "$O/device.txt"
echo "commit $COMMIT, start $(date -u +%FT%TZ)" > "$O/record.txt"
C="-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF"
cmake -S . -B build-h200 $C > "$O/cfg.log" 2>&1
timeout 330 cmake --build build-h200 -j16 --target kernels_cta_trace_bench batch_io_test cuda_executor_gpu_test > "$O/build.log" 2>&1; echo "build rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
T=build-h200/bench/kernels_cta_trace_bench
$T --contexts 512,1024,2048,4096,16384,65536 --commit $COMMIT --json-out "$O/b1_decode.json" > "$O/b1_decode.txt" 2>&1; echo "b1 decode rc=$?" | tee -a "$O/record.txt"
$T --contexts 512,4096 --step append --commit $COMMIT --json-out "$O/b1_append.json" > "$O/b1_append.txt" 2>&1; echo "b1 append rc=$?" | tee -a "$O/record.txt"
$T --contexts 512,4096 --configs 8:0:256,8:0:128,8:0:512,4:0:256,4:0:128,2:0:128,8:2:256 --commit $COMMIT --json-out "$O/b1_configs.json" > "$O/b1_configs.txt" 2>&1; echo "b1 configs rc=$?" | tee -a "$O/record.txt"
$T --kv-heads 8 --contexts 4096 --commit $COMMIT --json-out "$O/gqa_b1.json" > "$O/gqa_b1.txt" 2>&1; echo "gqa b1 rc=$?" | tee -a "$O/record.txt"
$T --kv-heads 8 --batch 32 --contexts 4096 --steps 8 --commit $COMMIT --json-out "$O/gqa_b32.json" > "$O/gqa_b32.txt" 2>&1; echo "gqa b32 rc=$?" | tee -a "$O/record.txt"
$T --batch 32 --contexts 4096 --steps 8 --commit $COMMIT --json-out "$O/mha_b32.json" > "$O/mha_b32.txt" 2>&1; echo "mha b32 rc=$?" | tee -a "$O/record.txt"
for t in batch_io_test cuda_executor_gpu_test; do
  timeout 150 build-h200/tests/$t > "$O/$t.txt" 2>&1; echo "$t rc=$? $(grep -E 'PASSED|FAILED' "$O/$t.txt" | head -2 | tr '\n' ' ')" | tee -a "$O/record.txt"
done
echo "end $(date -u +%FT%TZ)" >> "$O/record.txt"
cat "$O"/b1_*.txt "$O"/gqa_*.txt "$O"/mha_b32.txt | cut -c1-900
tar -czf "$O.tgz" -C "$(dirname "$O")" "$(basename "$O")" && rm -rf "$O"
