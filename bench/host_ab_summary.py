#!/usr/bin/env python3
"""Summarises a same-call A/B of api_host_path_bench (scripts/host-ab.sh): reads OUT_DIR/old_N.txt
and new_N.txt (the bench's printed tables, rounds N = 1, 2, ...) and prints one line a latency
row: each side's p50 in every round, the medians' ratio new/old (< 1: the new tree is faster),
and each side's median of the row's p50 / floor (the ratio the bench prints against the floor
of the same run).

    bench/host_ab_summary.py OUT_DIR [--rows REGEX]
      --rows  only the rows whose name matches REGEX (default: every row)
"""
import re
import statistics
import sys

from ab_rounds import read_rounds

# "name   p50   p99   p50/floor", the name possibly indented and holding spaces.
ROW = re.compile(r"^\s*(\S.*?)\s+(-?[0-9]+\.[0-9]+)\s+(-?[0-9]+\.[0-9]+)\s+(-?[0-9]+\.[0-9]+)\s*$")


def rows(path):
    """{row name: (p50, p99, ratio)} of one run's output, first occurrence of each name."""
    found = {}
    with open(path, errors="replace") as f:
        for line in f:
            m = ROW.match(line.rstrip("\n"))
            if m and m.group(1) not in found:
                found[m.group(1)] = tuple(float(m.group(i)) for i in (2, 3, 4))
    return found


def main(argv):
    args = argv[1:]
    if not args or args[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if args else 2
    out, pattern = args[0], None
    rest = args[1:]
    if rest[:1] == ["--rows"] and len(rest) == 2:
        try:
            pattern = re.compile(rest[1])
        except re.error as e:
            print(f"host_ab_summary: --rows {rest[1]}: {e}", file=sys.stderr)
            return 2
    elif rest:
        print(f"host_ab_summary: unexpected arguments {' '.join(rest)} (see --help)",
              file=sys.stderr)
        return 2
    rounds, complete = read_rounds(out, "txt", rows, "host_ab_summary")
    if not complete:
        return 1
    names = []
    for n in complete:
        for side in ("old", "new"):
            for name in rounds[n][side]:
                if name not in names and (pattern is None or pattern.search(name)):
                    names.append(name)
    nan = float("nan")
    print(f"{'row (p50, us)':<40} " +
          " ".join(f"{'old' + str(n):>7} {'new' + str(n):>7}" for n in complete) +
          "  new/old  /floor old  new")
    for name in names:
        cells, medians, ratios = [], {}, {}
        for side in ("old", "new"):
            values = [rounds[n][side].get(name) for n in complete]
            present = [v for v in values if v is not None]
            medians[side] = statistics.median(v[0] for v in present) if present else None
            ratios[side] = statistics.median(v[2] for v in present) if present else None
        for n in complete:
            o, w = rounds[n]["old"].get(name), rounds[n]["new"].get(name)
            cells.append(f"{nan if o is None else o[0]:7.2f} {nan if w is None else w[0]:7.2f}")
        if medians["old"] and medians["new"] is not None:
            change = f"{medians['new'] / medians['old']:8.4f}"
        else:
            change = f"{'n/a':>8}"
        floor = " ".join(f"{nan if r is None else r:5.2f}" for r in (ratios["old"], ratios["new"]))
        print(f"{name:<40} {' '.join(cells)} {change}  {floor:>15}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
