#!/bin/sh
# expect_exit.sh CODES REGEX COMMAND [ARGS...]: runs COMMAND, shows its output, and passes only
# when its exit code is one of CODES (comma-separated, e.g. 0,3) and its output (stdout and
# stderr) matches the extended regular expression REGEX. For ctest checks of a tool's output:
# PASS_REGULAR_EXPRESSION alone would let a tool that printed the text and then failed pass.
set -u
case "${1:-}" in -h|--help) sed -n '2,5p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac
if [ $# -lt 3 ]; then
  echo "usage: expect_exit.sh CODES REGEX COMMAND [ARGS...]" >&2
  exit 2
fi
codes=$1 regex=$2
shift 2
log=$(mktemp) || exit 2
trap 'rm -f "$log"' EXIT
"$@" >"$log" 2>&1
rc=$?
cat "$log"
case ",$codes," in
  *",$rc,"*) ;;
  *) echo "expect_exit: exit code $rc, expected one of $codes" >&2; exit 1 ;;
esac
if ! grep -Eq -- "$regex" "$log"; then
  echo "expect_exit: the output does not match /$regex/" >&2
  exit 1
fi
echo "expect_exit: exit code $rc and the output matches /$regex/"
