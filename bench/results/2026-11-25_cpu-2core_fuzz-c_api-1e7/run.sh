#!/bin/bash
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:allocator_may_return_null=0
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
cd /tmp/fuzzrun
date -u +%FT%TZ > start.txt
nice -n 19 ./c_api_fuzz -fork=2 -ignore_crashes=0 -timeout=30 -rss_limit_mb=4096 -print_final_stats=1 -detect_leaks=0 -seed=33 \
  -artifact_prefix=/tmp/fuzzrun/findings/c_api- -max_total_time=9600 corpus /work/main/tests/fuzz/corpus/c_api > fuzz.log 2>&1
echo "rc=$?" > rc.txt
date -u +%FT%TZ > end.txt
