#!/usr/bin/env python3
"""Plots an attnrt-tune (tune_window) sweep: p99 latency against achieved throughput, one curve
per batching window, one panel per max batch; the error bars are the p99 range over the repeats,
the recommended setting for each offered rate is marked with a star, the p99 objective is a
horizontal line and the maximum sustainable rate a vertical one.

Input: the --json file of attnrt-tune (recommendations, objective and capacity included), or its
--csv file (the points only: nothing marked). Output: a PNG.

  attnrt-tune --rates 500,2000,8000 --json tune.json --csv tune.csv
  bench/plot_tune.py tune.json -o tune.png [--title TEXT]

Needs matplotlib (Debian: apt-get install python3-matplotlib, which scripts/setup.sh installs;
else pip install matplotlib). --help needs nothing.
"""
import argparse
import csv
import json
import sys


def load(path):
    """(points, document): points as dicts with float fields; document {} for a CSV."""
    if path.endswith(".csv"):
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
        points = [{k: float(v) for k, v in r.items()} for r in rows]
        return points, {}
    with open(path) as f:
        doc = json.load(f)
    if doc.get("tool") != "attnrt-tune":
        sys.exit(f"plot_tune: {path} is not an attnrt-tune JSON document (no \"tool\": \"attnrt-tune\")")
    return doc["points"], doc


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("input", help="attnrt-tune --json (or --csv) output")
    ap.add_argument("-o", "--output", required=True, help="PNG to write")
    ap.add_argument("--title", default=None, help="figure title (default: device and shape)")
    args = ap.parse_args()

    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        sys.exit("plot_tune: matplotlib is missing: apt-get install python3-matplotlib "
                 "(scripts/setup.sh does) or pip install matplotlib")

    points, doc = load(args.input)
    if not points:
        sys.exit(f"plot_tune: {args.input} holds no points")
    batches = sorted({int(p["max_batch"]) for p in points})
    windows = sorted({int(p["window_us"]) for p in points})
    recommended = {}  # (window, batch) -> [rates]
    for r in doc.get("recommendations", []):
        if r.get("met"):
            s = r["setting"]
            recommended.setdefault((s["window_us"], s["max_batch"]), []).append(r["rate"])

    fig, axes = plt.subplots(1, len(batches), figsize=(5.2 * len(batches), 4.4), sharey=True,
                             squeeze=False)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    slo = doc.get("objective", {}).get("p99_us")
    max_rate = doc.get("capacity", {}).get("max_rate_per_s")
    for ax, b in zip(axes[0], batches):
        for i, w in enumerate(windows):
            curve = sorted((p for p in points
                            if int(p["max_batch"]) == b and int(p["window_us"]) == w),
                           key=lambda p: p["rate"])
            if not curve:
                continue
            x = [p["throughput"] if "throughput" in p else p["throughput_per_s"] for p in curve]
            y = [p["p99_us"] for p in curve]
            lo = [p["p99_us"] - p.get("p99_min_us", p["p99_us"]) for p in curve]
            hi = [p.get("p99_max_us", p["p99_us"]) - p["p99_us"] for p in curve]
            color = colors[i % len(colors)]
            ax.errorbar(x, y, yerr=[lo, hi], marker="o", ms=4, capsize=3, color=color,
                        label=f"window {w} us")
            for p, xi, yi in zip(curve, x, y):
                if p.get("shortened"):
                    ax.plot([xi], [yi], "x", color="black", ms=7)
                if p["rate"] in recommended.get((w, b), []):
                    ax.plot([xi], [yi], "*", color=color, ms=18, markeredgecolor="black",
                            zorder=5)
                    ax.annotate(f"recommended\nat {p['rate']:.0f}/s", (xi, yi),
                                textcoords="offset points", xytext=(8, 8), fontsize=8)
        if slo:
            ax.axhline(slo, color="red", ls="--", lw=1, label=f"objective p99 {slo:.0f} us")
        if max_rate:
            ax.axvline(max_rate, color="gray", ls=":", lw=1,
                       label=f"max sustainable {max_rate:.0f}/s")
        ax.set_yscale("log")
        ax.set_title(f"max batch {b}")
        ax.set_xlabel("achieved throughput (requests/s)")
        ax.grid(True, which="both", alpha=0.3)
    axes[0][0].set_ylabel("p99 latency (us), range over repeats")
    axes[0][-1].legend(fontsize=8, loc="best")
    title = args.title
    if title is None and doc:
        s = doc.get("shape", {})
        title = (f"attnrt-tune {doc.get('version', '')} on the {doc.get('device', '?')}: "
                 f"H={s.get('heads')} Hkv={s.get('kv_heads')} D={s.get('head_dim')} "
                 f"context {s.get('context')}, {doc.get('sweep', {}).get('repeats', '?')} "
                 f"repeats; x: far past capacity (1 short run)")
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(args.output, dpi=110)
    print(f"plot_tune: wrote {args.output}")


if __name__ == "__main__":
    main()
