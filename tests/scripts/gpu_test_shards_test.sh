#!/usr/bin/env bash
# gpu_test_shards_test.sh: scripts/gpu-test-shards.sh over a fake build whose "test binaries"
# are scripts printing gtest's summary lines: a passing one gives exit 0 and its summary line; a
# failing one, one that crashes before its summary and one that skips a test each make it exit 1
# naming the job. No GPU or build tree needed.
set -u
case "${1:-}" in -h|--help) sed -n '2,5p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac
# shellcheck source=script_checks.sh
source "$(dirname "$0")/script_checks.sh"
fake() {  # name body
  printf '#!/bin/sh\n%s\n' "$2" > "$tmp/build/tests/$1"
  chmod +x "$tmp/build/tests/$1"
}
mkdir -p "$tmp/build/tests"
pass='echo "[==========] 2 tests from 1 test suite ran. (1 ms total)"; echo "[  PASSED  ] 2 tests."'
fake good_test "$pass"
"$root/scripts/gpu-test-shards.sh" "$tmp/build" "$tmp/o1" --jobs 2 > "$tmp/o1.txt" 2>&1
rc=$?
check "a passing job exits 0" '[ $rc -eq 0 ]'
check "its summary line" 'grep -q "^good_test shard 0/1 rc=0 \[  PASSED  \] 2 tests. skipped=0$" "$tmp/o1/summary.txt"'
check "the count line" 'grep -q "^jobs with a problem: 0 of 1$" "$tmp/o1.txt"'

fake bad_test 'echo "[==========] 1 test from 1 test suite ran. (1 ms total)"; echo "[  FAILED  ] 1 test, listed below:"; exit 1'
fake crash_test 'echo "[ RUN      ] A.B"; kill -SEGV $$'
fake skip_test 'echo "[  SKIPPED ] Gpu.Thing (0 ms)"; echo "[==========] 2 tests from 1 test suite ran. (1 ms total)"; echo "[  PASSED  ] 1 test."; echo "[  SKIPPED ] 1 test, listed below:"'
"$root/scripts/gpu-test-shards.sh" "$tmp/build" "$tmp/o2" --jobs 2 > "$tmp/o2.txt" 2>&1
rc=$?
check "failing jobs exit 1" '[ $rc -eq 1 ]'
check "the failing job is named" 'grep -q "^bad_test shard 0/1 rc=1 .*PROBLEM: no test passed" "$tmp/o2.txt"'
check "the crash is named" 'grep -q "^crash_test shard 0/1 rc=[1-9][0-9]* .*PROBLEM: no gtest summary" "$tmp/o2.txt"'
check "the skip is named" 'grep -q "^skip_test shard 0/1 rc=0 .*PROBLEM: GPU tests skipped on a GPU host: Gpu.Thing" "$tmp/o2.txt"'
check "the passing job is not" '! grep -q "^good_test" "$tmp/o2.txt"'
check "three of four" 'grep -q "^jobs with a problem: 3 of 4$" "$tmp/o2.txt"'
check "an unknown argument exits 2" '"$root/scripts/gpu-test-shards.sh" "$tmp/build" "$tmp/o3" --bogus > /dev/null 2>&1; [ $? -eq 2 ]'
checks_done gpu_test_shards_test "$tmp/o2.txt"
