#!/usr/bin/env bash
# kernel_ab_test.sh: bench/kernel_ab_summary.py over sample benchmark JSON (two rounds of old and
# new medians: the ratio of the medians, a row only one side has, means ignored, a file cut
# short, no pairs), and scripts/kernel-ab.sh's argument checks (each refused with exit 2 before
# any build). No GPU.
set -u
case "${1:-}" in -h|--help) sed -n '2,5p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac
# shellcheck source=script_checks.sh
source "$(dirname "$0")/script_checks.sh"
row() {  # name median_us: a median aggregate and a mean that must be ignored
  printf '{"name": "BM_Decode/%s/default/min_time:0.020/repeats:5/manual_time_median", "run_name": "BM_Decode/%s/default/min_time:0.020/repeats:5/manual_time", "run_type": "aggregate", "aggregate_name": "median", "real_time": %s, "time_unit": "us"},\n' "$1" "$1" "$2"
  printf '{"name": "BM_Decode/%s/default/min_time:0.020/repeats:5/manual_time_mean", "run_name": "BM_Decode/%s/default/min_time:0.020/repeats:5/manual_time", "run_type": "aggregate", "aggregate_name": "mean", "real_time": 1.0, "time_unit": "us"}' "$1" "$1"
}
json() { printf '{"benchmarks": [\n%s\n]}\n' "$1"; }
mkdir -p "$tmp/ab"
json "$(row gqa 100.0), $(row b1 20.0)" > "$tmp/ab/old_1.json"
json "$(row gqa 102.0), $(row b1 20.0)" > "$tmp/ab/old_2.json"
json "$(row gqa 90.0), $(row b1 21.0), $(row extra 5.0)" > "$tmp/ab/new_1.json"
json "$(row gqa 92.0), $(row b1 21.0)" > "$tmp/ab/new_2.json"
python3 "$root/bench/kernel_ab_summary.py" "$tmp/ab" > "$tmp/ab.txt" 2>&1
rc=$?
check "the summary exits 0" '[ $rc -eq 0 ]'
check "a row: both rounds, the ratio of the medians (91 / 101)" \
  'grep -Eq "^BM_Decode/gqa/default +100.00 +90.00 +102.00 +92.00 +0.9010$" "$tmp/ab.txt"'
check "a slower row" 'grep -Eq "^BM_Decode/b1/default .* 1.0500$" "$tmp/ab.txt"'
check "a row one side lacks: nan where it is missing, no ratio" \
  'grep -Eq "^BM_Decode/extra/default +nan +5.00 +nan +nan +n/a$" "$tmp/ab.txt"'
check "means are ignored" '! grep -q " 1.00 " "$tmp/ab.txt"'
printf '{"benchmarks": [\n' > "$tmp/ab/new_3.json"  # a run cut short
json "$(row gqa 1.0)" > "$tmp/ab/old_3.json"
python3 "$root/bench/kernel_ab_summary.py" "$tmp/ab" > "$tmp/ab3.txt" 2> "$tmp/ab3.err"
check "a cut file is skipped, named, and its round left out" \
  '[ $? -eq 0 ] && grep -q "new_3.json skipped" "$tmp/ab3.err" && cmp -s "$tmp/ab.txt" "$tmp/ab3.txt"'
mkdir -p "$tmp/none"
python3 "$root/bench/kernel_ab_summary.py" "$tmp/none" > /dev/null 2>&1
check "no pairs exits 1" '[ $? -eq 1 ]'
ab="$root/scripts/kernel-ab.sh"
mkdir -p "$tmp/kernels" && touch "$tmp/kernels/decode_split_kv.cu"
check "OUT_DIR missing exits 2" 'bash "$ab" "$tmp/kernels" > /dev/null 2>&1; [ $? -eq 2 ]'
check "not a copy of kernels/ exits 2" 'bash "$ab" "$tmp/none" "$tmp/o" > /dev/null 2>&1; [ $? -eq 2 ]'
check "bad rounds exit 2" 'bash "$ab" "$tmp/kernels" "$tmp/o" --rounds 0 > /dev/null 2>&1; [ $? -eq 2 ]'
check "an unknown argument exits 2" 'bash "$ab" "$tmp/kernels" "$tmp/o" --bogus > /dev/null 2>&1; [ $? -eq 2 ]'
checks_done kernel_ab_test "$tmp/ab.txt"
