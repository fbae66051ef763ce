"""Old/new/old-again A/B table from bench_{old,new,old2}.json (kernels_decode_bench medians)."""
import json
import sys

o = sys.argv[1]
rows = {}
for v in ("old", "new", "old2"):
    try:
        d = json.load(open(f"{o}/bench_{v}.json"))
    except Exception as e:  # a run that failed leaves no JSON
        print(v, "missing:", e)
        continue
    for b in d["benchmarks"]:
        if b["name"].endswith("_median"):
            rows.setdefault(b["name"].split("/")[1], {})[v] = b["us"]
print(f"{'shape':28s} {'old us':>9s} {'new us':>9s} {'old2 us':>9s} {'new/best old':>12s}")
for s, r in rows.items():
    old = min(r.get("old", 1e9), r.get("old2", 1e9))
    print(f"{s:28s} {r.get('old', 0):9.2f} {r.get('new', 0):9.2f} {r.get('old2', 0):9.2f} "
          f"{r.get('new', 0) / old:12.3f}")
