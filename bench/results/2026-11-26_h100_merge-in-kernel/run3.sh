#!/bin/bash
# Third device call: re-sweep the FP16 launch table with the merge in the decode kernel (the
# trade-off of more splits changed: no merge kernel to pay for), adopt the picks in a second
# build, then kernels_decode_bench old (1512790) / new (swept table) / old again alone on the
# GPU, PyTorch SDPA in the same call, and compute-sanitizer over decode_gpu_test's cross-section.
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; cd "$(dirname "$0")/../../.."
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > "$O/device.txt"
echo "commit $COMMIT (old: 1512790), start $(date -u +%FT%TZ)" > "$O/record.txt"
cfg() { cmake -S "$1" -B "$2" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF; }
cfg . build-gpu > "$O/cfg.log" 2>&1; cfg build-snap/old build-old > "$O/cfg_old.log" 2>&1
( timeout 250 cmake --build build-old -j5 --target kernels_decode_bench > "$O/build_old.log" 2>&1; echo "old build rc=$?" >> "$O/record.txt" ) &
timeout 250 cmake --build build-gpu -j11 --target kernels_launch_sweep_bench kernels_decode_bench decode_gpu_test > "$O/build.log" 2>&1
echo "build rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
wait
timeout 90 build-gpu/bench/kernels_launch_sweep_bench --commit $COMMIT --table-out "$O/tc_launch_table.inc" \
  --json-out "$O/sweep.json" > "$O/sweep.txt" 2> "$O/sweep.progress"
echo "sweep rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
cp "$O/tc_launch_table.inc" kernels/tc_launch_table.inc && diff build-snap/old/kernels/tc_launch_table.inc kernels/tc_launch_table.inc | grep '^>' | head -30
timeout 100 cmake --build build-gpu -j16 --target kernels_decode_bench decode_gpu_test >> "$O/build.log" 2>&1
echo "rebuild with the swept table rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
F='BM_ReadCeiling|(b1_h32_t4096|b1_h32_t65536|b32_h8_t128_d64|b32_h8_t128_d64_append|gqa32_8_b32_t4096|gqa64_8_b32_t4096|mha_b32_h32_t4096_bs16)/default'
for v in old new old2; do
  b=build-gpu; [ $v != new ] && b=build-old
  timeout 75 $b/bench/kernels_decode_bench --benchmark_filter="$F" \
    --benchmark_out="$O/bench_$v.json" --benchmark_out_format=json > /dev/null 2>&1
  echo "bench $v rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
done
timeout 60 python3 bench/sdpa_compare.py --out "$O/sdpa_compare.json" --gbench-json "$O/bench_new.json" \
  --shapes b1_h32_t4096,b1_h32_t65536,b32_h8_t128_d64,b32_h8_t128_d64_append,gqa32_8_b32_t4096,gqa64_8_b32_t4096,mha_b32_h32_t4096_bs16 \
  > "$O/sdpa_compare.txt" 2>&1
echo "sdpa_compare rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
python3 - "$O" <<'PY' | tee "$O/ab.txt"
import json, sys
o = sys.argv[1]
rows = {}
for v in ("old", "new", "old2"):
    try: d = json.load(open(f"{o}/bench_{v}.json"))
    except Exception as e: print(v, "missing", e); continue
    for b in d["benchmarks"]:
        if b["name"].endswith("_median"):
            rows.setdefault(b["name"].split("/")[1], {})[v] = b["us"]
print(f"{'shape':28s} {'old us':>9s} {'new us':>9s} {'old2 us':>9s} {'new/old':>8s}")
for s, r in rows.items():
    old = min(r.get("old", 1e9), r.get("old2", 1e9))
    print(f"{s:28s} {r.get('old',0):9.2f} {r.get('new',0):9.2f} {r.get('old2',0):9.2f} {r.get('new',0)/old:8.3f}")
PY
grep -A12 "winner" "$O/sdpa_compare.txt"
cd build-gpu
DF='AllCombos/*D128_bs16*:Variants/DecodeEdgeTest.GraphCaptured*:Variants/DecodeEdgeTest.Peaky*:AllCombos/*D64_bs8_G8*:AllCombos/*D256_bs64_G2*:Settings/*D128_G8_warps8_ctas16_minsplit128:Settings/*D64_G1_warps2_ctas0_minsplit1024:TunedLaunchTableTest.*'
for tool in memcheck racecheck synccheck initcheck; do
  ( timeout 150 compute-sanitizer --tool $tool --error-exitcode 9 ./tests/decode_gpu_test --gtest_filter="$DF" > "$O/san_$tool.log" 2>&1; echo "san $tool rc=$?" >> "$O/record.txt" ) &
done
wait
for tool in memcheck racecheck synccheck initcheck; do
  echo "$tool: $(grep -E '^\[  (PASSED|FAILED)  \]' $O/san_$tool.log | tr '\n' ' ') $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $O/san_$tool.log | tr '\n' ' ')" | tee -a "$O/record.txt"
done
echo "end $(date -u +%FT%TZ)" >> "$O/record.txt"
