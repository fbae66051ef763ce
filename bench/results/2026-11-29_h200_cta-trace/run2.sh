#!/bin/bash
# Second device call (H200): the cross-split merge with its loads in flight together
# (MergeSplitPartials<8>) against the kernels of 777376c (.ab/kernels): kernel-ab.sh over the
# B=1 rows and the large shapes, the new tree's phase trace, and decode_gpu_test (every path,
# both families' merges) plus memcheck and racecheck over its split-KV tests.
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; cd "$(dirname "$0")/../../.."
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.total --format=csv > "$O/device.txt"
echo "commit $COMMIT (old kernels: 777376c in .ab/kernels), start $(date -u +%FT%TZ)" > "$O/record.txt"
timeout 420 scripts/kernel-ab.sh .ab/kernels "$O/ab" --rounds 2 \
  --filter 'BM_ReadCeiling|/(b1_h32_t4096|b1_h32_t65536|gqa32_8_b32_t4096|mha_b32_h32_t4096_bs16|b8_h32_t16384)/default/' \
  --targets "kernels_cta_trace_bench decode_gpu_test" > "$O/ab.log" 2>&1; echo "kernel-ab rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
T=build-ab-new/bench/kernels_cta_trace_bench
$T --contexts 512,1024,4096 --commit $COMMIT --json-out "$O/b1_decode.json" > "$O/b1_decode.txt" 2>&1; echo "b1 decode rc=$?" | tee -a "$O/record.txt"
$T --kv-heads 8 --contexts 4096 --commit $COMMIT --json-out "$O/gqa_b1.json" > "$O/gqa_b1.txt" 2>&1; echo "gqa b1 rc=$?" | tee -a "$O/record.txt"
timeout 240 build-ab-new/tests/decode_gpu_test > "$O/decode_gpu_test.txt" 2>&1; echo "decode_gpu_test rc=$? $(grep -E '^\[  PASSED|FAILED' "$O/decode_gpu_test.txt" | head -3 | tr '\n' ' ')" | tee -a "$O/record.txt"
for tool in memcheck racecheck; do
  timeout 100 compute-sanitizer --tool $tool --error-exitcode 9 build-ab-new/tests/decode_gpu_test --gtest_filter='*LaunchConfigTest*D128_G1_warps8_ctas16_minsplit128*:*LaunchConfigTest*D64_G8_warps4_ctas16_minsplit128*:*DecodeEdgeTest.PeakySoftmax/split_kv*' > "$O/${tool}.txt" 2>&1; echo "$tool rc=$? $(grep -E 'ERROR SUMMARY|PASSED|FAILED' "$O/${tool}.txt" | head -3 | tr '\n' ' ')" | tee -a "$O/record.txt"
done
echo "end $(date -u +%FT%TZ)" >> "$O/record.txt"
cat "$O/ab/ab.txt"; cut -c1-700 "$O"/b1_decode.txt "$O"/gqa_b1.txt
tar -czf "$O.tgz" -C "$(dirname "$O")" "$(basename "$O")" && rm -rf "$O"
