#!/usr/bin/env bash
# ab_lib_test.sh: scripts/ab_lib.sh's two functions without a GPU. ab_build over two tiny C++
# CMake projects (both built, their logs written; a tree that does not compile fails the call,
# naming the logs); ab_alternate over a fake run (old, new, old, new order; a failing run makes
# it return 1 after every run was still made).
set -u
case "${1:-}" in -h|--help) sed -n '2,5p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac
# shellcheck source=script_checks.sh
source "$(dirname "$0")/script_checks.sh"
# shellcheck source=../../scripts/ab_lib.sh
source "$root/scripts/ab_lib.sh"
project() {  # DIR MESSAGE: a one-program project printing MESSAGE
  mkdir -p "$1"
  printf 'cmake_minimum_required(VERSION 3.20)\nproject(t CXX)\nadd_executable(hello main.cc)\n' \
    > "$1/CMakeLists.txt"
  printf '#include <cstdio>\nint main() { std::puts("%s"); }\n' "$2" > "$1/main.cc"
}
project "$tmp/old" old
project "$tmp/new" new
mkdir -p "$tmp/out"
(cd "$tmp/new" && JOBS=2 ab_build test "$tmp/old" "$tmp/old/build" build-new "$tmp/out" hello hello) \
  > "$tmp/build.txt" 2>&1
rc=$?
check "ab_build exits 0" '[ $rc -eq 0 ]'
check "both trees built" \
  '[ "$("$tmp/old/build/hello")" = old ] && [ "$("$tmp/new/build-new/hello")" = new ]'
check "its logs" 'for f in cfg_old cfg_new build_old build_new; do [ -s "$tmp/out/$f.log" ] || exit 1; done'
echo 'int main() { return x; }' > "$tmp/old/main.cc"
(cd "$tmp/new" && ab_build test "$tmp/old" "$tmp/old/build" build-new "$tmp/out" hello hello) \
  > "$tmp/fail.txt" 2>&1
rc=$?
check "a tree that does not compile fails ab_build, naming the logs" \
  '[ $rc -eq 1 ] && grep -q "test: build failed (new rc=0, old rc=1" "$tmp/fail.txt"'

order=()
fake_run() { order+=("$1$2"); [ "$1$2" != old2 ]; }
ab_alternate test 3 fake_run > "$tmp/alt.txt" 2>&1
rc=$?
check "ab_alternate runs old, new a round, every round" '[ "${order[*]}" = "old1 new1 old2 new2 old3 new3" ]'
check "a failing run makes it return 1" '[ $rc -eq 1 ]'
check "each run's rc printed" \
  '[ "$(grep -c "^test: .* round .* rc=" "$tmp/alt.txt")" = 6 ] && grep -q "^test: old round 2 rc=1" "$tmp/alt.txt"'
order=()
ok_run() { order+=("$1$2"); }
ab_alternate test 1 ok_run > /dev/null 2>&1
check "all runs passing returns 0" '[ $? -eq 0 ] && [ "${order[*]}" = "old1 new1" ]'
checks_done ab_lib_test "$tmp/build.txt"
