#!/bin/bash
# Fifth device call (H200, the session's last ~270 s): the cluster merge (010c8e9), first run on
# a GPU: its tests and the CTA trace test, then the trace of B=1 with and without it.
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; cd "$(dirname "$0")/../../.."
echo "commit $COMMIT, start $(date -u +%FT%TZ)" > "$O/record.txt"
C="-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF"
cmake -S . -B build-h200 $C > "$O/cfg.log" 2>&1
cmake --build build-h200 -j16 --target decode_gpu_test kernels_cta_trace_bench > "$O/build.log" 2>&1; echo "build rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
timeout 70 build-h200/tests/decode_gpu_test --gtest_filter='*ClusterMerge*:*CtaTrace*' > "$O/cluster_tests.txt" 2>&1; echo "tests rc=$? $(grep -E '^\[  PASSED|FAILED|SKIPPED' "$O/cluster_tests.txt" | head -4 | tr '\n' ' ')" | tee -a "$O/record.txt"
timeout 60 build-h200/bench/kernels_cta_trace_bench --contexts 512,1024,4096 --configs 8:0:256,8:0:256:1,4:0:128,4:0:128:1 --commit $COMMIT --json-out "$O/b1_cluster.json" > "$O/b1_cluster.txt" 2>&1; echo "trace rc=$?" | tee -a "$O/record.txt"
echo "end $(date -u +%FT%TZ)" >> "$O/record.txt"
grep -E "FAILED|Failure" -A4 "$O/cluster_tests.txt" | head -20; cut -c1-330 "$O/b1_cluster.txt"
tar -czf "$O.tgz" -C "$(dirname "$O")" "$(basename "$O")" && rm -rf "$O"
