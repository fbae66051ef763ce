#!/bin/bash
# Third device call (H200): the re-swept table (73c27ec) against the one before it (d7fb042's
# kernels in .ab/kernels): kernel-ab.sh over the rows whose table rows changed, two rounds, and
# SDPA on them in the same call; then the host side: api_host_path_bench --sections b1 and
# scheduler_intake_bench's BM_DecodeInline alternating this tree and the same tree with
# d7fb042's check_finite scan (.ab/finite.h), twice. Outputs in one tarball.
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; cd "$(dirname "$0")/../../.."
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.total --format=csv > "$O/device.txt"
echo "commit $COMMIT (old kernels: d7fb042 in .ab/kernels; old scan .ab/finite.h), start $(date -u +%FT%TZ)" > "$O/record.txt"
# The old scan's tree, built first (nothing timed while it builds).
OT=/tmp/old-scan; rm -rf $OT; mkdir -p $OT
tar --exclude=./bench/results --exclude='./build*' --exclude=./.ab -cf - . | tar -xf - -C $OT
cp .ab/finite.h $OT/api/internal/finite.h
cmake -S $OT -B $OT/build -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF > "$O/cfg_oldscan.log" 2>&1
timeout 200 cmake --build $OT/build -j16 --target api_host_path_bench scheduler_intake_bench > "$O/build_oldscan.log" 2>&1
echo "build (old scan) rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
timeout 420 scripts/kernel-ab.sh .ab/kernels "$O/ab" --rounds 2 \
  --filter 'BM_ReadCeiling|/(b1_h32_t4096|b1_h32_t65536|mha_b32_h32_t4096_bs16|gqa32_8_b32_t4096|gqa64_8_b32_t4096|b8_h32_t16384|b128_h32_t1024|gqa16_8_b32_t4096_d256|mha_b32_h32_t4096_d64|b32_h8_t128_d64)/default/' \
  --targets "api_host_path_bench scheduler_intake_bench" > "$O/ab.log" 2>&1; echo "kernel-ab rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
PYTHONUNBUFFERED=1 timeout 120 python3 bench/sdpa_compare.py --out "$O/sdpa_compare.json" --gbench-json "$O/ab/new_2.json" \
  --shapes b1_h32_t4096,b1_h32_t65536,mha_b32_h32_t4096_bs16,gqa32_8_b32_t4096,gqa64_8_b32_t4096,b8_h32_t16384,b128_h32_t1024,gqa16_8_b32_t4096_d256,mha_b32_h32_t4096_d64,b32_h8_t128_d64 > "$O/sdpa_compare.txt" 2>&1; echo "sdpa rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
for i in 1 2; do
  for side in oldscan new; do
    B=build-ab-new; [ $side = oldscan ] && B=$OT/build
    timeout 60 $B/bench/api_host_path_bench --sections b1 --commit $COMMIT > "$O/b1_${side}_$i.txt" 2>&1
    echo "b1 $side $i rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
    timeout 60 $B/bench/scheduler_intake_bench --benchmark_filter=DecodeInline --benchmark_repetitions=3 \
      --benchmark_report_aggregates_only=true > "$O/decode_inline_${side}_$i.txt" 2>&1
    echo "decode_inline $side $i rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
  done
done
echo "end $(date -u +%FT%TZ)" >> "$O/record.txt"
cat "$O/ab/ab.txt"; tail -16 "$O/sdpa_compare.txt"
for f in "$O"/b1_*_?.txt; do echo "== $f"; grep -E "^floor B=1 |runtime B=1|of Decode" "$f"; done
for f in "$O"/decode_inline_*.txt; do echo "== $f"; grep median "$f"; done
tar -czf "$O.tgz" -C "$(dirname "$O")" "$(basename "$O")" && rm -rf "$O"
