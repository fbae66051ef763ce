#!/bin/bash
# Second device call (H200): (1) the XOR-addressed kernel (r1: one round, within 1%) against
# HEAD's kernels again, two more rounds over the rows that moved most in r1; (2) Submit's copy
# into the request's staging fused with check_finite's scan and done with streaming stores:
# the host CPU section of api_host_path_bench (B=128, host and device-memory requests), HEAD
# (.ab/head, the whole tree at 9af7d82) and this tree alternating three times; (3) the test
# binaries the intake change touches (Runtime, scheduler, executor) on the new build.
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; cd "$(dirname "$0")/../../.."
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.total --format=csv > "$O/device.txt"
echo "commit $COMMIT (+ working tree), start $(date -u +%FT%TZ)" > "$O/record.txt"
OLD=$PWD/.ab/head; cp -r .deps "$OLD/.deps"
C="-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF"
cmake -S . -B build-h200 $C > "$O/cfg.log" 2>&1
cmake -S "$OLD" -B "$OLD/build" $C >> "$O/cfg.log" 2>&1
(timeout 200 cmake --build "$OLD/build" -j6 --target kernels_decode_bench api_host_path_bench > "$O/build_old.log" 2>&1; echo "build old rc=$? at $(date -u +%T)" >> "$O/record.txt") &
timeout 200 cmake --build build-h200 -j12 > "$O/build.log" 2>&1; echo "build rc=$? at $(date -u +%T)" >> "$O/record.txt"
wait
cat "$O/record.txt"
F='/(gqa32_8_b32_t4096|gqa32_4_b32_t4096|mha_b32_h32_t4096_bs16|b1_h32_t4096)/default/'
mkdir -p "$O/kab"
for i in 1 2; do
  for side in old new; do
    b=build-h200; [ $side = old ] && b=$OLD/build
    timeout 80 $b/bench/kernels_decode_bench --blocks allocator --benchmark_filter="$F" \
      --benchmark_out="$O/kab/${side}_$i.json" --benchmark_out_format=json > "$O/kab/${side}_$i.txt" 2>&1
    echo "kernel bench $side $i rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
  done
done
python3 bench/kernel_ab_summary.py "$O/kab" | tee "$O/kab/ab.txt"
mkdir -p "$O/host"
for i in 1 2 3; do
  for side in old new; do
    b=build-h200; [ $side = old ] && b=$OLD/build
    timeout 60 $b/bench/api_host_path_bench --sections host > "$O/host/${side}_$i.txt" 2>&1
    echo "host $side $i rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
    grep -E "host cpu per request" "$O/host/${side}_$i.txt"
  done
done
mkdir -p "$O/tests"
for t in api_wiring_gpu_test api_runtime_gpu_test api_device_memory_gpu_test api_sequence_safety_gpu_test api_faults_test api_c_test scheduler_test finite_test cuda_executor_gpu_test request_record_test; do
  timeout 150 build-h200/tests/$t > "$O/tests/$t.log" 2>&1 &
done
wait
for f in "$O"/tests/*.log; do echo "$(basename $f) $(grep -E '^\[  (PASSED|FAILED|SKIPPED) *\] [0-9]' $f | tr '\n' ' ')" | tee -a "$O/record.txt"; done
echo "end $(date -u +%FT%TZ)" >> "$O/record.txt"
tar -C "$O" -czf "$O/p.tgz" kab host tests build.log build_old.log cfg.log && rm -rf "$O/kab" "$O/host" "$O/tests" "$O"/build*.log "$O/cfg.log"
