#!/bin/bash
# The depth read and the idle notification only while a WaitIdle is under way (new, 77e3e29) against
# every pass and every emptied queue (old, edbb0a9), on the 2-core VM (its load from outside varies): scheduler_intake_bench, 1 and 4
# producers, callbacks, the small shape, alternating three times. OLD and NEW are the two
# binaries (Release, DCHECKs off); each run writes its benchmark JSON beside this script.
set -u
D=$(cd "$(dirname "$0")" && pwd)
for i in 1 2 3; do
  for side in old new; do
    bin=$OLD; [ $side = new ] && bin=$NEW
    $bin --benchmark_filter="BM_Intake/producers:(1|4)/token:1/shape:0/future:0" \
      --benchmark_out="$D/intake_${i}_$side.json" --benchmark_out_format=json > /dev/null 2>&1
    echo "round $i $side rc=$?"
  done
done
