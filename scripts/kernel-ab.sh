#!/usr/bin/env bash
# On a GPU machine: a same-call A/B of two versions of kernels/. This tree against OLD_KERNELS, a
# copy of kernels/ from another commit (made where git is, e.g. `git archive REV kernels | tar -x
# -C .ab`, and carried to the device machine): both trees built (Release, DCHECKS off, sm_90
# unless CMAKE_CUDA_ARCHITECTURES says otherwise), then kernels_decode_bench's rows matching the
# filter timed old, new, old, new, ... and summarised by bench/kernel_ab_summary.py: one line a
# row, each round's old and new medians and new/old of their medians (OUT_DIR/ab.txt).
#
#   scripts/kernel-ab.sh OLD_KERNELS OUT_DIR [--filter REGEX] [--rounds N] [--blocks ORDER]
#                        [--targets "T ..."] [--help]
#     --filter   kernels_decode_bench --benchmark_filter (default: every default-dispatch row;
#                each row costs ~5-9 s a run on an H200, so 11 rows x 2 rounds x 2 sides is ~6
#                min: name the rows a change can move)
#     --rounds   alternations (default 2)
#     --blocks   allocator | in-order | shuffled (default allocator: the KV cache's layout)
#     --targets  more targets to build in this tree (e.g. decode_gpu_test), for tests in the
#                same call (the new build is build-ab-new/)
# Writes OUT_DIR/old_N.json, new_N.json (and .txt), build logs and ab.txt; exits 1 when a build
# or a run fails. Environment: JOBS (build jobs of the new tree; the old gets a third of them).
set -uo pipefail
case "${1:-}" in -h|--help|"") sed -n '2,/^set -/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;; esac
old_kernels=$1
out=${2:-}
[ -n "$out" ] || { echo "kernel-ab.sh: OUT_DIR missing (see --help)" >&2; exit 2; }
shift 2
filter='BM_ReadCeiling|/default/'
rounds=2 blocks=allocator targets=""
while [ $# -gt 0 ]; do
  case "$1" in
    --filter) filter=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --blocks) blocks=$2; shift 2 ;;
    --targets) targets=$2; shift 2 ;;
    *) echo "kernel-ab.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[ -f "$old_kernels/decode_split_kv.cu" ] || {
  echo "kernel-ab.sh: $old_kernels is not a copy of kernels/ (no decode_split_kv.cu)" >&2; exit 2; }
case "$rounds" in ''|*[!0-9]*|0) echo "kernel-ab.sh: --rounds $rounds: expected N >= 1" >&2; exit 2 ;; esac
root=$(cd "$(dirname "$0")/.." && pwd)
old_kernels=$(cd "$old_kernels" && pwd)
mkdir -p "$out" && out=$(cd "$out" && pwd)
cd "$root" || exit 2

# The old tree: this one without builds or records, its kernels/ replaced.
old_tree=$(mktemp -d /tmp/kernel-ab-old.XXXXXX)
tar --exclude=./bench/results --exclude='./build*' -cf - . | tar -xf - -C "$old_tree"
rm -rf "$old_tree/kernels" && cp -r "$old_kernels" "$old_tree/kernels"
# shellcheck source=ab_lib.sh
source "$root/scripts/ab_lib.sh"
ab_build kernel-ab.sh "$old_tree" "$old_tree/build" build-ab-new "$out" kernels_decode_bench \
  "kernels_decode_bench $targets" || exit 1
run() {  # SIDE ROUND
  local bin=build-ab-new/bench/kernels_decode_bench
  [ "$1" = old ] && bin=$old_tree/build/bench/kernels_decode_bench
  "$bin" --blocks "$blocks" --benchmark_filter="$filter" --benchmark_out="$out/$1_$2.json" \
    --benchmark_out_format=json > "$out/$1_$2.txt" 2>&1
}
status=0
ab_alternate kernel-ab.sh "$rounds" run || status=1
python3 bench/kernel_ab_summary.py "$out" | tee "$out/ab.txt" || status=1
rm -rf "$old_tree"
exit $status
