#!/usr/bin/env bash
# On a GPU machine: builds the GEMM-path targets, runs their tests, the three study benchmarks
# and the PyTorch SDPA script, then compute-sanitizer over the GEMM test; every log and JSON goes
# to a staging folder that is packed into ${OUT:-bench/results/raw-gemm}/gemm_results.tar.gz
# (even when a step fails or times out). Afterwards, on any machine:
#   tar xzf gemm_results.tar.gz -C /tmp/g && python3 bench/studies/make_gemm_report.py /tmp/g/gemm
# Usage: bench/studies/run_gemm_studies.sh [--help]. Environment: OUT (where the tarball goes),
# BUILD_DIR (default build-dev), BUDGET_S (default 540: no step starts that could outlive it),
# COMMIT (recorded when there is no .git), TAIL (log lines shown per step).
set -uo pipefail
case "${1:-}" in
  -h|--help) sed -n '2,/^set -/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
  "") ;;
  *) echo "run_gemm_studies.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
esac
cd "$(dirname "$0")/../.."
dest=${OUT:-bench/results/raw-gemm}
stage=$(mktemp -d)/gemm
mkdir -p "$dest" "$stage"
build=${BUILD_DIR:-build-dev}
pack() { tar czf "$dest/gemm_results.tar.gz" -C "$(dirname "$stage")" gemm; }
trap pack EXIT
log() { echo "[gemm-studies $(date +%H:%M:%S)] $*"; }
budget=${BUDGET_S:-540}  # stop starting steps that could outlive the caller's limit
step() {  # step <seconds> <log name> <command...>
  local secs=$1 name=$2; shift 2
  if ((SECONDS + 20 > budget)); then log "$name: skipped (budget)"; return 1; fi
  ((SECONDS + secs > budget)) && secs=$((budget - SECONDS))
  log "$name (limit ${secs}s)"
  timeout "$secs" "$@" >"$stage/$name.log" 2>&1
  local rc=$?
  log "  rc=$rc"; tail -n "${TAIL:-6}" "$stage/$name.log"
  pack
  return $rc
}
{
  echo "device: $(nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader 2>/dev/null | head -1)"
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  # The device machine's copy has no .git: the caller passes COMMIT.
  echo "commit: ${COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}"
  echo "nvcc: $(nvcc --version | tail -1)"
} >"$stage/record.txt"
cat "$stage/record.txt"

targets="gemm_plan_test gemm_path_gpu_test kernels_study_gemm_strategies_bench kernels_gemm_path_bench kernels_study_batching_bench"
step 60 configure cmake -S . -B "$build" -G Ninja -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DCMAKE_CUDA20_STANDARD_COMPILE_OPTION=-std=c++20 -DCMAKE_CUDA20_EXTENSION_COMPILE_OPTION=-std=c++20
TAIL=30 step 300 build cmake --build "$build" --target $targets -j "$(nproc)" || exit 1

step 60 test_plan "$build/tests/gemm_plan_test"
TAIL=25 step 120 test_gpu "$build/tests/gemm_path_gpu_test"
bench() {  # bench <seconds> <binary>
  TAIL=${TAIL:-40} step "$1" "$2" "$build/bench/$2" --benchmark_out="$stage/$2.json" \
    --benchmark_out_format=json --benchmark_counters_tabular=true
}
TAIL=40 bench 150 kernels_gemm_path_bench
TAIL=12 bench 150 kernels_study_gemm_strategies_bench
TAIL=25 bench 90 kernels_study_batching_bench
TAIL=25 step 120 sdpa_batching env PYTHONUNBUFFERED=1 python3 bench/studies/sdpa_batching.py --out "$stage/sdpa_batching.json"
if command -v compute-sanitizer >/dev/null; then
  for tool in memcheck initcheck racecheck; do
    filter='*'
    [ "$tool" = racecheck ] && filter='*Sweep*D128*:*GraphCapture*'
    TAIL=4 step 90 "sanitizer_$tool" compute-sanitizer --tool "$tool" --error-exitcode 1 \
      "$build/tests/gemm_path_gpu_test" --gtest_brief=1 --gtest_filter="$filter"
  done
fi
log done
