#!/bin/bash
# Sixth device call (H200): the split-KV kernels prefetching their row's length, layer, first
# table lines and q into L2 before griddepcontrol.wait (PrefetchRowStart) against the kernels
# before (.ab/kernels = 1289831's): kernel-ab.sh over seven rows, two rounds; the B=1 phase trace
# (new only); decode_gpu_test and decode_fp8_gpu_test, plain and under memcheck.
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; cd "$(dirname "$0")/../../.."
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$O/device.txt"
date -u +%FT%TZ >> "$O/device.txt"
timeout 420 scripts/kernel-ab.sh .ab/kernels "$O/ab" --rounds 2 \
  --filter 'BM_ReadCeiling|/(b1_h32_t4096|b1_h32_t65536|mha_b32_h32_t4096_bs16|gqa32_8_b32_t4096|b128_h32_t1024|b32_h8_t128_d64)/default/' \
  --targets "kernels_cta_trace_bench decode_gpu_test decode_fp8_gpu_test" > "$O/ab.log" 2>&1
echo "kernel-ab rc=$? at $(date -u +%T)" | tee "$O/record.txt"
timeout 40 build-ab-new/bench/kernels_cta_trace_bench --contexts 512,4096 > "$O/cta_trace.txt" 2>&1
echo "cta trace rc=$?" | tee -a "$O/record.txt"
timeout 90 build-ab-new/tests/decode_gpu_test > "$O/decode_gpu_test.txt" 2>&1
echo "decode_gpu_test rc=$?" | tee -a "$O/record.txt"
timeout 40 build-ab-new/tests/decode_fp8_gpu_test > "$O/decode_fp8_gpu_test.txt" 2>&1
echo "decode_fp8_gpu_test rc=$?" | tee -a "$O/record.txt"
timeout 90 compute-sanitizer --tool memcheck build-ab-new/tests/decode_gpu_test --gtest_filter='*DecodeEdgeTest.PeakySoftmax*:*DecodeEdgeTest.LengthOneEverywhere*:*DecodeEdgeTest.MixedLengths1To4096*' > "$O/memcheck.txt" 2>&1
echo "memcheck rc=$?" | tee -a "$O/record.txt"
echo "end $(date -u +%FT%TZ)" >> "$O/record.txt"
cat "$O/ab/ab.txt"; grep -E "T=|step|phase|length|tile" "$O/cta_trace.txt" | head -30
tail -3 "$O/decode_gpu_test.txt" "$O/decode_fp8_gpu_test.txt"; tail -2 "$O/memcheck.txt"
tar -czf "$O.tgz" -C "$(dirname "$O")" "$(basename "$O")" && rm -rf "$O"
