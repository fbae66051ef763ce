#!/bin/bash
# Third device call (H200): this session's kernel changes together (the merge's loads in flight
# together; the warps' reduction stores only the group's heads, rows padded against bank
# conflicts; the phase stamps, null in production) against the kernels of cf1cb37
# (.ab/kernels): kernel-ab.sh over the B=1 rows, the large shapes and FP8 B=1; the phase trace;
# SDPA on the same rows in the same call; memcheck and racecheck over split-KV tests of both
# cache types.
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; cd "$(dirname "$0")/../../.."
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.total --format=csv > "$O/device.txt"
echo "commit $COMMIT (old kernels: cf1cb37 in .ab/kernels), start $(date -u +%FT%TZ)" > "$O/record.txt"
timeout 400 scripts/kernel-ab.sh .ab/kernels "$O/ab" --rounds 2 \
  --filter 'BM_ReadCeiling|/(b1_h32_t4096|b1_h32_t65536|gqa32_8_b32_t4096|mha_b32_h32_t4096_bs16|gqa32_4_b32_t4096|b128_h32_t1024|b1_h32_t4096_fp8)/default/' \
  --targets "kernels_cta_trace_bench decode_gpu_test decode_fp8_gpu_test" > "$O/ab.log" 2>&1; echo "kernel-ab rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
T=build-ab-new/bench/kernels_cta_trace_bench
$T --contexts 512,1024,4096 --commit $COMMIT --json-out "$O/b1_decode.json" > "$O/b1_decode.txt" 2>&1; echo "b1 decode rc=$?" | tee -a "$O/record.txt"
$T --kv-heads 8 --contexts 4096 --commit $COMMIT --json-out "$O/gqa_b1.json" > "$O/gqa_b1.txt" 2>&1; echo "gqa b1 rc=$?" | tee -a "$O/record.txt"
PYTHONUNBUFFERED=1 timeout 150 python3 bench/sdpa_compare.py --out "$O/sdpa_compare.json" --gbench-json "$O/ab/new_2.json" \
  --shapes b1_h32_t4096,b1_h32_t65536,gqa32_8_b32_t4096,mha_b32_h32_t4096_bs16,gqa32_4_b32_t4096,b128_h32_t1024 > "$O/sdpa_compare.txt" 2>&1; echo "sdpa rc=$?" | tee -a "$O/record.txt"
F='*LaunchConfigTest*D128_G1_warps8_ctas16_minsplit128*:*LaunchConfigTest*D64_G8_warps4_ctas16_minsplit128*:*LaunchConfigTest*D256_G8_warps2_ctas0_minsplit128*:*DecodeEdgeTest.PeakySoftmax/split_kv*:*DecodeEdgeTest.MixedLengths1To4096/split_kv'
for tool in memcheck racecheck; do
  timeout 100 compute-sanitizer --tool $tool --error-exitcode 9 build-ab-new/tests/decode_gpu_test --gtest_filter="$F" > "$O/${tool}.txt" 2>&1; echo "$tool rc=$? $(grep -E 'ERROR SUMMARY|PASSED|FAILED' "$O/${tool}.txt" | head -3 | tr '\n' ' ')" | tee -a "$O/record.txt"
  timeout 80 compute-sanitizer --tool $tool --error-exitcode 9 build-ab-new/tests/decode_fp8_gpu_test --gtest_filter='Variants/*split_kv*' > "$O/${tool}_fp8.txt" 2>&1; echo "$tool fp8 rc=$? $(grep -E 'ERROR SUMMARY|PASSED|FAILED' "$O/${tool}_fp8.txt" | head -3 | tr '\n' ' ')" | tee -a "$O/record.txt"
done
timeout 100 build-ab-new/tests/decode_fp8_gpu_test > "$O/decode_fp8_gpu_test.txt" 2>&1; echo "decode_fp8_gpu_test rc=$? $(grep -E '^\[  PASSED|FAILED' "$O/decode_fp8_gpu_test.txt" | head -3 | tr '\n' ' ')" | tee -a "$O/record.txt"
echo "end $(date -u +%FT%TZ)" >> "$O/record.txt"
cat "$O/ab/ab.txt"; cut -c1-700 "$O"/b1_decode.txt "$O"/gqa_b1.txt; tail -15 "$O/sdpa_compare.txt"
tar -czf "$O.tgz" -C "$(dirname "$O")" "$(basename "$O")" && rm -rf "$O"
