#!/bin/bash
# Second device call (H100): why chunks did not shorten a lone device-memory piece (r1). Gathers
# at the greatest priority in the chunked graph; a lone B=128 piece through Executor::Run by
# device_io_chunk_rows (0, 32, 16, 64, alternating, twice) and a lone host-memory piece; then an
# nsys trace of the same (--quick) and each variant's median piece timeline (pieces.py).
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; cd "$(dirname "$0")/../../.."
R=bench/results/2026-11-27_h100_device-io-chunks
B=/tmp/attnrt-build  # DCHECKS off
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > "$O/device.txt"
echo "commit $COMMIT, start $(date -u +%FT%TZ)" > "$O/record.txt"
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF > "$O/cfg.log" 2>&1
timeout 300 cmake --build $B -j16 --target api_host_path_bench cuda_executor_gpu_test > "$O/build.log" 2>&1
echo "build rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
timeout 100 $B/tests/cuda_executor_gpu_test --gtest_filter='*Chunk*:*Staging*' > "$O/cuda_executor_gpu_test.txt" 2>&1
echo "cuda_executor_gpu_test (filtered) rc=$? $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' $O/cuda_executor_gpu_test.txt | tr '\n' ' ')" | tee -a "$O/record.txt"
timeout 200 $B/bench/api_host_path_bench --sections none --lone-ab > "$O/lone.txt" 2>&1
echo "lone rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
grep -E "^lone" "$O/lone.txt" | tee -a "$O/record.txt"
NSYS=$(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys 2>/dev/null | head -1)
echo "nsys: $NSYS" | tee -a "$O/record.txt"
if [ -n "$NSYS" ]; then
  timeout 150 $NSYS profile -t cuda --cuda-graph-trace=node -o /tmp/lone -f true $B/bench/api_host_path_bench --sections none --lone-ab --quick > "$O/nsys.log" 2>&1
  echo "nsys rc=$?" | tee -a "$O/record.txt"
  timeout 60 $NSYS stats -r cuda_gpu_trace -f csv -o /tmp/lone /tmp/lone.nsys-rep > "$O/nsys_stats.log" 2>&1
  python3 $R/pieces.py /tmp/lone_cuda_gpu_trace.csv > "$O/pieces.txt" 2>&1
  echo "pieces rc=$?" | tee -a "$O/record.txt"; head -c 20000 "$O/pieces.txt" | grep -E "^gathers" | tee -a "$O/record.txt"
fi
echo "end $(date -u +%FT%TZ)" >> "$O/record.txt"
