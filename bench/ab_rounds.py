#!/usr/bin/env python3
"""What the A/B summaries share (bench/kernel_ab_summary.py, bench/host_ab_summary.py): reading
OUT_DIR's old_N.EXT and new_N.EXT, one per side and round. A module; run directly it prints this.

    rounds, complete = read_rounds(out, ext, reader, name)
      reader(path) -> {row: value}; a file it cannot read (it raises OSError, ValueError or
      KeyError, or returns nothing) is skipped, named on stderr with the reason.
      rounds: {round: {"old": rows, "new": rows}}; complete: the rounds with both sides,
      ascending (empty: the caller says so and exits 1).
"""
import os
import re
import sys


def read_rounds(out, ext, reader, name):
    rounds = {}
    try:
        files = sorted(os.listdir(out))
    except OSError as e:
        print(f"{name}: cannot read {out}: {e.strerror}", file=sys.stderr)
        return rounds, []
    for f in files:
        m = re.fullmatch(r"(old|new)_(\d+)\." + re.escape(ext), f)
        if not m:
            continue
        try:
            rows = reader(os.path.join(out, f))
        except (OSError, ValueError, KeyError) as e:  # a run that failed leaves a cut file
            print(f"{name}: {f} skipped: {e}", file=sys.stderr)
            continue
        if not rows:
            print(f"{name}: {f} skipped: no rows", file=sys.stderr)
            continue
        rounds.setdefault(int(m.group(2)), {})[m.group(1)] = rows
    complete = sorted(n for n, sides in rounds.items() if len(sides) == 2)
    if not complete:
        print(f"{name}: no old_N.{ext} / new_N.{ext} pair in {out}", file=sys.stderr)
    return rounds, complete


if __name__ == "__main__":
    print(__doc__.strip())
