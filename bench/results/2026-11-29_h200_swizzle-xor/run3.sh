#!/bin/bash
# Third device call (H200): (1) the executor's pack copies host rows into the pinned staging with
# streaming stores (bc811d7) against bb6c612 (.ab/head): api_host_path_bench's B=1
# section alternating three times (Decode, Runtime and executor rows against the floors of the
# same run); (2) the executor and Runtime GPU tests on the new build; (3) the full host-path
# record of the new build (summary.json written by the benchmark).
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; cd "$(dirname "$0")/../../.."
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.total --format=csv > "$O/device.txt"
echo "commit $COMMIT, start $(date -u +%FT%TZ)" > "$O/record.txt"
OLD=$PWD/.ab/head; cp -r .deps "$OLD/.deps"
C="-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF"
cmake -S . -B build-h200 $C > "$O/cfg.log" 2>&1
cmake -S "$OLD" -B "$OLD/build" $C >> "$O/cfg.log" 2>&1
(timeout 200 cmake --build "$OLD/build" -j6 --target api_host_path_bench > "$O/build_old.log" 2>&1; echo "build old rc=$? at $(date -u +%T)" >> "$O/record.txt") &
timeout 200 cmake --build build-h200 -j12 > "$O/build.log" 2>&1; echo "build rc=$? at $(date -u +%T)" >> "$O/record.txt"
wait
cat "$O/record.txt"
mkdir -p "$O/b1"
for i in 1 2 3; do
  for side in old new; do
    b=build-h200; [ $side = old ] && b=$OLD/build
    timeout 70 $b/bench/api_host_path_bench --sections b1 > "$O/b1/${side}_$i.txt" 2>&1
    echo "b1 $side $i rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
    grep -E "^floor B=1  |^runtime B=1 graph|executor" "$O/b1/${side}_$i.txt" | grep -v means | head -10
  done
done
mkdir -p "$O/tests"
for t in cuda_executor_gpu_test api_runtime_gpu_test api_wiring_gpu_test api_device_memory_gpu_test api_sequence_safety_gpu_test api_c_test; do
  timeout 150 build-h200/tests/$t > "$O/tests/$t.log" 2>&1 &
done
wait
for f in "$O"/tests/*.log; do echo "$(basename $f) $(grep -E '^\[  (PASSED|FAILED|SKIPPED) *\] [0-9]' $f | tr '\n' ' ')" | tee -a "$O/record.txt"; done
timeout 120 build-h200/bench/api_host_path_bench --out "$O/host_path" --commit "$COMMIT" > "$O/host_path.txt" 2>&1
echo "host path record rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
grep -E "host cpu per request|saturation B=|Decode|floor" "$O/host_path.txt" | head -20
echo "end $(date -u +%FT%TZ)" >> "$O/record.txt"
mv "$O/host_path.txt" "$O/host_path/" 2>/dev/null
tar -C "$O" -czf "$O/p.tgz" b1 tests build.log build_old.log cfg.log && rm -rf "$O/b1" "$O/tests" "$O"/build*.log "$O/cfg.log"
