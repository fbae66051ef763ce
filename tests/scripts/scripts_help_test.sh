#!/bin/sh
# scripts_help_test.sh [REPO_ROOT]: every script of the repository (scripts/*.sh,
# bench/studies/*.sh, examples/*.sh, tests/scripts/*.sh, bench/*.py, bench/studies/*.py) answers
# --help without doing work: exit 0 within 10 s (a build or a run takes longer) with some text
# printed, and without a GPU, a build tree, torch or matplotlib. Fails naming each script that
# does not.
set -u
case "${1:-}" in -h|--help) sed -n '2,5p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac
root=${1:-$(cd "$(dirname "$0")/../.." && pwd)}
cd "$root" || exit 2
failed=0 checked=0
for s in scripts/*.sh bench/studies/*.sh examples/*.sh tests/scripts/*.sh bench/*.py \
         bench/studies/*.py; do
  [ -f "$s" ] || continue
  case "$s" in
    *.py) run="python3 $s" ;;
    *) run="bash $s" ;;
  esac
  out=$(timeout 10 $run --help 2>&1 </dev/null)
  rc=$?
  checked=$((checked + 1))
  if [ $rc -ne 0 ]; then
    echo "scripts_help_test: $s --help exited $rc" >&2
    failed=$((failed + 1))
  elif [ -z "$out" ]; then
    echo "scripts_help_test: $s --help printed nothing" >&2
    failed=$((failed + 1))
  fi
done
if [ $failed -ne 0 ]; then
  echo "scripts_help_test: FAILED ($failed problems, $checked scripts)" >&2
  exit 1
fi
echo "scripts_help_test: OK ($checked scripts answer --help)"
