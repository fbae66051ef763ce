#!/bin/bash
# Second device call (H200, warm after r1, whose table and sweep output did not come back: the
# device tool returns at most a few files a call, so this one leaves a tarball): the same FP16
# sweep again with r1's build of the old tree, its table adopted and launch_table_test with it.
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; cd "$(dirname "$0")/../../.."
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.total --format=csv > "$O/device.txt"
echo "commit $COMMIT, start $(date -u +%FT%TZ)" > "$O/record.txt"
OLD=$PWD/build-h200-old NEW=$PWD/build-h200-new
cfg=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF)
cmake -S . -B $OLD "${cfg[@]}" > "$O/cfg_old.log" 2>&1
timeout 240 cmake --build $OLD -j16 --target kernels_launch_sweep_bench > "$O/build_old.log" 2>&1
echo "build (old table) rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
timeout 300 $OLD/bench/kernels_launch_sweep_bench --commit "$COMMIT" \
  --table-out "$O/h200_fp16.inc" --json-out "$O/kernels_launch_sweep.json" \
  > "$O/kernels_launch_sweep.txt" 2> "$O/kernels_launch_sweep.progress"
echo "sweep rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
cp kernels/launch_tables/h200_fp16.inc "$O/h200_fp16_old.inc"
cp "$O/h200_fp16.inc" kernels/launch_tables/h200_fp16.inc
diff "$O/h200_fp16_old.inc" "$O/h200_fp16.inc" > "$O/table.diff"
cmake -S . -B $NEW "${cfg[@]}" > "$O/cfg_new.log" 2>&1
timeout 200 cmake --build $NEW -j16 --target launch_table_test > "$O/build_new.log" 2>&1
echo "build (new table) rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
timeout 30 $NEW/tests/launch_table_test > "$O/launch_table_test.log" 2>&1
echo "launch_table_test rc=$? $(grep -E '^\[  (PASSED|FAILED) ' "$O/launch_table_test.log" | tr '\n' ' ')" | tee -a "$O/record.txt"
echo "end $(date -u +%FT%TZ)" >> "$O/record.txt"
grep -c . "$O/table.diff"
tar -czf "$O.tgz" -C "$(dirname "$O")" "$(basename "$O")" && rm -rf "$O"
