#!/usr/bin/env bash
# host_ab_test.sh: bench/host_ab_summary.py over sample api_host_path_bench tables (two rounds:
# each round's p50, the ratio of the medians, the median p50 / floor, indented rows, a row only
# one side has, --rows, an output with no rows, no pairs, no OUT_DIR), and scripts/host-ab.sh's
# argument checks (each refused with exit 2 before any build). No GPU.
set -u
case "${1:-}" in -h|--help) sed -n '2,5p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac
# shellcheck source=script_checks.sh
source "$(dirname "$0")/script_checks.sh"
table() {  # floor decode_p50 run_p50 [extra]: rows as the bench prints them
  awk -v f="$1" -v d="$2" -v r="$3" -v x="${4:-}" 'BEGIN {
    print "[0 s] floors and B=1 rows"
    print "row                                    p50 us     p99 us p50/floor"
    printf "%-34s %10.2f %10.2f %8.2f\n", "floor B=1", f, 30, 1
    printf "%-34s %10.2f %10.2f %8.2f\n", "runtime B=1 graph (Decode)", d, 40, d / f
    printf "%-34s %10.2f %10.2f %8.2f\n", "  of Decode: executor Run", r, 35, r / f
    if (x != "") printf "%-34s %10.2f %10.2f %8.2f\n", "  only here", 5, 6, 0.25
    print "  pieces, B=1 executor, timed: 2100, medians: plan 0.5 us" }'
}
mkdir -p "$tmp/ab"
table 20.00 24.00 22.00 > "$tmp/ab/old_1.txt"
table 20.00 26.00 22.00 > "$tmp/ab/old_2.txt"
table 20.00 22.00 21.00 x > "$tmp/ab/new_1.txt"
table 22.00 23.00 21.00 > "$tmp/ab/new_2.txt"
python3 "$root/bench/host_ab_summary.py" "$tmp/ab" > "$tmp/ab.txt" 2>&1
rc=$?
check "the summary exits 0" '[ $rc -eq 0 ]'
check "a row: both rounds' p50, the medians' ratio (22.5 / 25), the median p50 / floor" \
  'grep -Eq "^runtime B=1 graph \(Decode\) +24.00 +22.00 +26.00 +23.00 +0.9000 +1.25 +1.08$" "$tmp/ab.txt"'
check "an indented row, by its name" \
  'grep -Eq "^of Decode: executor Run +22.00 +21.00 +22.00 +21.00 +0.9545 " "$tmp/ab.txt"'
check "a row one side lacks: nan where it is missing, no ratio" \
  'grep -Eq "^only here +nan +5.00 +nan +nan +n/a " "$tmp/ab.txt"'
check "lines that are not rows are left out" '! grep -q "pieces" "$tmp/ab.txt"'
python3 "$root/bench/host_ab_summary.py" "$tmp/ab" --rows 'Decode\)$' > "$tmp/rows.txt" 2>&1
check "--rows keeps only the matching rows" \
  '[ "$(grep -c "^runtime" "$tmp/rows.txt")" = 1 ] && ! grep -q "floor B=1 " "$tmp/rows.txt"'
python3 "$root/bench/host_ab_summary.py" "$tmp/ab" --rows '(' > /dev/null 2>&1
check "a malformed --rows exits 2" '[ $? -eq 2 ]'
echo "Die: the device could not be opened" > "$tmp/ab/new_3.txt"
table 20.00 24.00 22.00 > "$tmp/ab/old_3.txt"
python3 "$root/bench/host_ab_summary.py" "$tmp/ab" > "$tmp/ab3.txt" 2> "$tmp/ab3.err"
check "an output without rows is skipped, named, and its round left out" \
  '[ $? -eq 0 ] && grep -q "new_3.txt skipped" "$tmp/ab3.err" && cmp -s "$tmp/ab.txt" "$tmp/ab3.txt"'
mkdir -p "$tmp/none"
python3 "$root/bench/host_ab_summary.py" "$tmp/none" > /dev/null 2>&1
check "no pairs exits 1" '[ $? -eq 1 ]'
python3 "$root/bench/host_ab_summary.py" "$tmp/missing" > /dev/null 2> "$tmp/missing.err"
check "a missing OUT_DIR exits 1, named" '[ $? -eq 1 ] && grep -q "cannot read" "$tmp/missing.err"'
ab="$root/scripts/host-ab.sh"
mkdir -p "$tmp/tree/bench" && touch "$tmp/tree/bench/api_host_path_bench.cu"
check "OUT_DIR missing exits 2" 'bash "$ab" "$tmp/tree" > /dev/null 2>&1; [ $? -eq 2 ]'
check "not a source tree exits 2" 'bash "$ab" "$tmp/none" "$tmp/o" > /dev/null 2>&1; [ $? -eq 2 ]'
check "bad rounds exit 2" 'bash "$ab" "$tmp/tree" "$tmp/o" --rounds x > /dev/null 2>&1; [ $? -eq 2 ]'
check "an unknown argument exits 2" 'bash "$ab" "$tmp/tree" "$tmp/o" --bogus > /dev/null 2>&1; [ $? -eq 2 ]'
checks_done host_ab_test "$tmp/ab.txt"
