#!/usr/bin/env python3
"""Summarises a same-call A/B of kernels_decode_bench (scripts/kernel-ab.sh): reads
OUT_DIR/old_N.json and new_N.json (Google Benchmark JSON, rounds N = 1, 2, ...) and prints one
line a benchmark row: each round's old and new medians, then new/old of the medians over the
rounds (< 1: the new tree is faster).

    bench/kernel_ab_summary.py OUT_DIR
"""
import json
import re
import statistics
import sys

from ab_rounds import read_rounds


def medians(path):
    """{row name: median time in us} of the `_median` aggregates in one benchmark JSON."""
    with open(path) as f:
        data = json.load(f)
    scale = {"ns": 1e-3, "us": 1.0, "ms": 1e3, "s": 1e6}
    rows = {}
    for b in data.get("benchmarks", []):
        if b.get("aggregate_name") != "median":
            continue
        name = re.sub(r"/min_time:[^/]*|/repeats:[^/]*|/manual_time.*$", "", b["run_name"]
                      if "run_name" in b else b["name"])
        rows[name] = b["real_time"] * scale[b.get("time_unit", "ns")]
    return rows


def main(argv):
    if len(argv) != 2 or argv[1] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if len(argv) == 2 else 2
    rounds, complete = read_rounds(argv[1], "json", medians, "kernel_ab_summary")
    if not complete:
        return 1
    nan = float("nan")
    names = sorted({name for n in complete for side in rounds[n].values() for name in side})
    print(f"{'row (medians, us)':<48} " +
          " ".join(f"{'old' + str(n):>8} {'new' + str(n):>8}" for n in complete) + "  new/old")
    for name in names:
        olds = [rounds[n]["old"].get(name) for n in complete]
        news = [rounds[n]["new"].get(name) for n in complete]
        cells = " ".join(f"{nan if o is None else o:8.2f} {nan if n is None else n:8.2f}"
                         for o, n in zip(olds, news))
        o = [x for x in olds if x is not None]
        n = [x for x in news if x is not None]
        ratio = f"{statistics.median(n) / statistics.median(o):.4f}" if o and n else "n/a"
        print(f"{name:<48} {cells}  {ratio}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
