#!/bin/bash
# Fourth device call (H100): request records staged in mapped memory are handed out before heap
# ones (a drained backlog no longer leaves the heap records in use); capacity = the better of two
# closed-loop runs; per-piece memory kinds printed. Saturation twice, then the host path's record
# (the benchmark writes summary.json).
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; cd "$(dirname "$0")/../../.."
B=/tmp/attnrt-build-bench  # DCHECKS off
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > "$O/device.txt"
echo "commit $COMMIT, start $(date -u +%FT%TZ)" > "$O/record.txt"
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF > "$O/cfg.log" 2>&1
timeout 300 cmake --build $B -j16 --target api_host_path_bench request_record_test > "$O/build.log" 2>&1
echo "build rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
timeout 60 $B/tests/request_record_test --gtest_brief=1 > "$O/request_record_test.txt" 2>&1
echo "request_record_test rc=$? $(grep -E '^\[  (PASSED|FAILED) ' "$O/request_record_test.txt" | tr '\n' ' ')" | tee -a "$O/record.txt"
for round in 1 2; do
  timeout 120 $B/bench/api_host_path_bench --sections saturation > "$O/saturation_$round.txt" 2>&1
  echo "round $round rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
  grep -E "pieces|of the pieces|capacity run|saturation B" "$O/saturation_$round.txt" | tee -a "$O/record.txt"
done
mkdir -p "$O/host-path"
timeout 240 $B/bench/api_host_path_bench --out "$O/host-path" --commit $COMMIT > "$O/host-path/host_path.txt" 2>&1
echo "api_host_path_bench rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
grep -E "pieces|of the pieces|capacity run|saturation B|runtime B=1|host cpu per" "$O/host-path/host_path.txt" | tee -a "$O/record.txt"
cat "$O/host-path/summary.json" >> "$O/record.txt"
echo "end $(date -u +%FT%TZ)" >> "$O/record.txt"
