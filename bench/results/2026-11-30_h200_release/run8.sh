#!/bin/bash
# Eighth device call (H200): the prefetching kernels against PyTorch SDPA in one call (the rows
# r6 moved, kernels_decode_bench from a Release build, then bench/sdpa_compare.py on its JSON),
# and the Runtime's B=1 rows (api_host_path_bench --sections b1) twice.
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; cd "$(dirname "$0")/../../.."
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$O/device.txt"
date -u +%FT%TZ >> "$O/device.txt"
cmake -S . -B /tmp/rel -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF > "$O/cfg.log" 2>&1
timeout 200 cmake --build /tmp/rel -j16 --target kernels_decode_bench api_host_path_bench > "$O/build.log" 2>&1
echo "build rc=$? at $(date -u +%T)" | tee "$O/record.txt"
S=b1_h32_t4096,b1_h32_t65536,gqa32_8_b32_t4096,b128_h32_t1024,b32_h8_t128_d64,mha_b32_h32_t4096_bs16
timeout 150 /tmp/rel/bench/kernels_decode_bench \
  --benchmark_filter='BM_ReadCeiling|/(b1_h32_t4096|b1_h32_t65536|gqa32_8_b32_t4096|b128_h32_t1024|b32_h8_t128_d64|mha_b32_h32_t4096_bs16)/default/' \
  --benchmark_out="$O/decode.json" --benchmark_out_format=json > "$O/decode.txt" 2>&1
echo "decode bench rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
PYTHONUNBUFFERED=1 timeout 150 python3 bench/sdpa_compare.py --out "$O/sdpa_compare.json" --gbench-json "$O/decode.json" \
  --shapes $S > "$O/sdpa_compare.txt" 2>&1
echo "sdpa rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
for i in 1 2; do
  timeout 40 /tmp/rel/bench/api_host_path_bench --sections b1 --commit $COMMIT > "$O/b1_$i.txt" 2>&1
  echo "b1 $i rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
done
tail -14 "$O/sdpa_compare.txt"
for f in "$O"/b1_?.txt; do echo "== $f"; grep -E "^floor B=1 |runtime B=1 graph|of Decode" "$f"; done
tar -czf "$O.tgz" -C "$(dirname "$O")" "$(basename "$O")" && rm -rf "$O"
