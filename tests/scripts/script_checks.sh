#!/usr/bin/env bash
# script_checks.sh: what the shell tests of scripts share, sourced by them after their own --help:
# root (the repository), tmp (a directory removed at exit), check NAME CONDITION (evals the
# condition, counts and names a failure) and checks_done NAME [LOG] (exits 1 printing LOG when a
# check failed, else says all passed).
case "${1:-}" in -h|--help) sed -n '2,5p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;; esac
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
check() { if ! eval "$2"; then echo "FAILED: $1" >&2; fails=$((fails + 1)); fi; }
checks_done() {
  if [ $fails -ne 0 ]; then
    [ -n "${2:-}" ] && cat "$2" >&2
    echo "$1: $fails checks failed" >&2
    exit 1
  fi
  echo "$1: all checks passed"
}
