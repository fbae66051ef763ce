#!/bin/bash
# Third device call (H100). r2: cuDNN's SDPA runs GQA 32/8 B=32 with our grid (one 4-warp CTA per
# (batch row, kv head), 256 CTAs) at 180 us, so the structure is not the gap. What paging costs:
# the read ceiling in shuffled chunks (1-16 KB) beside the flat one, and the kernel over
# shuffled vs in-order blocks; ncu of our kernel (the filter of r2 matched nothing).
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; cd "$(dirname "$0")/../../.."
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > "$O/device.txt"
echo "commit $COMMIT, start $(date -u +%FT%TZ)" > "$O/record.txt"
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF > "$O/cfg.log" 2>&1
timeout 250 cmake --build build-gpu -j16 --target kernels_launch_sweep_bench kernels_decode_bench read_ceiling_gpu_test > "$O/build.log" 2>&1
echo "build rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
build-gpu/tests/read_ceiling_gpu_test > "$O/read_ceiling_test.log" 2>&1
echo "read_ceiling_gpu_test rc=$? $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$O/read_ceiling_test.log" | tr '\n' ' ')" | tee -a "$O/record.txt"
F="128:32:8:32;128:32:32:8,32;128:32:32:1"
for b in shuffled in-order; do
  timeout 150 build-gpu/bench/kernels_launch_sweep_bench --commit $COMMIT --contexts 4096 --blocks $b \
    --families "$F" --json-out "$O/sweep_$b.json" > "$O/sweep_$b.txt" 2> "$O/sweep_$b.progress"
  echo "sweep $b rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
done
M=gpu__time_duration.sum,dram__bytes_read.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__cycles_active.min,sm__cycles_active.avg,sm__cycles_active.max,gpc__cycles_elapsed.max,sm__warps_active.avg.pct_of_peak_sustained_active,launch__grid_size,launch__block_size,launch__occupancy_limit_shared_mem,smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio,lts__t_sector_hit_rate.pct,dram__sectors_read.sum,lts__t_sectors_srcunit_tex_op_read.sum
for s in gqa32_8_b32_t4096 mha_b32_h32_t4096_bs16 b1_h32_t4096; do
  timeout 100 ncu --clock-control none -k regex:TcDecodeKernel --launch-skip 30 --launch-count 1 --metrics $M \
    build-gpu/bench/kernels_decode_bench --benchmark_filter="BM_Decode/$s/default" > "$O/ncu_$s.txt" 2>&1
  echo "ncu $s rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
done
cat "$O/record.txt"
for b in shuffled in-order; do head -2 "$O/sweep_$b.txt"; grep -A12 "^D    G" "$O/sweep_$b.txt"; done
for f in "$O"/ncu_*.txt; do echo "== $f"; grep -E "TcDecodeKernel|^\s+(dram|gpu__|sm__|gpc|launch|smsp|lts)" "$f" | cut -c1-160; done
echo "end $(date -u +%FT%TZ)" >> "$O/record.txt"
