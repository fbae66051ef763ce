#!/bin/bash
# First device call (H200): the FP16 launch sweep on this GPU with the merge of 9e5c940 and the
# short class scored at 256/512/1024/2048 tokens (2ba58c2), its table adopted into this copy of the
# tree; then the old table's build and the new one's alternated twice: the B=1 phase trace at
# T=512..4096 and the Runtime's B=1 rows (api_host_path_bench --sections b1; the runtime's B=1
# step is T=512); launch_table_test with the new table.
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; cd "$(dirname "$0")/../../.."
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.total --format=csv > "$O/device.txt"
echo "commit $COMMIT, start $(date -u +%FT%TZ)" > "$O/record.txt"
OLD=$PWD/build-h200-old NEW=$PWD/build-h200-new
cfg=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF)
tg="kernels_launch_sweep_bench kernels_cta_trace_bench api_host_path_bench"
cmake -S . -B $OLD "${cfg[@]}" > "$O/cfg_old.log" 2>&1
timeout 240 cmake --build $OLD -j16 --target $tg > "$O/build_old.log" 2>&1
echo "build (old table) rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
timeout 300 $OLD/bench/kernels_launch_sweep_bench --commit "$COMMIT" \
  --table-out "$O/h200_fp16.inc" --json-out "$O/kernels_launch_sweep.json" \
  > "$O/kernels_launch_sweep.txt" 2> "$O/kernels_launch_sweep.progress"
echo "sweep rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
cp kernels/launch_tables/h200_fp16.inc "$O/h200_fp16_old.inc"
cp "$O/h200_fp16.inc" kernels/launch_tables/h200_fp16.inc
diff "$O/h200_fp16_old.inc" "$O/h200_fp16.inc" > "$O/table.diff"
cmake -S . -B $NEW "${cfg[@]}" > "$O/cfg_new.log" 2>&1
timeout 200 cmake --build $NEW -j16 --target $tg launch_table_test > "$O/build_new.log" 2>&1
echo "build (new table) rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
timeout 30 $NEW/tests/launch_table_test > "$O/launch_table_test.log" 2>&1
echo "launch_table_test rc=$? $(grep -E '^\[  (PASSED|FAILED) ' "$O/launch_table_test.log" | tr '\n' ' ')" | tee -a "$O/record.txt"
for i in 1 2; do
  for side in old new; do
    B=$OLD; [ $side = new ] && B=$NEW
    timeout 60 $B/bench/kernels_cta_trace_bench --contexts 512,1024,2048,4096 --commit $COMMIT \
      --json-out "$O/trace_${side}_$i.json" > "$O/trace_${side}_$i.txt" 2>&1
    echo "trace $side $i rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
    timeout 60 $B/bench/api_host_path_bench --sections b1 --commit $COMMIT > "$O/b1_${side}_$i.txt" 2>&1
    echo "b1 $side $i rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
  done
done
echo "end $(date -u +%FT%TZ)" >> "$O/record.txt"
cat "$O/table.diff" | head -60
for f in "$O"/trace_*_?.txt; do echo "== $f"; cut -c1-400 "$f" | head -30; done
for f in "$O"/b1_*_?.txt; do echo "== $f"; grep -iE "floor|p50|Decode|ratio" "$f" | head -12; done
