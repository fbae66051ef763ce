#!/usr/bin/env bash
# Kernels engineer's one-call GPU run: build the kernel targets, run the kernel tests (CPU and
# GPU), optionally compute-sanitizer, then the decode benchmark and the SDPA comparison.
#   bench/kernels_device_run.sh OUT_DIR [tests|sanitize|bench|all]...   (default: all)
set -uo pipefail
out=${1:?output dir}; shift
steps=${*:-all}
has() { [[ " $steps " == *" all "* || " $steps " == *" $1 "* ]]; }
build=${BUILD_DIR:-build-dev}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee "$out/device.txt"
# CMake 3.25 knows no CUDA20 flag for nvcc; give it the one nvcc takes.
cmake -S . -B "$build" -G Ninja -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DCMAKE_CUDA20_STANDARD_COMPILE_OPTION=-std=c++20 \
  -DCMAKE_CUDA20_EXTENSION_COMPILE_OPTION=-std=c++20 >"$out/build.log" 2>&1 &&
  cmake --build "$build" -j16 --target reference_test decode_variants_test decode_gpu_test \
    kernels_decode_bench >>"$out/build.log" 2>&1 || { tail -50 "$out/build.log"; exit 1; }
rc=0
if has tests; then
  for t in reference_test decode_variants_test decode_gpu_test; do
    "$build/tests/$t" --gtest_brief=1 ${GTEST_FILTER:+--gtest_filter=$GTEST_FILTER} 2>&1 |
      tee -a "$out/tests.log" | tail -4 || rc=1
  done
fi
if has bench; then
  "$build/bench/kernels_decode_bench" ${BENCH_FILTER:+--benchmark_filter=$BENCH_FILTER} \
    --benchmark_out="$out/kernels_decode.json" --benchmark_out_format=json \
    --benchmark_counters_tabular=true 2>&1 | tee "$out/kernels_decode.txt" | grep -E "median|Ceiling|ERROR" 
  PYTHONUNBUFFERED=1 python3 bench/sdpa_compare.py --out "$out/sdpa_compare.json" \
    --gbench-json "$out/kernels_decode.json" 2>&1 | tee "$out/sdpa_compare.txt"
fi
if has sanitize; then
  filt=${SANITIZE_FILTER:-'AllCombos/*D128_bs16*:Variants/DecodeEdgeTest.GraphCaptured*:Variants/DecodeEdgeTest.Peaky*:AllCombos/*D64_bs8_G8*:AllCombos/*D256_bs64_G2*'}
  for tool in memcheck racecheck initcheck; do
    echo "== timeout ${SANITIZE_TIMEOUT:-170} compute-sanitizer --tool $tool" | tee -a "$out/sanitize.log"
    timeout ${SANITIZE_TIMEOUT:-170} compute-sanitizer --tool $tool --error-exitcode 9 "$build/tests/decode_gpu_test" \
      --gtest_brief=1 --gtest_filter="$filt" >>"$out/sanitize.log" 2>&1
    echo "rc=$?" | tee -a "$out/sanitize.log"
    grep -E "ERROR SUMMARY|PASSED|FAILED" "$out/sanitize.log" | tail -3
  done
fi
exit $rc
