#!/bin/bash
# First device call (H200): the tensor-core decode kernel addresses its ring as a per-lane offset
# XOR a compile-time one (whole-tile copies and both ldmatrix reads; static_asserts enumerate the
# identity). Same-call A/B against HEAD's kernels (.ab/kernels) with scripts/kernel-ab.sh over
# the large and small default rows, every test binary of the new build in shards while
# compute-sanitizer runs the FP16 and FP8 tensor-core decode tests, ncu instruction counts of
# GQA 32/8 and B=1, and the SASS of TcDecodeKernel<128, 4, fp16>.
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; cd "$(dirname "$0")/../../.."
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.total --format=csv > "$O/device.txt"
echo "commit $COMMIT (+ working tree), start $(date -u +%FT%TZ)" > "$O/record.txt"
F='BM_ReadCeiling|/(gqa32_8_b32_t4096|gqa64_8_b32_t4096|gqa32_4_b32_t4096|mha_b32_h32_t4096_bs16|b1_h32_t4096|b1_h32_t65536|b8_h32_t16384|mha_b32_h32_t4096_d64|gqa16_8_b32_t4096_d256|gqa32_8_b32_t4096_fp8|b32_h8_t128_d64_append)/default/'
timeout 330 scripts/kernel-ab.sh .ab/kernels "$O/ab" --filter "$F" --rounds 2 --targets all > "$O/ab.log" 2>&1
echo "kernel-ab rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
cat "$O/ab.log" | tail -20
B=build-ab-new
mkdir -p "$O/san"
san() {  # tool binary filter
  timeout 150 compute-sanitizer --tool $1 --error-exitcode 9 $B/tests/$2 --gtest_filter="$3" > "$O/san/$1_$2.log" 2>&1
  echo "$1 $2 rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$O/san/$1_$2.log" | tail -1) $(grep -E '^\[  (PASSED|FAILED) *\] [0-9]' "$O/san/$1_$2.log" | tr '\n' ' ')" >> "$O/san/summary.txt"
}
F8='AllCombos/DecodeFp8SweepTest.*D128*:AllCombos/DecodeFp8SweepTest.*D64_bs16*:Variants/*'
F16='AllCombos/*D128_bs16*:Variants/DecodeEdgeTest.Peaky*:AllCombos/*D64_bs8_G8*:AllCombos/*D256_bs32*'
for tool in memcheck racecheck; do san $tool decode_fp8_gpu_test "$F8" & done
for tool in memcheck racecheck synccheck initcheck; do san $tool decode_gpu_test "$F16" & done
SHARD_TIMEOUT=140 timeout 170 scripts/gpu-test-shards.sh $B "$O/tests" --jobs 8 > "$O/tests.txt" 2>&1
echo "gpu-test-shards rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
tail -2 "$O/tests.txt"; grep -v "rc=0" "$O/tests/summary.txt" | head
wait
echo "sanitizers done at $(date -u +%T)" | tee -a "$O/record.txt"
cat "$O/san/summary.txt"
M=gpu__time_duration.sum,dram__bytes_read.sum,sm__cycles_active.avg,smsp__inst_executed.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,launch__registers_per_thread
for s in gqa32_8_b32_t4096 b1_h32_t4096 gqa32_4_b32_t4096; do
  timeout 40 ncu --clock-control none -k regex:TcDecodeKernel --launch-skip 30 --launch-count 1 --metrics $M \
    $B/bench/kernels_decode_bench --blocks allocator --benchmark_filter="BM_Decode/$s/default" > "$O/ncu_$s.txt" 2>&1
  echo "ncu $s rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
done
for f in "$O"/ncu_*.txt; do echo "== $f"; grep -E "TcDecodeKernel|^\s+(dram|gpu__|sm__|launch|smsp)" "$f" | cut -c1-120; done
cuobjdump -sass $B/kernels/CMakeFiles/attnrt_kernels.dir/decode_split_kv.cu.o > /tmp/all.sass 2>&1
awk '/Function : .*TcDecodeKernelILi128ELi4ELb0/{p=1} p&&/Function : /&&!/TcDecodeKernelILi128ELi4ELb0/{p=0} p' /tmp/all.sass > "$O/tc128x4.sass"
echo "sass lines $(wc -l < "$O/tc128x4.sass")" | tee -a "$O/record.txt"
echo "end $(date -u +%FT%TZ)" >> "$O/record.txt"
tar -C "$O" -czf "$O/p1.tgz" tests tests.txt san ab tc128x4.sass && rm -rf "$O/tests" "$O/san" "$O/ab" "$O/tc128x4.sass"
