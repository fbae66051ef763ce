#!/bin/bash
# Third device call (H200), the record of this session's kernel changes: whole-block tiles (r2),
# the FP8 append's hardware quantization (r2) with the NaN sign kept (r2's new test failed on
# negative NaN), and the FP8 appended row copied asynchronously like FP16's. Builds every target;
# every test binary in shards while compute-sanitizer (memcheck, racecheck, synccheck, initcheck)
# runs the FP8 and FP16 tensor-core decode tests; then the default rows of kernels_decode_bench
# and the SDPA comparison. Three tarballs, one a phase, so a phase cut at the call's limit still
# leaves the others.
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; cd "$(dirname "$0")/../../.."
B=$PWD/build-h200
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.total --format=csv > "$O/device.txt"
echo "commit $COMMIT, start $(date -u +%FT%TZ)" > "$O/record.txt"
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF > "$O/cfg.log" 2>&1
timeout 300 cmake --build $B -j16 -- -k 0 > "$O/build.log" 2>&1
echo "build rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
grep -E "error|FAILED" "$O/build.log" | head -20
mkdir -p "$O/san"
san() {  # tool binary filter
  timeout 170 compute-sanitizer --tool $1 --error-exitcode 9 $B/tests/$2 --gtest_filter="$3" > "$O/san/$1_$2.log" 2>&1
  echo "$1 $2 rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$O/san/$1_$2.log" | tail -1) $(grep -E '^\[  (PASSED|FAILED) *\] [0-9]' "$O/san/$1_$2.log" | tr '\n' ' ')" >> "$O/san/summary.txt"
}
F8='AllCombos/DecodeFp8SweepTest.*D128*:AllCombos/DecodeFp8SweepTest.*D64_bs16*:Variants/*'
F16='AllCombos/*D128_bs16*:Variants/DecodeEdgeTest.Peaky*:AllCombos/*D64_bs8_G8*'
for tool in memcheck racecheck synccheck initcheck; do san $tool decode_fp8_gpu_test "$F8" & done
for tool in memcheck racecheck; do san $tool decode_gpu_test "$F16" & done
san memcheck fp8_e4m3_gpu_test '*' &
SHARD_TIMEOUT=150 scripts/gpu-test-shards.sh $B "$O/tests" --jobs 6 > "$O/tests.txt" 2>&1
echo "gpu-test-shards rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
tail -2 "$O/tests.txt"; grep -v "rc=0" "$O/tests/summary.txt" | head
wait
echo "sanitizers done at $(date -u +%T)" | tee -a "$O/record.txt"
cat "$O/san/summary.txt"
tar -C "$O" -czf "$O/p1_tests_san.tgz" tests tests.txt san && rm -rf "$O/tests" "$O/san"
timeout 240 $B/bench/kernels_decode_bench --blocks allocator --benchmark_filter='BM_ReadCeiling|/default/' \
  --benchmark_out="$O/kernels_decode_bench.json" --benchmark_out_format=json > "$O/kernels_decode_bench.txt" 2>&1
echo "kernels_decode_bench rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
PYTHONUNBUFFERED=1 timeout 60 python3 bench/sdpa_compare.py --out "$O/sdpa_compare.json" \
  --gbench-json "$O/kernels_decode_bench.json" > "$O/sdpa_compare.txt" 2>&1
echo "sdpa_compare rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
grep -A25 "winner" "$O/sdpa_compare.txt"
echo "end $(date -u +%FT%TZ)" >> "$O/record.txt"
tar -C "$O" -czf "$O/p2_bench.tgz" kernels_decode_bench.json kernels_decode_bench.txt sdpa_compare.json sdpa_compare.txt build.log cfg.log && rm -f "$O"/kernels_decode_bench.* "$O"/sdpa_compare.* "$O"/build.log "$O"/cfg.log
