#!/bin/bash
# Fourth device call: the merge in the decode kernel with the committed launch table (the
# re-sweep of run3 was not adopted): kernels_decode_bench old (1512790) / new / old again alone
# on the GPU with PyTorch SDPA in the same call; then api_host_path_bench's floor and B=1 rows,
# old / new / old / new (the old binary is cut after its B=1 rows: it has no --b1-only); then
# compute-sanitizer racecheck over a smaller cross-section than run3's (which ran out of time).
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; cd "$(dirname "$0")/../../.."
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > "$O/device.txt"
echo "commit $COMMIT (old: 1512790), start $(date -u +%FT%TZ)" > "$O/record.txt"
cfg() { cmake -S "$1" -B "$2" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF; }
cfg . build-gpu > "$O/cfg.log" 2>&1; cfg build-snap/old build-old > "$O/cfg_old.log" 2>&1
( timeout 250 cmake --build build-old -j5 --target kernels_decode_bench api_host_path_bench > "$O/build_old.log" 2>&1; echo "old build rc=$?" >> "$O/record.txt" ) &
timeout 250 cmake --build build-gpu -j11 --target kernels_decode_bench api_host_path_bench decode_gpu_test > "$O/build.log" 2>&1
echo "build rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
wait
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
python3 bench/results/2026-11-26_h100_merge-in-kernel/ab.py "$O" | tee "$O/ab.txt"
grep -A9 "winner" "$O/sdpa_compare.txt"
for v in old new old2 new2; do
  if [ ${v%2} = old ]; then
    stdbuf -oL timeout 45 build-old/bench/api_host_path_bench > "$O/host_$v.txt" 2>&1
  else
    timeout 60 build-gpu/bench/api_host_path_bench --b1-only > "$O/host_$v.txt" 2>&1
  fi
  echo "host path $v rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
done
grep -H -E "floor B=1|runtime B=1|of it" "$O"/host_*.txt
cd build-gpu
RF='AllCombos/*D128_bs16_G8*:AllCombos/*D128_bs16_G1*:Variants/DecodeEdgeTest.GraphCaptured*:Settings/*D128_G8_warps8_ctas16_minsplit128'
timeout 120 compute-sanitizer --tool racecheck --error-exitcode 9 ./tests/decode_gpu_test --gtest_filter="$RF" > "$O/san_racecheck.log" 2>&1
echo "san racecheck rc=$?" >> "$O/record.txt"
echo "racecheck: $(grep -E '^\[  (PASSED|FAILED)  \]' $O/san_racecheck.log | tr '\n' ' ') $(grep -E 'RACECHECK SUMMARY' $O/san_racecheck.log | tr '\n' ' ')" | tee -a "$O/record.txt"
echo "end $(date -u +%FT%TZ)" >> "$O/record.txt"
