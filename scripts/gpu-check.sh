#!/usr/bin/env bash
# On a GPU machine: builds attnrt with CUDA (sm_90 by default), runs every test (GPU ones
# included), runs compute-sanitizer (memcheck, racecheck, initcheck) over the kernel tests, and
# runs the benchmarks to JSON. Results go to ${OUT_DIR:-bench/results/raw}/; a summary record
# (device, date, commit) is written beside them.
#   scripts/gpu-check.sh [--no-bench] [--no-sanitizer] [--bench-filter REGEX]
set -uo pipefail
cd "$(dirname "$0")/.."
run_bench=1; run_sanitizer=1; bench_filter="."
while (($#)); do
  case "$1" in
    --no-bench) run_bench=0 ;;
    --no-sanitizer) run_sanitizer=0 ;;
    --bench-filter) bench_filter="$2"; shift ;;
    -h|--help) sed -n '2,6p' "$0"; exit 0 ;;
    *) echo "gpu-check: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
out=${OUT_DIR:-bench/results/raw}
mkdir -p "$out"
build=${BUILD_DIR:-build-gpu}
status=0
log() { echo "[gpu-check $(date +%H:%M:%S)] $*"; }

device=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
dirty=$(git status --porcelain 2>/dev/null | grep -qv '^??' && echo "+dirty" || true)
log "device: ${device:-none}; commit ${commit}${dirty}"

log "build ($build)"
BUILD_DIR=$build JOBS=${JOBS:-$(nproc)} ./scripts/build.sh 2>&1 | tail -3 || { log "BUILD FAILED"; exit 1; }

log "ctest"
(cd "$build" && ctest --output-on-failure -j 4 --timeout 600 2>&1) | tee "$out/ctest.log" | tail -15
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1

if ((run_sanitizer)) && command -v compute-sanitizer >/dev/null; then
  for tool in memcheck racecheck initcheck; do
    for t in "$build"/tests/*_gpu_test; do
      [ -x "$t" ] || continue
      log "compute-sanitizer --tool $tool $(basename "$t")"
      compute-sanitizer --tool "$tool" --error-exitcode 1 "$t" --gtest_brief=1 \
        ${SANITIZER_FILTER:+--gtest_filter=$SANITIZER_FILTER} >"$out/sanitizer_${tool}_$(basename "$t").log" 2>&1 \
        && log "  0 errors" || { log "  ERRORS (see log)"; tail -20 "$out/sanitizer_${tool}_$(basename "$t").log"; status=1; }
    done
  done
fi

if ((run_bench)); then
  for b in "$build"/bench/*_bench; do
    [ -x "$b" ] || continue
    name=$(basename "$b")
    log "benchmark $name"
    "$b" --benchmark_filter="$bench_filter" --benchmark_out="$out/$name.json" \
      --benchmark_out_format=json --benchmark_counters_tabular=true 2>&1 | tail -40 || status=1
  done
fi

{
  echo "device: ${device:-none}"
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "commit: ${commit}${dirty}"
  echo "status: $([ $status -eq 0 ] && echo pass || echo FAIL)"
} >"$out/record.txt"
cat "$out/record.txt"
exit $status
