#!/bin/bash
# Sixth device call (H100): is there a host profiler on the device machine? If perf is there, a
# flat profile of the B=1 rows' main thread (the floors, `Executor::Run` and `Decode` run on it)
# to locate the host time `Run` spends beyond the bare step.
set -u
O=$1; COMMIT=$2; mkdir -p "$O"; cd "$(dirname "$0")/../../.."
B=/tmp/attnrt-build  # DCHECKS off
echo "commit $COMMIT, start $(date -u +%FT%TZ)" > "$O/record.txt"
PERF=$(command -v perf || true)
echo "perf: ${PERF:-absent}" | tee -a "$O/record.txt"
[ -z "$PERF" ] && exit 0
perf --version >> "$O/record.txt" 2>&1
cat /proc/sys/kernel/perf_event_paranoid >> "$O/record.txt" 2>&1
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNRT_DCHECKS=OFF > "$O/cfg.log" 2>&1
timeout 200 cmake --build $B -j16 --target api_host_path_bench > "$O/build.log" 2>&1
echo "build rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
timeout 90 perf record -F 20000 -o /tmp/perf.data -- $B/bench/api_host_path_bench --sections b1 > "$O/b1.txt" 2>"$O/perf_record.txt"
echo "perf record rc=$? at $(date -u +%T)" | tee -a "$O/record.txt"
perf report -i /tmp/perf.data --stdio --no-children --comm api_host_path_b --sort dso,sym 2>/dev/null | head -150 > "$O/perf_main.txt"
perf report -i /tmp/perf.data --stdio --no-children --sort comm 2>/dev/null | head -40 > "$O/perf_comm.txt"
head -60 "$O/perf_main.txt" | tee -a "$O/record.txt"
echo "end $(date -u +%FT%TZ)" >> "$O/record.txt"
