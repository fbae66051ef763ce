#!/usr/bin/env bash
# On a GPU machine: a same-call A/B of the host path. This tree against OLD_TREE, a whole source
# tree of another commit (made where git is, e.g. `git archive REV | tar -x -C .ab/tree`, and
# carried to the device machine): api_host_path_bench built in both (Release, DCHECKS off, sm_90
# unless CMAKE_CUDA_ARCHITECTURES says otherwise), then run old, new, old, new, ... with the
# same arguments, and summarised by bench/host_ab_summary.py: one line a latency row, each
# round's p50 of each side, new/old of their medians, and each side's p50 / floor
# (OUT_DIR/ab.txt). The host's floor moves between runs (19.4-22.5 us within one call on the
# H200 host, 2026-11-29): judge a change by several rounds, not one.
#
#   scripts/host-ab.sh OLD_TREE OUT_DIR [--rounds N] [--sections LIST] [--rows REGEX]
#                      [--targets "T ..."] [--help]
#     --rounds    alternations (default 3)
#     --sections  api_host_path_bench --sections (default b1: floors and B=1 rows, ~9 s a run)
#     --rows      only these rows in ab.txt (host_ab_summary.py --rows; default every row)
#     --targets   more targets to build in this tree (its build is build-ab-host/)
# Writes OUT_DIR/old_N.txt, new_N.txt, build logs and ab.txt; exits 1 when a build or a run
# fails. Environment: JOBS (build jobs of the new tree; the old gets a third of them).
set -uo pipefail
case "${1:-}" in -h|--help|"") sed -n '2,/^set -/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;; esac
old_tree=$1
out=${2:-}
[ -n "$out" ] || { echo "host-ab.sh: OUT_DIR missing (see --help)" >&2; exit 2; }
shift 2
rounds=3 sections=b1 rows="" targets=""
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds=${2:-}; shift 2 ;;
    --sections) sections=${2:-}; shift 2 ;;
    --rows) rows=${2:-}; shift 2 ;;
    --targets) targets=${2:-}; shift 2 ;;
    *) echo "host-ab.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[ -f "$old_tree/bench/api_host_path_bench.cu" ] || {
  echo "host-ab.sh: $old_tree is not a source tree of attnrt (no bench/api_host_path_bench.cu)" >&2
  exit 2; }
case "$rounds" in ''|*[!0-9]*|0) echo "host-ab.sh: --rounds $rounds: expected N >= 1" >&2; exit 2 ;; esac
root=$(cd "$(dirname "$0")/.." && pwd)
old_tree=$(cd "$old_tree" && pwd)
mkdir -p "$out" && out=$(cd "$out" && pwd)
cd "$root" || exit 2
old_build=$(mktemp -d /tmp/host-ab-old.XXXXXX)
# shellcheck source=ab_lib.sh
source "$root/scripts/ab_lib.sh"
ab_build host-ab.sh "$old_tree" "$old_build" build-ab-host "$out" api_host_path_bench \
  "api_host_path_bench $targets" || exit 1
run() {  # SIDE ROUND
  local bin=build-ab-host/bench/api_host_path_bench
  [ "$1" = old ] && bin=$old_build/bench/api_host_path_bench
  "$bin" --sections "$sections" > "$out/$1_$2.txt" 2>&1
}
status=0
ab_alternate host-ab.sh "$rounds" run || status=1
summary=(python3 bench/host_ab_summary.py "$out")
[ -n "$rows" ] && summary+=(--rows "$rows")
"${summary[@]}" | tee "$out/ab.txt" || status=1
rm -rf "$old_build"
exit $status
