#!/bin/bash
# Second device call (H100): B=33 measured like B=32 per byte, so per-SM balance is not the GQA
# gap. Where do the kernel's fixed microseconds go? ncu (clocks untouched) on the default
# dispatch of three shapes and on SDPA's kernels for the same shapes: duration, DRAM throughput,
# per-SM active cycles (min/avg/max: the tail), warps, stalls, grid.
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; cd "$(dirname "$0")/../../.."
R=bench/results/2026-11-26_h100_stream-k
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > "$O/device.txt"
echo "commit $COMMIT, start $(date -u +%FT%TZ)" > "$O/record.txt"
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF > "$O/cfg.log" 2>&1
timeout 250 cmake --build build-gpu -j16 --target kernels_decode_bench > "$O/build.log" 2>&1
echo "build rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
M=gpu__time_duration.sum,dram__bytes_read.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__cycles_active.min,sm__cycles_active.avg,sm__cycles_active.max,gpc__cycles_elapsed.max,sm__warps_active.avg.pct_of_peak_sustained_active,launch__grid_size,launch__block_size,launch__occupancy_limit_shared_mem,smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio,lts__t_sector_hit_rate.pct
for s in gqa32_8_b32_t4096 mha_b32_h32_t4096_bs16 b1_h32_t4096 gqa32_4_b32_t4096; do
  timeout 120 ncu --clock-control none -k regex:TcDecodeKernel --launch-skip 30 --launch-count 1 --metrics $M \
    build-gpu/bench/kernels_decode_bench --benchmark_filter="BM_Decode/$s/default\$" > "$O/ncu_$s.txt" 2>&1
  echo "ncu $s rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
done
for s in gqa32_8 mha_b32 b1_h32; do
  timeout 120 ncu --clock-control none --profile-from-start off --metrics $M python3 $R/sdpa_one.py $s > "$O/ncu_sdpa_$s.txt" 2>&1
  echo "ncu sdpa $s rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
done
for f in "$O"/ncu_*.txt; do echo "== $f"; grep -vE "^==PROF==|^\s*$|^-{5}|^\[|Run on|^Running|^CPU|^Load Average|^\*\*\*|^Benchmark|^BM_" "$f" | tail -40; done
echo "end $(date -u +%FT%TZ)" >> "$O/record.txt"
