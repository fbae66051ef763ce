#!/bin/bash
# First device call (H200): does launching before the pack pay? The copy-after-release kernel's
# tests (plain and under memcheck), then api_host_path_bench's B=1 rows twice, whose new
# "step, pack ..." rows time the host's pack with the bare step, before the launch or after it
# behind the release. Outputs in one tarball.
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; cd "$(dirname "$0")/../../.."
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$O/device.txt"
date -u +%FT%TZ >> "$O/device.txt"
cfg=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF)
cmake -S . -B /tmp/b "${cfg[@]}" > "$O/cfg.log" 2>&1
timeout 200 cmake --build /tmp/b -j16 --target api_host_path_bench batch_io_test > "$O/build.log" 2>&1
echo "build rc=$? at $(date -u +%T)" | tee "$O/record.txt"
timeout 60 /tmp/b/tests/batch_io_test > "$O/batch_io_test.txt" 2>&1
echo "batch_io_test rc=$?" | tee -a "$O/record.txt"
timeout 120 compute-sanitizer --tool memcheck /tmp/b/tests/batch_io_test --gtest_filter='CopyAfterRelease*' > "$O/memcheck.txt" 2>&1
echo "memcheck rc=$?" | tee -a "$O/record.txt"
for i in 1 2; do
  timeout 120 /tmp/b/bench/api_host_path_bench --sections b1 --commit $COMMIT > "$O/b1_$i.txt" 2>&1
  echo "b1 $i rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
done
echo "end $(date -u +%FT%TZ)" >> "$O/record.txt"
tail -4 "$O/batch_io_test.txt"; tail -3 "$O/memcheck.txt"
for f in "$O"/b1_?.txt; do echo "== $f"; grep -E "^floor B=1 |step|runtime B=1 graph|of Decode|Decode" "$f"; done
tar -czf "$O.tgz" -C "$(dirname "$O")" "$(basename "$O")" && rm -rf "$O"
