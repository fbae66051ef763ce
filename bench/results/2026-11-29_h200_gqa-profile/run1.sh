#!/bin/bash
# First device call (H200): where the GQA gap to cuDNN goes (issue 12). Two builds of the
# benchmarks: the tree as is, and with cp.async's L2 prefetch hint (L2::256B). The default rows of
# GQA 32/8, GQA 32/4, MHA B=32 and B=1 T=4096 alternating between the builds; GQA over in-order
# blocks; ncu (clocks untouched) of our kernel and cuDNN's on GQA 32/8 and B=1 (stall reasons,
# per-SM active cycles, DRAM throughput); the launch sweep of the FP8 small-batch append shape
# (D=64 H8 B=32 T=128: 1.77x FP16 SDPA on 2026-11-28) against FP16, append and decode alone.
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; cd "$(dirname "$0")/../../.."
R=bench/results/2026-11-29_h200_gqa-profile
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.total --format=csv > "$O/device.txt"
echo "commit $COMMIT, start $(date -u +%FT%TZ)" > "$O/record.txt"
T="kernels_decode_bench kernels_launch_sweep_bench"
C="-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF"
cmake -S . -B build-h200 $C > "$O/cfg.log" 2>&1
cmake -S . -B build-h200-l2 $C -DCMAKE_CUDA_FLAGS=-DATTNRT_CP_ASYNC_L2_PREFETCH=256 >> "$O/cfg.log" 2>&1
(timeout 300 cmake --build build-h200 -j10 --target $T > "$O/build.log" 2>&1; echo "build rc=$? at $(date -u +%T)" >> "$O/record.txt") &
(timeout 300 cmake --build build-h200-l2 -j6 --target $T > "$O/build_l2.log" 2>&1; echo "build l2 rc=$? at $(date -u +%T)" >> "$O/record.txt") &
wait
cat "$O/record.txt"
F='BM_ReadCeiling|/(gqa32_8_b32_t4096|gqa32_4_b32_t4096|mha_b32_h32_t4096_bs16|b1_h32_t4096)/default/'
for i in 1 2; do
  for b in build-h200 build-h200-l2; do
    timeout 120 $b/bench/kernels_decode_bench --blocks allocator --benchmark_filter="$F" \
      --benchmark_out="$O/bench_${b}_$i.json" --benchmark_out_format=json > "$O/bench_${b}_$i.txt" 2>&1
    echo "bench $b $i rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
  done
done
timeout 60 build-h200/bench/kernels_decode_bench --blocks in-order \
  --benchmark_filter='/(gqa32_8_b32_t4096|gqa32_4_b32_t4096)/default/' > "$O/bench_in-order.txt" 2>&1
echo "bench in-order rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
S="--section SpeedOfLight --section LaunchStats --section Occupancy --section SchedulerStats --section WarpStateStats --section MemoryWorkloadAnalysis"
M=gpu__time_duration.sum,dram__bytes_read.sum,sm__cycles_active.min,sm__cycles_active.avg,sm__cycles_active.max,gpc__cycles_elapsed.max,smsp__inst_executed.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum
for s in gqa32_8_b32_t4096 b1_h32_t4096; do
  timeout 120 ncu --clock-control none -k regex:TcDecodeKernel --launch-skip 30 --launch-count 1 $S --metrics $M \
    build-h200/bench/kernels_decode_bench --blocks allocator --benchmark_filter="BM_Decode/$s/default" > "$O/ncu_$s.txt" 2>&1
  echo "ncu $s rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
done
for s in gqa32_8 b1_h32; do
  timeout 120 ncu --clock-control none --profile-from-start off $S --metrics $M python3 $R/sdpa_one.py $s > "$O/ncu_sdpa_$s.txt" 2>&1
  echo "ncu sdpa $s rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
done
for kv in fp16 fp8_e4m3; do
  for st in append decode; do
    timeout 60 build-h200/bench/kernels_launch_sweep_bench --commit $COMMIT --kv-cache-type $kv --families "64:8:8:32" \
      --contexts 128 --step $st --json-out "$O/sweep_small_${kv}_$st.json" > "$O/sweep_small_${kv}_$st.txt" 2>&1
    echo "sweep small $kv $st rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
  done
done
grep -h "manual_time_median" "$O"/bench_*.txt | sed -E 's/min_time[^ ]*//' | awk '{print $1, $2, $3}'
for f in "$O"/sweep_small_*.txt; do echo "== $f"; tail -15 "$f"; done
echo "end $(date -u +%FT%TZ)" >> "$O/record.txt"
tar -C "$(dirname "$O")" -czf "$O.tgz" "$(basename "$O")" && rm -rf "$O"
