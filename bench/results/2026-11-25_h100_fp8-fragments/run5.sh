#!/bin/bash
# Fifth device call (issue 13): the three FP8 speed bars with their FP16 bases and PyTorch SDPA in
# one call (run4's bench hit its own time cap before writing its JSON).
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; cd "$(dirname "$0")/../../.."
echo "commit $COMMIT, start $(date -u +%FT%TZ)" > "$O/record.txt"
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 > "$O/cfg.log" 2>&1
timeout 150 cmake --build build-gpu -j16 --target kernels_decode_bench > "$O/build.log" 2>&1
echo "build rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
cd build-gpu
timeout 200 ./bench/kernels_decode_bench \
  --benchmark_filter='BM_ReadCeiling|(mha_b32_h32_t4096_bs16|b1_h32_t65536|gqa32_8_b32_t4096)(_fp8)?/default' \
  --benchmark_out="$O/kernels_decode_bench.json" --benchmark_out_format=json > "$O/kernels_decode_bench.txt" 2>&1
echo "bench rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
timeout 60 python3 ../bench/sdpa_compare.py --out "$O/sdpa_compare.json" --gbench-json "$O/kernels_decode_bench.json" \
  --shapes mha_b32_h32_t4096_bs16,b1_h32_t65536,gqa32_8_b32_t4096 > "$O/sdpa_compare.txt" 2>&1
echo "sdpa_compare rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
tail -30 "$O/sdpa_compare.txt"
