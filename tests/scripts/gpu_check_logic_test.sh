#!/usr/bin/env bash
# The log checks and argument handling of scripts/gpu-check.sh, on sample logs (the script itself
# needs a GPU host): skipped GPU tests and gtest filters that ran nothing must fail the check.
# Usage: tests/scripts/gpu_check_logic_test.sh [--help] (ctest gpu_check_logic); 1 on a failure.
set -u
case "${1:-}" in -h|--help) sed -n '2,/^set -/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;; esac
root=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=../../scripts/gpu-check.sh
source "$root/scripts/gpu-check.sh"  # defines the checks and returns
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0

# expect NAME ACTUAL EXPECTED: ACTUAL must equal EXPECTED.
expect() {
  if [ "$2" == "$3" ]; then echo "ok   $1"
  else echo "FAIL $1: got '$2', expected '$3'"; failures=$((failures + 1)); fi
}
# expect_match NAME ACTUAL REGEX: ACTUAL must match the extended REGEX.
expect_match() {
  if [[ "$2" =~ $3 ]]; then echo "ok   $1"
  else echo "FAIL $1: got '$2', expected a match of /$3/"; failures=$((failures + 1)); fi
}

# ctest: the skips a GPU host has by design pass; any other skip fails and is named.
cat >"$tmp/ctest_expected_skips.log" <<'LOG'
100% tests passed, 0 tests failed out of 420

Total Test time (real) = 300.00 sec

The following tests did not run:
	271 - Settings/LaunchConfigTest.MatchesReference/D256_G1_warps8_ctas0_minsplit128 (Skipped)
	294 - Settings/LaunchConfigTest.MatchesReference/D256_G8_warps8_ctas1_minsplit1024 (Skipped)
	350 - KvCacheGpuTest.WithoutADeviceDevicePoolsAreUnavailable (Skipped)
	409 - CudaExecutorNoGpuTest.FactoryAnswersUnavailableWithoutGpu (Skipped)
LOG
expect "ctest: 4 skipped" "$(ctest_skipped "$tmp/ctest_expected_skips.log" | wc -l)" 4
expect "ctest: the by-design skips pass" "$(ctest_problem "$tmp/ctest_expected_skips.log")" ""
sed 's/^\t409 - .*/&\n\t400 - CudaExecutorGpuTest.EveryPathMatchesDenseReference (Skipped)\n\t12 - Families\/DecodeEdgeTest.Peaky\/tc (Skipped)/' \
  "$tmp/ctest_expected_skips.log" >"$tmp/ctest_gpu_skipped.log"
expect "ctest: GPU tests skipped fail, named" "$(ctest_problem "$tmp/ctest_gpu_skipped.log")" \
  "GPU tests skipped on a GPU host: CudaExecutorGpuTest.EveryPathMatchesDenseReference Families/DecodeEdgeTest.Peaky/tc"
printf '100%% tests passed, 0 tests failed out of 3\n' >"$tmp/ctest_clean.log"
expect "ctest: no skips pass" "$(ctest_problem "$tmp/ctest_clean.log")" ""

# gtest: a filter that matches nothing (as gtest prints it, with and without --gtest_brief).
cat >"$tmp/gtest_none.log" <<'LOG'
========= COMPUTE-SANITIZER
Running main() from ./googletest/src/gtest_main.cc
Note: Google Test filter = nomatch*
[==========] Running 0 tests from 0 test suites.
[==========] 0 tests from 0 test suites ran. (0 ms total)
[  PASSED  ] 0 tests.
========= ERROR SUMMARY: 0 errors
LOG
expect "gtest: ran count of an empty filter" "$(gtest_count "$tmp/gtest_none.log" ran)" 0
expect "gtest: an empty filter fails" "$(gtest_problem "$tmp/gtest_none.log")" \
  "ran 0 tests (the filter matches none)"

# gtest: one test run and passed, one skipped for want of a device.
cat >"$tmp/gtest_skip.log" <<'LOG'
Running main() from ./googletest/src/gtest_main.cc
Note: Google Test filter = *Zeroed*:*WithoutADevice*:*Factory*
[==========] Running 3 tests from 2 test suites.
[ RUN      ] KvCacheGpuTest.WithoutADeviceDevicePoolsAreUnavailable
/work/main/tests/kvcache/kv_cache_gpu_test.cc:42: Skipped
a CUDA device is present: this checks GPU-less machines
[  SKIPPED ] KvCacheGpuTest.WithoutADeviceDevicePoolsAreUnavailable (0 ms)
[ RUN      ] KvCacheGpuTest.DevicePoolsAreZeroedAndSizedFromTheShape
/work/main/tests/kvcache/kv_cache_gpu_test.cc:51: Skipped
no CUDA device: device pools untested
[  SKIPPED ] KvCacheGpuTest.DevicePoolsAreZeroedAndSizedFromTheShape (0 ms)
[ RUN      ] CudaExecutorNoGpuTest.FactoryAnswersUnavailableWithoutGpu
[       OK ] CudaExecutorNoGpuTest.FactoryAnswersUnavailableWithoutGpu (0 ms)
[==========] 3 tests from 2 test suites ran. (0 ms total)
[  PASSED  ] 1 test.
[  SKIPPED ] 2 tests, listed below:
[  SKIPPED ] KvCacheGpuTest.DevicePoolsAreZeroedAndSizedFromTheShape
[  SKIPPED ] KvCacheGpuTest.WithoutADeviceDevicePoolsAreUnavailable
LOG
expect "gtest: ran count" "$(gtest_count "$tmp/gtest_skip.log" ran)" 3
expect "gtest: passed count (one test)" "$(gtest_count "$tmp/gtest_skip.log" passed)" 1
expect "gtest: skipped names" "$(gtest_skipped "$tmp/gtest_skip.log" | tr '\n' ' ')" \
  "KvCacheGpuTest.DevicePoolsAreZeroedAndSizedFromTheShape KvCacheGpuTest.WithoutADeviceDevicePoolsAreUnavailable "
expect "gtest: a GPU test skipped fails, named" "$(gtest_problem "$tmp/gtest_skip.log")" \
  "GPU tests skipped on a GPU host: KvCacheGpuTest.DevicePoolsAreZeroedAndSizedFromTheShape"
grep -v "DevicePoolsAreZeroed" "$tmp/gtest_skip.log" >"$tmp/gtest_expected_skip.log"
expect "gtest: a by-design skip passes" "$(gtest_problem "$tmp/gtest_expected_skip.log")" ""

# gtest: every test failed; and a run that died before its summary.
printf '[==========] 2 tests from 1 test suite ran. (5 ms total)\n[  PASSED  ] 0 tests.\n[  FAILED  ] 2 tests, listed below:\n' \
  >"$tmp/gtest_failed.log"
expect "gtest: nothing passed fails" "$(gtest_problem "$tmp/gtest_failed.log")" "no test passed"
printf '[==========] Running 5 tests from 1 test suite.\n[ RUN      ] A.B\n' >"$tmp/gtest_crash.log"
expect_match "gtest: no summary fails" "$(gtest_problem "$tmp/gtest_crash.log")" "no gtest summary"

# Arguments (handled before the script looks for a GPU).
out=$(bash "$root/scripts/gpu-check.sh" --phase 2>&1); rc=$?
expect "--phase without a value: exit 2" "$rc" 2
expect_match "--phase without a value: says why" "$out" "--phase needs one of: all tests"
out=$(bash "$root/scripts/gpu-check.sh" --phase test 2>&1); rc=$?
expect "--phase with an unknown phase: exit 2" "$rc" 2
out=$(bash "$root/scripts/gpu-check.sh" --help 2>&1); rc=$?
expect "--help: exit 0" "$rc" 0
expect_match "--help: usage" "$out" "scripts/gpu-check.sh \[--phase"

if [ $failures -ne 0 ]; then echo "gpu_check_logic_test: $failures FAILED"; exit 1; fi
echo "gpu_check_logic_test: OK"
