#!/bin/bash
# Seventh device call (2026-11-26): the in-kernel split merge out of line (a __noinline__ worker
# with scalar arguments, working tree) against the inlined one (702aefe, build-snap/inline) and
# the separate merge kernel (1512790, build-snap/old): kernels_decode_bench rows alone on the
# GPU, old / inline / out-of-line / old again; then the split-KV decode tests of the working tree
# and compute-sanitizer memcheck over a cross-section.
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; cd "$(dirname "$0")/../../.."
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > "$O/device.txt"
echo "working tree on $COMMIT, start $(date -u +%FT%TZ)" > "$O/record.txt"
cfg() { cmake -S "$1" -B "$2" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF; }
cfg . build-gpu > "$O/cfg.log" 2>&1; cfg build-snap/inline build-inline > /dev/null 2>&1; cfg build-snap/old build-old > /dev/null 2>&1
( timeout 250 cmake --build build-old -j4 --target kernels_decode_bench > "$O/build_old.log" 2>&1; echo "old build rc=$?" >> "$O/record.txt" ) &
( timeout 250 cmake --build build-inline -j4 --target kernels_decode_bench > "$O/build_inline.log" 2>&1; echo "inline build rc=$?" >> "$O/record.txt" ) &
timeout 250 cmake --build build-gpu -j8 --target kernels_decode_bench decode_gpu_test > "$O/build.log" 2>&1
echo "build rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
wait
F='BM_ReadCeiling|(b1_h32_t4096|b1_h32_t65536|b32_h8_t128_d64|b32_h8_t128_d64_append|mha_b32_h32_t4096_bs16)/default'
for v in old inline new old2; do
  case $v in old|old2) b=build-old;; inline) b=build-inline;; new) b=build-gpu;; esac
  timeout 60 $b/bench/kernels_decode_bench --benchmark_filter="$F" \
    --benchmark_out="$O/bench_$v.json" --benchmark_out_format=json > /dev/null 2>&1
  echo "bench $v rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
done
python3 - "$O" <<'PY' | tee "$O/ab.txt"
import json, sys
o = sys.argv[1]; rows = {}; vs = ("old", "inline", "new", "old2")
for v in vs:
    try: d = json.load(open(f"{o}/bench_{v}.json"))
    except Exception as e: print(v, "missing:", e); continue
    for b in d["benchmarks"]:
        if b["name"].endswith("_median"): rows.setdefault(b["name"].split("/")[1], {})[v] = b["us"]
print(f"{'shape':26s}" + "".join(f"{v:>9s}" for v in vs) + "  out-of-line/best old")
for s, r in rows.items():
    best = min(r.get("old", 1e9), r.get("old2", 1e9))
    print(f"{s:26s}" + "".join(f"{r.get(v, 0):9.2f}" for v in vs) + f"  {r.get('new', 0) / best:8.3f}")
PY
cd build-gpu
for i in 0 1 2; do
  ( GTEST_SHARD_INDEX=$i GTEST_TOTAL_SHARDS=3 timeout 150 ./tests/decode_gpu_test --gtest_filter='AllCombos/*split_kv*:Variants/DecodeEdgeTest.*/split_kv*:TunedLaunchTableTest.*' > "$O/decode_split_$i.log" 2>&1
    echo "decode split-KV tests shard $i rc=$? $(grep -E '^\[  (PASSED|FAILED)  \]' $O/decode_split_$i.log | tr '\n' ' ')" >> "$O/record.txt" ) &
done
wait
grep "decode split-KV" "$O/record.txt"
timeout 120 compute-sanitizer --tool memcheck --error-exitcode 9 ./tests/decode_gpu_test --gtest_filter='AllCombos/*split_kv*D128_bs16*:Variants/DecodeEdgeTest.GraphCaptured*:AllCombos/*split_kv*D64_bs8_G8*' > "$O/san_memcheck.log" 2>&1
echo "memcheck rc=$? $(grep -E '^\[  (PASSED|FAILED)  \]|ERROR SUMMARY' $O/san_memcheck.log | tr '\n' ' ')" | tee -a "$O/record.txt"
echo "end $(date -u +%FT%TZ)" >> "$O/record.txt"
