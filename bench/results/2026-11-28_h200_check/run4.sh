#!/bin/bash
# Fourth device call (H200, the session's last device time): the four compute-sanitizer tools over
# every distinct configuration of both models' launch tables (TunedLaunchTableTest, both families;
# the H200 table brings 10 configurations the H100's has not), in parallel, each cut at 270 s.
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; cd "$(dirname "$0")/../../.."
B=$PWD/build-san
nvidia-smi --query-gpu=name,driver_version --format=csv > "$O/device.txt"
echo "commit $COMMIT, start $(date -u +%FT%TZ)" > "$O/record.txt"
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=ON > "$O/build.log" 2>&1
timeout 200 cmake --build $B -j16 --target decode_gpu_test >> "$O/build.log" 2>&1
echo "build rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
run() {  # tool binary filter
  timeout 270 compute-sanitizer --tool $1 --error-exitcode 9 $B/tests/$2 --gtest_filter="$3" \
    > "$O/${1}_$2.log" 2>&1
  echo "$1 $2 rc=$? $(grep 'ERROR SUMMARY\|RACECHECK SUMMARY' "$O/${1}_$2.log" | tail -1); $(grep -E '^\[  (PASSED|FAILED) ' "$O/${1}_$2.log" | tr '\n' ' ')" >> "$O/record.txt"
}
for tool in memcheck racecheck initcheck synccheck; do
  run $tool decode_gpu_test 'TunedLaunchTableTest.*:Families/*' &
done
wait
echo "end $(date -u +%FT%TZ)" >> "$O/record.txt"
cat "$O/record.txt"
