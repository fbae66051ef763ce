#!/usr/bin/env bash
# On a GPU machine: builds attnrt with CUDA (sm_90 unless CMAKE_CUDA_ARCHITECTURES says
# otherwise), runs every test (GPU ones included), runs compute-sanitizer (memcheck, racecheck,
# initcheck, synccheck) over the GPU tests, and runs the benchmarks to JSON, plus the PyTorch SDPA
# comparison and the batching-window sweep on the CUDA executor. Everything lands in OUT_DIR
# (default bench/results/<date>_<gpu>), with record.txt naming device, date and commit.
#
#   scripts/gpu-check.sh [--phase all|tests|sanitizer|bench|criteria|sweep]... [--quick] [--help]
#     --phase P   run only these phases (repeatable; default all = tests sanitizer bench
#                 criteria; build always runs). sweep (study 4, not in all): checks every launch
#                 configuration against the reference, then times them and writes
#                 tc_launch_table.inc and tc_fp8_launch_table.inc into OUT_DIR (adopt them as
#                 kernels/launch_tables/<model>_fp16.inc and h100_fp8.inc)
#     --quick     a smaller batching-window sweep and launch-configuration sweep
#     --san-tools LIST  the compute-sanitizer tools of the sanitizer phase (comma list; default
#                 memcheck,racecheck,initcheck,synccheck)
# Environment: SAN_JOBS (sanitizer runs at once, default 4), SAN_TIMEOUT (seconds per run,
# default 540), OUT_DIR, BUILD_DIR, ATTNRT_COMMIT.
#
# Fails (exit 1) when anything fails, and also when a check checked nothing: a GPU test that
# skipped on this GPU host (other than the few that skip there by design: gpu_host_skips
# in this file), a gtest filter that ran no test, or tune_window reporting failed requests.
set -uo pipefail

# Log checks, kept apart so that tests/scripts/gpu_check_logic_test.sh can run them on sample
# logs (sourcing this file defines them and returns).
#
# Tests that skip on a GPU host by design: the checks of a GPU-less machine, and the launch
# configurations that are not built (8 warps at head dim 256). Any other skip on a GPU host means
# a GPU test did not run (e.g. the device could not be opened).
gpu_host_skips='^(KvCacheGpuTest\.WithoutADevice[A-Za-z]*|CudaExecutorNoGpuTest\.[A-Za-z]*'
gpu_host_skips+='|Settings/LaunchConfigTest\.MatchesReference/D256_G[0-9]+_warps8_[a-z0-9_]*)$'
# ctest_skipped LOG: the tests a ctest log reports as skipped, one name a line.
ctest_skipped() { sed -n 's/^[[:space:]]*[0-9][0-9]* - \(.*\) (Skipped)$/\1/p' "$1"; }
# gtest_skipped LOG: the tests a (not --gtest_brief) gtest log reports as skipped, one a line.
gtest_skipped() { sed -n 's/^\[  SKIPPED \] \([^0-9 ][^ ]*\).*/\1/p' "$1" | sort -u; }
# gtest_count LOG ran|passed: how many tests a gtest log's summary says ran or passed; nothing
# when the log has no summary.
gtest_count() {
  case "$2" in
    ran) sed -n 's/^\[==========\] \([0-9][0-9]*\) tests\{0,1\} from .* ran\..*/\1/p' "$1" ;;
    passed) sed -n 's/^\[  PASSED  \] \([0-9][0-9]*\) tests\{0,1\}\.$/\1/p' "$1" ;;
  esac | tail -1
}
# unexpected_skips: the test names on stdin that do not skip by design on a GPU host, on one
# line.
unexpected_skips() { grep -Ev "$gpu_host_skips" | tr '\n' ' ' | sed 's/ $//'; }
# ctest_problem LOG / gtest_problem LOG: why a run on this GPU host checked less than it should
# have; nothing when it is fine.
ctest_problem() {
  local skipped
  skipped=$(ctest_skipped "$1" | unexpected_skips)
  if [ -n "$skipped" ]; then echo "GPU tests skipped on a GPU host: $skipped"; fi
}
gtest_problem() {
  local ran passed skipped
  ran=$(gtest_count "$1" ran)
  passed=$(gtest_count "$1" passed)
  skipped=$(gtest_skipped "$1" | unexpected_skips)
  if [ -z "$ran" ]; then echo "no gtest summary in the log (the run crashed or timed out)"
  elif [ "$ran" -eq 0 ]; then echo "ran 0 tests (the filter matches none)"
  elif [ "${passed:-0}" -eq 0 ]; then echo "no test passed"
  elif [ -n "$skipped" ]; then echo "GPU tests skipped on a GPU host: $skipped"
  fi
}
[[ "${BASH_SOURCE[0]}" == "$0" ]] || return 0

cd "$(dirname "$0")/.."
all_phases="all tests sanitizer bench criteria sweep"
phases=""; quick=0
san_tools="memcheck racecheck initcheck synccheck"
san_jobs=${SAN_JOBS:-4}
san_timeout=${SAN_TIMEOUT:-540}
while (($#)); do
  case "$1" in
    --phase)
      if (($# < 2)) || [[ " $all_phases " != *" $2 "* ]]; then
        echo "gpu-check: --phase needs one of: $all_phases (see --help)" >&2; exit 2
      fi
      phases="$phases $2"; shift ;;
    --quick) quick=1 ;;
    --san-tools)
      if (($# < 2)) || [ -z "$2" ] || [[ -n "$(echo "$2" | tr ',' '\n' | grep -vxE 'memcheck|racecheck|initcheck|synccheck')" ]]; then
        echo "gpu-check: --san-tools needs a comma list of memcheck,racecheck,initcheck,synccheck" >&2; exit 2
      fi
      san_tools=$(echo "$2" | tr ',' ' '); shift ;;
    -h|--help) sed -n '2,/^set -/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "gpu-check: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
[ -n "$phases" ] || phases=" all"
has() { [[ ( "$phases" == *" all"* && "$1" != sweep ) || "$phases" == *" $1"* ]]; }
log() { echo "[gpu-check $(date +%H:%M:%S)] $*"; }

if ! nvidia-smi >/dev/null 2>&1; then
  echo "gpu-check: no NVIDIA GPU here (nvidia-smi failed); use scripts/test.sh" >&2
  exit 1
fi
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
gpu_slug=$(echo "$gpu" | tr 'A-Z ' 'a-z-' | tr -cd 'a-z0-9-')
out=${OUT_DIR:-bench/results/$(date -u +%Y-%m-%d)_${gpu_slug}}
mkdir -p "$out"
# Everything this script prints also lands in the record (gpu-check.log).
exec > >(tee -a "$out/gpu-check.log") 2>&1
build=${BUILD_DIR:-build-gpu}
status=0
# The device machine's copy has no usable .git (file modes differ): its caller names the commit.
if [ -n "${ATTNRT_COMMIT:-}" ]; then commit=$ATTNRT_COMMIT; dirty=""
else
  commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
  dirty=$(git status --porcelain --untracked-files=no 2>/dev/null | grep -q . && echo "+dirty" || true)
fi
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,clocks.mem \
  --format=csv >"$out/device.txt"
log "device: $gpu; commit ${commit}${dirty}; phases:$phases; out $out"

log "build ($build)"
if ! BUILD_DIR=$build JOBS=${JOBS:-$(nproc)} ./scripts/build.sh -DATTNRT_DCHECKS=ON >"$out/build.log" 2>&1; then
  tail -40 "$out/build.log"; log "BUILD FAILED"; exit 1
fi

if has tests; then
  log "ctest (every test; GPU tests run here)"
  (cd "$build" && ctest --output-on-failure --no-tests=error -j 4 --timeout 900) \
    >"$out/ctest.log" 2>&1 || status=1
  grep -E "tests passed|tests failed|Skipped|\*\*\*Failed|Failed  " "$out/ctest.log" | tail -12
  problem=$(ctest_problem "$out/ctest.log")
  if [ -n "$problem" ]; then log "ctest: FAILED: $problem"; status=1; fi
fi

if has sanitizer; then
  # decode_gpu_test holds 170 cases (contexts to 128k): the sanitizers run a cross-section of
  # it (every variant, each D, block sizes 8/16/64, G 2/8, graph capture, peaky softmax).
  # cuda_executor_gpu_test: the failure-injection cases are left out (they make a CUDA API error
  # on purpose, which memcheck reports as such); initcheck, ~20x slower there, runs a subset.
  decode_filter='AllCombos/*D128_bs16*:Variants/DecodeEdgeTest.GraphCaptured*:Variants/DecodeEdgeTest.Peaky*:AllCombos/*D64_bs8_G8*:AllCombos/*D256_bs64_G2*'
  decode_filter+=':Settings/*D128_G8_warps8_ctas16_minsplit128:Settings/*D64_G1_warps2_ctas0_minsplit1024:Settings/*D256_G1_warps2_ctas16_minsplit128:TunedLaunchTableTest.*'
  executor_filter='-*InjectedLaunchFailure*:*FailedBatchLosesItsTokens*'
  # decode_fp8_gpu_test: 89 cases over three variants; a cross-section (every variant at D 128,
  # D 64 block 16, the 32k split, peaky softmax, the append modes).
  fp8_filter='AllCombos/DecodeFp8SweepTest.*D128*:AllCombos/DecodeFp8SweepTest.*D64_bs16*:DecodeFp8Test.*:Variants/*'
  executor_initcheck='*EveryPathMatchesDenseReference:*CapturedShortReplaysLong:*DeviceAndHostMemoryInTheSameGraphs:*BatchLargerThanTheLargestBucketIsSplit'
  gpu_tests=("$build"/tests/*_gpu_test)
  if [ ! -x "${gpu_tests[0]}" ]; then
    log "compute-sanitizer: FAILED: no GPU tests in $build/tests"; status=1
  fi
  # One job per (tool, test binary), SAN_JOBS at a time (the sanitizers are bound by host CPU,
  # so several share the GPU well); each leaves its log and exit code, read in order below.
  jobs=()
  for tool in $san_tools; do
    for t in "${gpu_tests[@]}"; do
      [ -x "$t" ] || continue
      name=$(basename "$t")
      case "$name" in
        decode_gpu_test) filter=$decode_filter ;;
        decode_fp8_gpu_test) filter=$fp8_filter ;;
        api_runtime_gpu_test) filter='*Cuda*' ;;
        # The long-context GEMM cases move GBs through an FP64 reference: far too slow under a
        # sanitizer. The sliced and graph-captured cases still run the chunk merge.
        gemm_path_gpu_test)
          filter='-*LongContextIssue*:*LongContextMixedLengthsAtTheLargestBucket*:*LongContextSmallBudgetManyChunks*' ;;
        cuda_executor_gemm_gpu_test) continue ;;
        cuda_executor_gpu_test)
          filter=$executor_filter; [ $tool = initcheck ] && filter=$executor_initcheck ;;
        *) filter='*' ;;
      esac
      jobs+=("$tool|$t|$filter")
    done
  done
  san_one() {
    local tool=${1%%|*} rest=${1#*|}
    local t=${rest%%|*} filter=${rest#*|}
    local logf="$out/sanitizer_${tool}_$(basename "$t").log"
    # Not --gtest_brief: the log names the tests that skipped.
    timeout "$san_timeout" compute-sanitizer --tool "$tool" --error-exitcode 9 "$t" \
      --gtest_filter="$filter" >"$logf" 2>&1
    echo $? >"$logf.rc"
  }
  running=0
  for j in "${jobs[@]}"; do
    san_one "$j" &
    running=$((running + 1))
    if [ $running -ge "$san_jobs" ]; then wait -n; running=$((running - 1)); fi
  done
  wait
  for j in "${jobs[@]}"; do
    tool=${j%%|*}; rest=${j#*|}; t=${rest%%|*}; filter=${rest#*|}
    name=$(basename "$t")
    logf="$out/sanitizer_${tool}_${name}.log"
    rc=$(cat "$logf.rc" 2>/dev/null || echo 255); rm -f "$logf.rc"
    problem=$(gtest_problem "$logf")
    if [ -n "$problem" ]; then
      log "compute-sanitizer $tool $name: FAILED: $problem (filter $filter)"; status=1
    fi
    summary=$(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$logf" | tail -1)
    tests=$(grep -E "^\[  (PASSED|FAILED|SKIPPED) *\] [0-9]" "$logf" | tr '\n' ' ')
    if [ $tool = racecheck ] && [ "$rc" -eq 9 ]; then
      # cuBLAS's own Hopper GEMM kernels (nvjet_*, used by the GEMM path) draw racecheck
      # reports; ours must have none. Both counts are logged; only ours fail the check.
      ours=$(grep -E "Race reported" "$logf" | grep -vc "nvjet_")
      cublas=$(grep -E "Race reported" "$logf" | grep -c "nvjet_")
      log "compute-sanitizer racecheck $name: $ours race reports in attnrt kernels, $cublas inside cuBLAS (nvjet_*) ${tests}"
      [ "$ours" -eq 0 ] || status=1
      continue
    fi
    log "compute-sanitizer $tool $name: rc=$rc ${summary:-no summary} ${tests}"
    [ "$rc" -eq 0 ] || status=1
  done
fi

if has bench; then
  # Each benchmark sets its own warm-up, repetitions and medians.
  for b in kernels_decode_bench runtime_step_bench; do
    [ -x "$build/bench/$b" ] || continue
    log "benchmark $b"
    # The decode kernels over the block tables the KV cache's allocator lays out (what serving
    # reads; --blocks shuffled is the worst case, a nearly full pool).
    bench_args=(); [ "$b" = kernels_decode_bench ] && bench_args=(--blocks allocator)
    "$build/bench/$b" "${bench_args[@]}" --benchmark_out="$out/$b.json" --benchmark_out_format=json \
      --benchmark_counters_tabular=true >"$out/$b.txt" 2>&1 || status=1
    grep -E "median|ERROR" "$out/$b.txt" | head -30
  done
  # Where a small-batch step's time goes, CTA by CTA (B=1 H32 D128, the tuned kernel's phases).
  if [ -x "$build/bench/kernels_cta_trace_bench" ]; then
    log "benchmark kernels_cta_trace_bench (B=1 phases)"
    "$build/bench/kernels_cta_trace_bench" --contexts 512,4096 --commit "$commit" \
      --json-out "$out/cta_trace.json" >"$out/cta_trace.txt" 2>&1 || status=1
    cut -c1-200 "$out/cta_trace.txt"
  fi
  # The self-test a user runs, with its speed table against the read ceiling it measures.
  log "attnrt-check (every path x cache type; speed table)"
  "$build/examples/attnrt-check" --kv-cache-type all --block-sizes 16 --seed 7 \
    --json "$out/attnrt_check.json" >"$out/attnrt_check.txt" 2>&1 || status=1
  tail -3 "$out/attnrt_check.txt"
  # The host path's record (issue 11): floor, Runtime B=1, host CPU per request, saturation;
  # writes summary.json itself.
  log "benchmark api_host_path_bench"
  mkdir -p "$out/host-path"
  "$build/bench/api_host_path_bench" --out "$out/host-path" --commit "$commit" \
    >"$out/host-path/host_path.txt" 2>&1 || status=1
  cat "$out/host-path/host_path.txt"
  if python3 -c "import torch" 2>/dev/null; then
    log "PyTorch SDPA comparison (same shapes, contiguous KV, graph-replayed)"
    PYTHONUNBUFFERED=1 python3 bench/sdpa_compare.py --out "$out/sdpa_compare.json" \
      --gbench-json "$out/kernels_decode_bench.json" >"$out/sdpa_compare.txt" 2>&1 || status=1
    tail -20 "$out/sdpa_compare.txt"
  fi
  log "batching-window sweep on the CUDA executor (tune_window)"
  if [ $quick -eq 1 ]; then sweep=(--rates 20000,100000 --windows-us 0,200 --max-batches 32)
  else sweep=(--rates 5000,50000,200000 --windows-us 0,50,200,1000 --max-batches 8,32,128); fi
  "$build/examples/tune_window" --device cuda "${sweep[@]}" --duration 0.4 --sequences 2048 \
    --json "$out/tune_window.json" >"$out/tune_window.txt" 2>&1 || status=1
  tail -25 "$out/tune_window.txt"
fi

if has criteria; then
  log "scheduler vs kernel-only capacity (tune_window --criteria: saturation, 70% load)"
  # Issue 11's contexts: T=512 over 2048 sequences, T=4096 over 256 (4 GiB of K/V).
  for ctx in 512 4096; do
    for b in 32 128; do
      # Producers enough to overload max batch 128 (~190 k host-memory requests/s each on the
      # H100 host), not more than max batch 32 needs (bench/NOTES.md, 2026-11-27 sixth session).
      name="criteria_b${b}_t${ctx}"
      "$build/examples/tune_window" --device cuda --no-sweep --criteria $b \
        --criteria-window-us 200 --duration 0.5 --context $ctx \
        --sequences $((ctx >= 4096 ? 256 : 2048)) --producers $((b >= 128 ? 8 : 4)) \
        >"$out/$name.txt" 2>&1
      rc=$?
      tail -4 "$out/$name.txt"
      # rc 3 = a performance criterion missed: reported above, not a failed check. rc 1 = a
      # failed run (requests failed included: tune_window says why).
      if [ $rc -ne 0 ] && [ $rc -ne 3 ]; then
        log "tune_window --criteria $b --context $ctx: FAILED (rc $rc)"; status=1
      fi
    done
  done
fi

if has sweep; then
  log "study 4: every launch configuration against the reference, then the timing sweep"
  "$build/tests/decode_gpu_test" --gtest_filter='*LaunchConfig*:*TunedLaunch*' \
    >"$out/launch_config_test.log" 2>&1
  rc=$?
  problem=$(gtest_problem "$out/launch_config_test.log")
  if [ $rc -eq 0 ] && [ -z "$problem" ]; then
    tail -3 "$out/launch_config_test.log"
    q=(); [ $quick -eq 1 ] && q=(--quick)
    "$build/bench/kernels_launch_sweep_bench" "${q[@]}" --commit "$commit" \
      --json-out "$out/kernels_launch_sweep.json" --table-out "$out/tc_launch_table.inc" \
      >"$out/kernels_launch_sweep.txt" 2>"$out/kernels_launch_sweep.progress" || status=1
    grep -E "pick|wrote" "$out/kernels_launch_sweep.txt" | tail -45
    # The FP8 kernel's own table (kernels/launch_tables/h100_fp8.inc).
    "$build/bench/kernels_launch_sweep_bench" "${q[@]}" --commit "$commit" --kv-cache-type fp8_e4m3 \
      --json-out "$out/kernels_launch_sweep_fp8.json" --table-out "$out/tc_fp8_launch_table.inc" \
      >"$out/kernels_launch_sweep_fp8.txt" 2>"$out/kernels_launch_sweep_fp8.progress" || status=1
    grep -E "pick|wrote" "$out/kernels_launch_sweep_fp8.txt" | tail -30
  else
    tail -30 "$out/launch_config_test.log"
    log "launch configurations FAILED${problem:+: $problem}: no sweep"; status=1
  fi
fi

{
  echo "device: $(tail -1 "$out/device.txt")"
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "commit: ${commit}${dirty}"
  echo "phases:$phases"
  echo "status: $([ $status -eq 0 ] && echo pass || echo FAIL)"
} >>"$out/record.txt"
cat "$out/record.txt"
exit $status
