#!/bin/bash
# Second device call (H200): r1 found the GQA kernel issuing 1.85x cuDNN's instructions (per-row
# addressing of every 16-byte copy) and the FP8 fused append 5.2 us slower than FP16's (the
# software E4M3 encoder on one lane per chunk). Both changed; this call builds the tree and, beside
# it, the same tree with r1's kernels/ (carried in .ab/kernels), runs every test binary of the new
# build in shards, times a subset of the default rows alternating old/new/old/new, counts the new
# GQA kernel's instructions (ncu), and sweeps the FP8 small append shape again.
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; cd "$(dirname "$0")/../../.."
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.total --format=csv > "$O/device.txt"
echo "commit $COMMIT (+ working tree), start $(date -u +%FT%TZ)" > "$O/record.txt"
mkdir -p /tmp/old && tar --exclude=./bench/results --exclude='./build*' --exclude=./.ab -cf - . | tar -xf - -C /tmp/old
rm -rf /tmp/old/kernels && cp -r .ab/kernels /tmp/old/kernels
C="-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF"
cmake -S . -B build-h200 $C > "$O/cfg.log" 2>&1
cmake -S /tmp/old -B /tmp/old/build $C >> "$O/cfg.log" 2>&1
(timeout 400 cmake --build /tmp/old/build -j4 --target kernels_decode_bench > "$O/build_old.log" 2>&1; echo "build old rc=$? at $(date -u +%T)" >> "$O/record.txt") &
timeout 400 cmake --build build-h200 -j14 -- -k 0 > "$O/build.log" 2>&1; echo "build rc=$? at $(date -u +%T)" >> "$O/record.txt"
grep -E "error|FAILED" "$O/build.log" | head -20
wait
cat "$O/record.txt"
SHARD_TIMEOUT=150 scripts/gpu-test-shards.sh build-h200 "$O/tests" > "$O/tests.txt" 2>&1
echo "gpu-test-shards rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
tail -5 "$O/tests.txt"
F='BM_ReadCeiling|/(gqa32_8_b32_t4096|gqa32_4_b32_t4096|mha_b32_h32_t4096_bs16|b1_h32_t4096|b8_h32_t16384|mha_b32_h32_t4096_d64|gqa32_8_b32_t4096_fp8|b32_h8_t128_d64_append_fp8|b32_h8_t128_d64_append)/default/'
for i in 1 2; do
  for b in /tmp/old/build build-h200; do
    n=$([ $b = build-h200 ] && echo new || echo old)
    timeout 150 $b/bench/kernels_decode_bench --blocks allocator --benchmark_filter="$F" \
      --benchmark_out="$O/bench_${n}_$i.json" --benchmark_out_format=json > "$O/bench_${n}_$i.txt" 2>&1
    echo "bench $n $i rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
  done
done
M=gpu__time_duration.sum,dram__bytes_read.sum,sm__cycles_active.min,sm__cycles_active.avg,sm__cycles_active.max,gpc__cycles_elapsed.max,smsp__inst_executed.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,launch__registers_per_thread
for s in gqa32_8_b32_t4096 b1_h32_t4096; do
  timeout 60 ncu --clock-control none -k regex:TcDecodeKernel --launch-skip 30 --launch-count 1 --metrics $M \
    build-h200/bench/kernels_decode_bench --blocks allocator --benchmark_filter="BM_Decode/$s/default" > "$O/ncu_$s.txt" 2>&1
  echo "ncu $s rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
done
for f in "$O"/ncu_*.txt; do echo "== $f"; grep -E "TcDecodeKernel|^\s+(dram|gpu__|sm__|gpc|launch|smsp)" "$f" | cut -c1-120; done
for n in old new; do for i in 1 2; do echo "== $n $i"; grep -h "manual_time_median" "$O/bench_${n}_$i.txt" | sed -E 's/min_time[^ ]*//' | awk '{print $1, $2, $3}'; done; done
echo "end $(date -u +%FT%TZ)" >> "$O/record.txt"
tar -C "$(dirname "$O")" -czf "$O.tgz" "$(basename "$O")" && rm -rf "$O"
