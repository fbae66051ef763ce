#!/usr/bin/env python3
"""Timelines of lone pieces from `nsys stats -r cuda_gpu_trace -f csv` output: kernels and
copies grouped into pieces (GPU idle > 15 us between them), pieces grouped by how many gather
kernels they ran (row chunks), and for each group the median piece's span and the timeline of
the piece closest to it."""
import csv, statistics, sys
from collections import defaultdict

rows = []
with open(sys.argv[1]) as f:
    lines = f.read().splitlines()
start = next(i for i, l in enumerate(lines) if l.startswith('"Start') or l.startswith('Start'))
for r in csv.DictReader(lines[start:]):
    try:
        t0 = float(r['Start (ns)']); d = float(r['Duration (ns)'])
    except (KeyError, ValueError):
        continue
    rows.append((t0, d, r.get('Name', '')))
rows.sort()
pieces, cur, end = [], [], None
for t0, d, name in rows:
    if cur and t0 - end > 15000:
        pieces.append(cur); cur = []
    if not cur: end = t0 + d
    cur.append((t0, d, name)); end = max(end, t0 + d)
if cur: pieces.append(cur)
groups = defaultdict(list)
for p in pieces:
    g = sum('GatherInputs' in n for _, _, n in p)
    dec = sum('Decode' in n or 'decode' in n for _, _, n in p)
    if dec == 0: continue
    span = max(t + d for t, d, _ in p) - p[0][0]
    groups[g].append((span, p))
for g, ps in sorted(groups.items()):
    spans = [s for s, _ in ps]
    med = statistics.median(spans)
    print(f"gathers {g}: {len(ps)} pieces, span median {med/1000:.1f} us, p10 {sorted(spans)[len(spans)//10]/1000:.1f}")
    s, p = min(ps, key=lambda x: abs(x[0] - med))
    t00 = p[0][0]
    for t, d, n in p:
        print(f"   +{(t-t00)/1000:7.1f} us  {d/1000:7.1f} us  {n[:90]}")
