#!/bin/bash
# Second device call: A/B of the merge in the decode kernel (working tree) against the previous
# commit's separate merge kernel (build-snap/old, 1512790) in one process run each, alone on the
# GPU: kernels_decode_bench rows (default dispatch) with PyTorch SDPA in the same call, then
# api_host_path_bench --quick (old, new); then compute-sanitizer over decode_gpu_test's
# cross-section (gpu-check's filter).
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; cd "$(dirname "$0")/../../.."
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > "$O/device.txt"
echo "commit $COMMIT (old: 1512790), start $(date -u +%FT%TZ)" > "$O/record.txt"
cfg() { cmake -S "$1" -B "$2" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF; }
cfg . build-gpu > "$O/cfg.log" 2>&1; cfg build-snap/old build-old > "$O/cfg_old.log" 2>&1
( timeout 300 cmake --build build-old -j6 --target kernels_decode_bench api_host_path_bench > "$O/build_old.log" 2>&1; echo "old build rc=$?" >> "$O/record.txt" ) &
timeout 300 cmake --build build-gpu -j10 --target kernels_decode_bench api_host_path_bench decode_gpu_test > "$O/build.log" 2>&1
echo "build rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
wait
grep -E "error|FAILED" "$O/build.log" "$O/build_old.log" | head
F='BM_ReadCeiling|(b1_h32_t4096|b1_h32_t65536|b32_h8_t128_d64|b32_h8_t128_d64_append|gqa32_8_b32_t4096|mha_b32_h32_t4096_bs16)/default'
for v in old new; do
  b=build-gpu; [ $v = old ] && b=build-old
  timeout 120 $b/bench/kernels_decode_bench --benchmark_filter="$F" --benchmark_counters_tabular=true \
    --benchmark_out="$O/kernels_decode_bench_$v.json" --benchmark_out_format=json > "$O/kernels_decode_bench_$v.txt" 2>&1
  echo "bench $v rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
done
timeout 100 python3 bench/sdpa_compare.py --out "$O/sdpa_compare.json" --gbench-json "$O/kernels_decode_bench_new.json" \
  --shapes b1_h32_t4096,b1_h32_t65536,b32_h8_t128_d64,b32_h8_t128_d64_append,gqa32_8_b32_t4096,mha_b32_h32_t4096_bs16 \
  > "$O/sdpa_compare.txt" 2>&1
echo "sdpa_compare rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
tail -20 "$O/sdpa_compare.txt"
for v in old new; do
  b=build-gpu; [ $v = old ] && b=build-old
  mkdir -p "$O/host_$v"
  timeout 130 $b/bench/api_host_path_bench --quick --out "$O/host_$v" --commit $([ $v = old ] && echo 1512790 || echo $COMMIT) > "$O/host_path_$v.txt" 2>&1
  echo "host path $v rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
done
grep -hE "floor|B=1|b1_|ratio" "$O"/host_path_*.txt | head -30
cd build-gpu
DF='AllCombos/*D128_bs16*:Variants/DecodeEdgeTest.GraphCaptured*:Variants/DecodeEdgeTest.Peaky*:AllCombos/*D64_bs8_G8*:AllCombos/*D256_bs64_G2*:Settings/*D128_G8_warps8_ctas16_minsplit128:Settings/*D64_G1_warps2_ctas0_minsplit1024:TunedLaunchTableTest.*'
for tool in memcheck racecheck synccheck initcheck; do
  ( timeout 200 compute-sanitizer --tool $tool --error-exitcode 9 ./tests/decode_gpu_test --gtest_filter="$DF" > "$O/san_$tool.log" 2>&1; echo "san $tool rc=$?" >> "$O/record.txt" ) &
done
wait
for tool in memcheck racecheck synccheck initcheck; do
  echo "$tool: $(grep -E '^\[  (PASSED|FAILED)  \]' $O/san_$tool.log | tr '\n' ' ') $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $O/san_$tool.log | tr '\n' ' ')" | tee -a "$O/record.txt"
done
echo "end $(date -u +%FT%TZ)" >> "$O/record.txt"
