#!/bin/bash
# Fourth device call (H200): r3's FP8 small append (D=64 H8 B=32 T=128) read 7.85 us against
# r2's 7.40 on another machine. Same-call A/B: r2's kernels (c083383: the new row quantized
# synchronously in the issue loop, carried in .ab/kernels) against the tree (copied with the
# first tiles, quantized when its tile is used), FP8 rows and one FP16 row, alternating; and the
# FP8 tests of the tree (the codec test with the NaN sign taken from the FP16 bits).
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; cd "$(dirname "$0")/../../.."
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.total --format=csv > "$O/device.txt"
echo "commit $COMMIT, start $(date -u +%FT%TZ)" > "$O/record.txt"
mkdir -p /tmp/old && tar --exclude=./bench/results --exclude='./build*' --exclude=./.ab -cf - . | tar -xf - -C /tmp/old
rm -rf /tmp/old/kernels && cp -r .ab/kernels /tmp/old/kernels
C="-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF"
cmake -S . -B build-h200 $C > "$O/cfg.log" 2>&1
cmake -S /tmp/old -B /tmp/old/build $C >> "$O/cfg.log" 2>&1
(timeout 300 cmake --build /tmp/old/build -j6 --target kernels_decode_bench > "$O/build_old.log" 2>&1; echo "build old rc=$? at $(date -u +%T)" >> "$O/record.txt") &
timeout 300 cmake --build build-h200 -j10 --target kernels_decode_bench decode_fp8_gpu_test fp8_e4m3_gpu_test > "$O/build.log" 2>&1; echo "build rc=$? at $(date -u +%T)" >> "$O/record.txt"
wait
for s in 0 1 2 3; do
  GTEST_TOTAL_SHARDS=4 GTEST_SHARD_INDEX=$s timeout 150 build-h200/tests/decode_fp8_gpu_test > "$O/fp8_test_$s.log" 2>&1 &
done
timeout 60 build-h200/tests/fp8_e4m3_gpu_test > "$O/codec_test.log" 2>&1
wait
for f in "$O"/fp8_test_*.log "$O/codec_test.log"; do echo "$(basename $f) $(grep -E '^\[  (PASSED|FAILED|SKIPPED) *\] [0-9]' $f | tr '\n' ' ')" | tee -a "$O/record.txt"; done
F='/(b32_h8_t128_d64_append_fp8|gqa32_8_b32_t4096_fp8|b1_h32_t4096_fp8|b32_h8_t128_d64_append)/default/'
for i in 1 2; do
  for b in /tmp/old/build build-h200; do
    n=$([ $b = build-h200 ] && echo new || echo old)
    timeout 100 $b/bench/kernels_decode_bench --blocks allocator --benchmark_filter="$F" > "$O/bench_${n}_$i.txt" 2>&1
    echo "bench $n $i rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
  done
done
for n in old new; do for i in 1 2; do echo "== $n $i"; grep -h "manual_time_median" "$O/bench_${n}_$i.txt" | sed -E 's/min_time[^ ]*//' | awk '{print $1, $2, $3}'; done; done
echo "end $(date -u +%FT%TZ)" >> "$O/record.txt"
tar -C "$(dirname "$O")" -czf "$O.tgz" "$(basename "$O")" && rm -rf "$O"
