#!/bin/bash
# Fifth device call (H200, the session's last minutes): the FP16 loop skips O's rescale while no
# head's max moved, as FP8's does (32 FMULs a tile). Same-call A/B against the tree before it
# (.ab/kernels), alternating twice over GQA 32/8, GQA 32/4, MHA and B=1 T=4096; decode_gpu_test
# of the new build in shards; the SASS of the GQA kernel (instructions of TcDecodeKernel<128, 4>).
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; cd "$(dirname "$0")/../../.."
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.total --format=csv > "$O/device.txt"
echo "commit $COMMIT (+ working tree), start $(date -u +%FT%TZ)" > "$O/record.txt"
mkdir -p /tmp/old && tar --exclude=./bench/results --exclude='./build*' --exclude=./.ab -cf - . | tar -xf - -C /tmp/old
rm -rf /tmp/old/kernels && cp -r .ab/kernels /tmp/old/kernels
C="-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF"
cmake -S . -B build-h200 $C > "$O/cfg.log" 2>&1
cmake -S /tmp/old -B /tmp/old/build $C >> "$O/cfg.log" 2>&1
(timeout 150 cmake --build /tmp/old/build -j6 --target kernels_decode_bench > "$O/build_old.log" 2>&1; echo "build old rc=$? at $(date -u +%T)" >> "$O/record.txt") &
timeout 150 cmake --build build-h200 -j10 --target kernels_decode_bench decode_gpu_test > "$O/build.log" 2>&1; echo "build rc=$? at $(date -u +%T)" >> "$O/record.txt"
wait
F='/(gqa32_8_b32_t4096|gqa32_4_b32_t4096|mha_b32_h32_t4096_bs16|b1_h32_t4096)/default/'
for i in 1 2; do
  for b in /tmp/old/build build-h200; do
    n=$([ $b = build-h200 ] && echo new || echo old)
    timeout 60 $b/bench/kernels_decode_bench --blocks allocator --benchmark_filter="$F" > "$O/bench_${n}_$i.txt" 2>&1
    echo "bench $n $i rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
  done
done
for n in old new; do for i in 1 2; do echo "== $n $i"; grep -h "manual_time_median" "$O/bench_${n}_$i.txt" | sed -E 's/min_time[^ ]*//' | awk '{print $1, $2, $3}'; done; done
for s in $(seq 0 7); do
  GTEST_TOTAL_SHARDS=8 GTEST_SHARD_INDEX=$s timeout 70 build-h200/tests/decode_gpu_test > "$O/decode_test_$s.log" 2>&1 &
done
wait
for f in "$O"/decode_test_*.log; do echo "$(basename $f) $(grep -E '^\[  (PASSED|FAILED|SKIPPED) *\] [0-9]' $f | tr '\n' ' ')" | tee -a "$O/record.txt"; done
cuobjdump -sass build-h200/kernels/CMakeFiles/attnrt_kernels.dir/decode_split_kv.cu.o > /tmp/all.sass 2>&1
awk '/Function : .*TcDecodeKernelILi128ELi4ELb0/{p=1} p&&/Function : /&&!/TcDecodeKernelILi128ELi4ELb0/{p=0} p' /tmp/all.sass > "$O/tc128x4.sass"
echo "sass lines $(wc -l < "$O/tc128x4.sass")" | tee -a "$O/record.txt"
echo "end $(date -u +%FT%TZ)" >> "$O/record.txt"
tar -C "$(dirname "$O")" -czf "$O.tgz" "$(basename "$O")" && rm -rf "$O"
