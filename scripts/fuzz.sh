#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz/, ASan + UBSan, clang) into build-fuzz and runs each
# for a bounded time from its seed corpus (tests/fuzz/corpus/<name>/). Fails on any crash, leak,
# UB report, timeout or broken invariant; the input that caused it is left in build-fuzz/findings.
#
#   scripts/fuzz.sh --ci            each target for 30 s (CI); exit non-zero on any finding
#   scripts/fuzz.sh --seconds S     each target for S seconds
#   scripts/fuzz.sh --runs N        each target for N executions (with --seconds: whichever ends
#                                   first)
#   scripts/fuzz.sh ... TARGET...   only these targets (c_api, tcp_protocol, flags)
#
# Environment: FUZZ_LOG_DIR (keep each target's libFuzzer log there), BUILD_DIR (default
# build-fuzz).
# Needs clang with its runtime (apt: clang, libclang-rt-dev, llvm for symbolized reports; installed
# here when missing). Built without CUDA: every target runs the CPU executor or no executor.
# New inputs found during a run go to build-fuzz/corpus/<name>/, never into the tree.
set -euo pipefail
case "${1:-}" in -h|--help) sed -n '2,/^set -/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;; esac
cd "$(dirname "$0")/.."

seconds=""
runs=""
targets=()
while (($#)); do
  case "$1" in
    --ci) seconds=30 ;;
    --seconds) seconds=${2:?--seconds needs a value}; shift ;;
    --runs) runs=${2:?--runs needs a value}; shift ;;
    c_api|tcp_protocol|flags) targets+=("$1") ;;
    *) echo "fuzz.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done
((${#targets[@]})) || targets=(c_api tcp_protocol flags)
[ -n "$runs$seconds" ] || seconds=60

./scripts/setup.sh
pkgs=(clang libclang-rt-dev llvm)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "fuzz.sh: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

build_dir=${BUILD_DIR:-build-fuzz}
# The library is instrumented too (sanitizers and libFuzzer's coverage), not only the targets.
san="-fsanitize=address,undefined -fno-sanitize-recover=all -fsanitize=fuzzer-no-link"
san+=" -fno-omit-frame-pointer -g"
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DATTNRT_WITH_CUDA=OFF \
  -DATTNRT_FUZZ=ON -DATTNRT_DCHECKS=ON -DATTNRT_BUILD_BENCH=OFF -DATTNRT_BUILD_EXAMPLES=OFF \
  "-DCMAKE_C_FLAGS=$san" "-DCMAKE_CXX_FLAGS=$san" >/dev/null
cmake --build "$build_dir" -j "${JOBS:-$(nproc)}" --target attnrt_fuzz

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:allocator_may_return_null=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
findings="$build_dir/findings"
mkdir -p "$findings"
failed=()
for t in "${targets[@]}"; do
  work="$build_dir/corpus/$t"
  mkdir -p "$work"
  log=$(mktemp)
  args=(-timeout=30 -rss_limit_mb=4096 -print_final_stats=1 "-artifact_prefix=$findings/$t-")
  if [ -n "$runs" ]; then args+=("-runs=$runs"); fi
  if [ -n "$seconds" ]; then args+=("-max_total_time=$seconds"); fi
  # c_api: no per-input leak check. It runs LeakSanitizer over the whole heap whenever an input
  # ends with more allocations than frees, which the runtime's pools make common: half the
  # run's time. LeakSanitizer still checks the whole process at exit, and the harness checks
  # after every input that every KV block is free again.
  if [ "$t" = c_api ]; then args+=(-detect_leaks=0); fi
  if [ -f "tests/fuzz/$t.dict" ]; then args+=("-dict=tests/fuzz/$t.dict"); fi
  echo "fuzz.sh: $t: ${runs:+$runs runs }${seconds:+at most $seconds s }(seeds tests/fuzz/corpus/$t, new inputs $work)"
  # Seeds are read from the tree; what the run adds goes to $work only.
  rc=0
  "$build_dir/tests/fuzz/${t}_fuzz" "${args[@]}" "$work" "tests/fuzz/corpus/$t" >"$log" 2>&1 || rc=$?
  # A summary line, then the stats libFuzzer prints at the end (executions, exec/s, corpus).
  grep -E '^(#[0-9]+ +DONE|stat::)' "$log" | sed "s/^/fuzz.sh: $t: /" || true
  if [ -n "${FUZZ_LOG_DIR:-}" ]; then mkdir -p "$FUZZ_LOG_DIR"; cp "$log" "$FUZZ_LOG_DIR/$t.log"; fi
  if ((rc != 0)) || grep -qE 'ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer)|runtime error:|SUMMARY: ' "$log"; then
    echo "fuzz.sh: $t FAILED (exit $rc); the end of its log:" >&2
    grep -vE '^#[0-9]+ +(NEW|REDUCE|pulse)|NEW_FUNC' "$log" | tail -60 >&2
    ls "$findings"/"$t"-* 2>/dev/null | sed 's/^/fuzz.sh: input: /' >&2 || true
    failed+=("$t")
  fi
  rm -f "$log"
done
# The closing line in the 'N passed, N failed' form that CI reads.
if ((${#failed[@]})); then
  echo "fuzz.sh: failed: ${failed[*]}" >&2
  echo "fuzz: $((${#targets[@]} - ${#failed[@]})) passed, ${#failed[@]} failed"
  exit 1
fi
echo "fuzz.sh: ran clean: ${targets[*]}"
echo "fuzz: ${#targets[@]} passed, 0 failed"
