#!/bin/bash
# Fourth device call (H200): every test with DCHECKs on the re-swept table and the AVX2 scan
# (gpu-check.sh --phase tests), then the Runtime's B=1 rows and BM_DecodeInline alternating this
# tree (Release) and the same tree with d7fb042's check_finite scan (.ab/finite.h), twice, as far
# as the call's time goes. Outputs in one tarball.
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; cd "$(dirname "$0")/../../.."
T0=$(date +%s)
OUT_DIR="$O/tests" ATTNRT_COMMIT=$COMMIT BUILD_DIR=/tmp/attnrt-build-gpu timeout 400 scripts/gpu-check.sh --phase tests > "$O/gpu-check-stdout.txt" 2>&1
echo "gpu-check tests rc=$? at $(date -u +%T)" | tee "$O/record.txt"
OT=/tmp/old-scan; rm -rf $OT; mkdir -p $OT
tar --exclude=./bench/results --exclude='./build*' --exclude=./.ab -cf - . | tar -xf - -C $OT
cp .ab/finite.h $OT/api/internal/finite.h
cfg=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF)
cmake -S $OT -B $OT/build "${cfg[@]}" > "$O/cfg_oldscan.log" 2>&1
cmake -S . -B build-rel-new "${cfg[@]}" > "$O/cfg_new.log" 2>&1
(timeout 150 cmake --build $OT/build -j8 --target api_host_path_bench scheduler_intake_bench > "$O/build_oldscan.log" 2>&1) &
timeout 150 cmake --build build-rel-new -j8 --target api_host_path_bench scheduler_intake_bench > "$O/build_new.log" 2>&1
wait
echo "builds done at $(date -u +%T)" | tee -a "$O/record.txt"
for i in 1 2; do
  for side in oldscan new; do
    [ $(( $(date +%s) - T0 )) -gt 540 ] && break 2
    B=build-rel-new; [ $side = oldscan ] && B=$OT/build
    timeout 30 $B/bench/api_host_path_bench --sections b1 --commit $COMMIT > "$O/b1_${side}_$i.txt" 2>&1
    echo "b1 $side $i rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
    timeout 30 $B/bench/scheduler_intake_bench --benchmark_filter=DecodeInline --benchmark_repetitions=3 \
      --benchmark_report_aggregates_only=true > "$O/decode_inline_${side}_$i.txt" 2>&1
    echo "decode_inline $side $i rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
  done
done
echo "end $(date -u +%FT%TZ)" >> "$O/record.txt"
tail -5 "$O/gpu-check-stdout.txt"; grep -E "status|tests passed|tests failed" "$O"/tests/record.txt "$O"/tests/ctest.log 2>/dev/null | tail -4
for f in "$O"/b1_*_?.txt; do echo "== $f"; grep -E "^floor B=1 |runtime B=1 graph|of Decode" "$f"; done
for f in "$O"/decode_inline_*.txt; do echo "== $f"; grep median "$f" | cut -c1-90; done
tar -czf "$O.tgz" -C "$(dirname "$O")" "$(basename "$O")" && rm -rf "$O"
