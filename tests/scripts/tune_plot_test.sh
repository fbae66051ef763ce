#!/bin/sh
# tune_plot_test.sh TUNE PLOT_SCRIPT [TUNE ARGS...]: runs attnrt-tune (TUNE) with --json and
# --csv into a temporary directory, checks both (the JSON complete, with its shape, version,
# objective, capacity and a recommendation entry per rate, each run's tail fields; one CSV row
# per point), then draws
# the JSON with PLOT_SCRIPT (bench/plot_tune.py) and passes when a non-empty PNG comes out.
# Exit 77 (a ctest skip) when no python3 with matplotlib is found.
set -u
case "${1:-}" in -h|--help) sed -n '2,6p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac
if [ $# -lt 2 ]; then
  echo "usage: tune_plot_test.sh TUNE PLOT_SCRIPT [TUNE ARGS...] (see --help)" >&2
  exit 2
fi
tune=$1 plot=$2
shift 2
dir=$(mktemp -d) || exit 2
trap 'rm -rf "$dir"' EXIT
fail() { echo "tune_plot_test: FAILED: $*" >&2; exit 1; }

"$tune" "$@" --json "$dir/tune.json" --csv "$dir/tune.csv" || fail "the tune run exited $?"
python=""
for p in python3 /usr/bin/python3; do
  if command -v "$p" >/dev/null 2>&1 && "$p" -c 'import matplotlib' 2>/dev/null; then
    python=$p
    break
  fi
done
check=${python:-python3}
"$check" - "$dir/tune.json" "$dir/tune.csv" <<'PY' || fail "the JSON or CSV is not as expected"
import csv, json, sys
doc = json.load(open(sys.argv[1]))
for key in ("tool", "version", "device", "shape", "objective", "sweep", "capacity", "points",
            "recommendations"):
    assert key in doc, f"no '{key}' in the JSON"
assert doc["complete"] is True, "the JSON is not marked complete"
rates = doc["sweep"]["rates"]
assert [r["rate"] for r in doc["recommendations"]] == rates, "not one recommendation per rate"
for r in doc["recommendations"]:
    assert ("setting" in r) if r["met"] else ("miss_reason" in r), f"incomplete verdict {r}"
n = len(rates) * len(doc["sweep"]["windows_us"]) * len(doc["sweep"]["max_batches"])
assert len(doc["points"]) == n, f"{len(doc['points'])} points, expected {n}"
for p in doc["points"]:
    for run in p["runs"]:
        for key in ("warmup_requests", "p99_with_warmup_us", "submit_late_p99_us", "late",
                    "host_canary", "host_canary_late_ms", "cpu_stolen_ms", "host_disturbed"):
            assert key in run, f"no '{key}' in a run of point {p['rate']}"
        assert " requests over " in run["late"], f"late: {run['late']}"
        assert "wake-ups late by over 200 us" in run["host_canary"], run["host_canary"]
        assert run["host_canary_late_ms"] >= 0, run["host_canary_late_ms"]
        assert run["cpu_stolen_ms"] >= 0 or run["cpu_stolen_ms"] == -1, run["cpu_stolen_ms"]
assert "host_stalls" in doc, "no 'host_stalls' in the JSON"
rows = list(csv.DictReader(open(sys.argv[2])))
assert len(rows) == n, f"{len(rows)} CSV rows, expected {n}"
print(f"tune_plot_test: JSON and CSV hold {n} points")
PY
if [ -z "$python" ]; then
  echo "tune_plot_test: SKIPPED the plot: no python3 with matplotlib (apt-get install python3-matplotlib)"
  exit 77
fi
"$python" "$plot" "$dir/tune.json" -o "$dir/tune.png" || fail "plot_tune.py exited $?"
[ -s "$dir/tune.png" ] || fail "no PNG, or an empty one"
head -c 8 "$dir/tune.png" | od -An -c | grep -q 'P   N   G' || fail "tune.png is not a PNG"
echo "tune_plot_test: OK ($(wc -c < "$dir/tune.png") bytes of PNG)"
