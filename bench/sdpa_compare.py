#!/usr/bin/env python3
"""PyTorch SDPA on the decode shapes of bench/kernels_decode_bench.cu with *contiguous* KV.

Each shape is timed as CUDA-graph replays (torch.cuda.graphs): one graph runs `steps` SDPA calls
cycling over input sets whose total exceeds L2; CUDA events around each replay; the median over
replays is the time per call. Prints a table and writes JSON. With --gbench-json (the Google
Benchmark JSON of kernels_decode_bench, ideally from the same device run) it adds attnrt/SDPA
time ratios per shape and variant, the default dispatch as its own row named `default` (the
bench's BM_Decode/<shape>/default), and per shape the winner (every variant and SDPA) and its
margin over the runner-up.

The skewed batch (one sequence at 32K, 31 at 512) has no contiguous layout without padding:
SDPA runs it on K/V padded to the longest sequence with a boolean length mask (the padded work),
attnrt on the ragged paged batch; its row says so.

  python3 bench/sdpa_compare.py --out sdpa.json [--gbench-json decode.json] [--ratios-out r.json]
"""
import argparse
import json
import math
import statistics
import sys

# name, B, H, Hkv, T, D, first: row 0's length when it differs from T (a skewed batch), else
# None. Block size is irrelevant for contiguous KV. Names are kernels_decode_bench's.
SHAPES = [
    ("mha_b32_h32_t4096_bs16", 32, 32, 32, 4096, 128, None),
    ("mha_b32_h32_t4096_bs32", 32, 32, 32, 4096, 128, None),
    ("mha_b32_h32_t4096_bs64", 32, 32, 32, 4096, 128, None),
    ("b1_h32_t4096", 1, 32, 32, 4096, 128, None),
    ("b1_h32_t65536", 1, 32, 32, 65536, 128, None),
    ("gqa32_8_b32_t4096", 32, 32, 8, 4096, 128, None),
    ("gqa64_8_b32_t4096", 32, 64, 8, 4096, 128, None),
    ("b32_h8_t128_d64", 32, 8, 8, 128, 64, None),
    ("b32_h8_t128_d64_append", 32, 8, 8, 128, 64, None),
    ("mha_b32_h32_t4096_d64", 32, 32, 32, 4096, 64, None),
    ("gqa16_8_b32_t4096_d256", 32, 16, 8, 4096, 256, None),
    ("gqa32_4_b32_t4096", 32, 32, 4, 4096, 128, None),
    ("gqa32_8_b32_t4096_bs32", 32, 32, 8, 4096, 128, None),
    ("gqa32_8_b32_t4096_bs64", 32, 32, 8, 4096, 128, None),
    ("b8_h32_t16384", 8, 32, 32, 16384, 128, None),
    ("b128_h32_t1024", 128, 32, 32, 1024, 128, None),
    ("skew_b32_h32_1x32768_31x512", 32, 32, 32, 512, 128, 32768),
]
# attnrt's FP8 E4M3 cache rows (issue 13): each is timed against FP16 SDPA on the shape without
# the suffix, timed once in this run.
FP8_SUFFIX = "_fp8"
FP8_SHAPES = ["mha_b32_h32_t4096_bs16", "b1_h32_t4096", "b1_h32_t65536", "gqa32_8_b32_t4096",
              "gqa64_8_b32_t4096", "b32_h8_t128_d64_append"]
PADDED_NOTE = ("SDPA on the padded work: K/V padded to {t} tokens for all {b} sequences with a "
               "boolean length mask; attnrt on the ragged paged batch (row 0 at {first}, the rest "
               "at {short})")
ROTATION_BYTES = 256 << 20
MIN_STEPS = 20


def step_bytes(b, h, hkv, t, d):
    return 2 * b * hkv * t * d * 2 + 2 * b * h * d * 2


def time_sdpa(torch, b, h, hkv, t, d, replays, first=None):
    """SDPA on contiguous K/V [b, hkv, t, d]. With `first`, row 0 has `first` tokens and the others
    t: K/V are padded to the longest and a boolean mask hides each row's padding."""
    import torch.nn.functional as F

    lengths = None
    if first is not None:
        lengths = [first] + [t] * (b - 1)
        t = max(lengths)
    per_set = step_bytes(b, h, hkv, t, d)
    n_sets = max(2, math.ceil(ROTATION_BYTES / per_set))
    steps = math.ceil(MIN_STEPS / n_sets) * n_sets
    gen = torch.Generator(device="cuda").manual_seed(0)
    sets = []
    for _ in range(n_sets):
        q = torch.randn(b, h, 1, d, device="cuda", dtype=torch.float16, generator=gen)
        k = torch.randn(b, hkv, t, d, device="cuda", dtype=torch.float16, generator=gen)
        v = torch.randn(b, hkv, t, d, device="cuda", dtype=torch.float16, generator=gen)
        sets.append((q, k, v))
    gqa = h != hkv
    mask = None
    if lengths is not None:
        lens = torch.tensor(lengths, device="cuda")
        mask = (torch.arange(t, device="cuda")[None, :] < lens[:, None]).view(b, 1, 1, t)

    def run(i):
        q, k, v = sets[i % n_sets]
        if mask is None:
            return F.scaled_dot_product_attention(q, k, v, enable_gqa=gqa)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=gqa)

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):  # warm-up outside the graph (kernel selection, workspaces)
        for i in range(3):
            run(i)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outs = [run(i) for i in range(steps)]
    for _ in range(3):
        graph.replay()
    torch.cuda.synchronize()
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(replays):
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e-3 / steps)
    del outs, graph, sets
    torch.cuda.empty_cache()
    t_med = statistics.median(times)
    return {"us": t_med * 1e6, "TBps": per_set / t_med / 1e12, "bytes": per_set,
            "rotation_sets": n_sets, "steps_per_graph": steps, "replays": replays}


def winners(result, ratios, default_variant):
    """Per shape: the fastest of SDPA and every attnrt variant and its margin over the runner-up
    (runner-up time / winner time - 1). `default` is `default_variant` under another name: it
    contends only when that variant's own row was not timed (a --benchmark_filter left it out)."""
    out = {}
    for name, r in result["shapes"].items():
        times = {"sdpa": r["us"]}
        rows = ratios.get(name, {})
        for variant, x in rows.items():
            if variant != "default" or default_variant not in rows:
                times[variant] = x["attnrt_us"]
        ranked = sorted(times.items(), key=lambda kv: kv[1])
        w = {"winner": ranked[0][0], "us": ranked[0][1]}
        if len(ranked) > 1:
            w.update(runner_up=ranked[1][0], runner_up_us=ranked[1][1],
                     margin=ranked[1][1] / ranked[0][1] - 1.0)
        default = ratios.get(name, {}).get("default")
        if default:
            w["default_over_sdpa"] = default["attnrt_over_sdpa"]
        out[name] = w
    return out


def read_ceiling(torch):
    """Read-only ceiling: sum over a 4 GiB float32 buffer (reads every byte once), best of 10."""
    x = torch.ones(1 << 30, dtype=torch.float32, device="cuda")
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    best = float("inf")
    for i in range(11):
        start.record()
        x.sum()
        end.record()
        end.synchronize()
        if i:
            best = min(best, start.elapsed_time(end) * 1e-3)
    del x
    torch.cuda.empty_cache()
    return x_bytes_tbps(4 << 30, best)


def x_bytes_tbps(nbytes, seconds):
    return nbytes / seconds / 1e12


def load_gbench_medians(path):
    """{(shape, variant): us} from Google Benchmark JSON (median aggregates, else plain runs), the
    Google Benchmark context, and {shape: microseconds of the shape's bytes at its paged read
    ceiling} (the fastest any paged kernel can read that cache; benches that print it)."""
    with open(path) as f:
        data = json.load(f)
    medians, plain, paged_floor = {}, {}, {}
    for bm in data.get("benchmarks", []):
        name = bm.get("run_name", bm.get("name", ""))
        parts = name.split("/")
        if len(parts) < 3 or parts[0] != "BM_Decode" or "us" not in bm:
            continue
        key = (parts[1], parts[2])
        if bm.get("paged_ceiling_TBps") and bm.get("bytes"):
            paged_floor.setdefault(parts[1], bm["bytes"] / (bm["paged_ceiling_TBps"] * 1e12) * 1e6)
        if bm.get("aggregate_name") == "median":
            medians[key] = bm["us"]
        elif bm.get("run_type", "iteration") == "iteration":
            plain.setdefault(key, []).append(bm["us"])
    for key, values in plain.items():
        medians.setdefault(key, statistics.median(values))
    return medians, data.get("context", {}), paged_floor


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="sdpa_compare.json", help="JSON with SDPA timings (and ratios)")
    ap.add_argument("--gbench-json", help="kernels_decode_bench --benchmark_out JSON to compare with")
    ap.add_argument("--sdpa-json", help="reuse SDPA timings from an earlier --out instead of timing")
    ap.add_argument("--replays", type=int, default=50)
    ap.add_argument("--shapes", help="comma-separated subset of shape names")
    ap.add_argument("--default-variant", default="split_kv",
                    help="the entry the `default` row copies when the gbench JSON has no "
                         "BM_Decode/<shape>/default (a bench built before it had one)")
    args = ap.parse_args()

    if args.sdpa_json:
        with open(args.sdpa_json) as f:
            result = json.load(f)
    else:
        try:
            import torch
        except ImportError:
            print("sdpa_compare.py: needs PyTorch with CUDA to time SDPA: pip install torch "
                  "(see https://pytorch.org/get-started/locally/), or pass --sdpa-json",
                  file=sys.stderr)
            return 2

        if not torch.cuda.is_available():
            print("no CUDA device: SDPA not timed", file=sys.stderr)
            return 2
        result = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                  "read_ceiling_TBps": read_ceiling(torch), "shapes": {}}
        wanted = set(args.shapes.split(",")) if args.shapes else None
        for name, b, h, hkv, t, d, first in SHAPES:
            if wanted and name not in wanted:
                continue
            if name.endswith("_append") and name[: -len("_append")] in result["shapes"]:
                result["shapes"][name] = dict(result["shapes"][name[: -len("_append")]],
                                              note="SDPA alone (no KV append)")
                continue
            row = dict(time_sdpa(torch, b, h, hkv, t, d, args.replays, first),
                       B=b, H=h, Hkv=hkv, T=t, D=d)
            if first is not None:
                row.update(first_T=first, note=PADDED_NOTE.format(t=max(t, first), b=b,
                                                                  first=first, short=t))
            result["shapes"][name] = row
        for base in FP8_SHAPES:
            if base in result["shapes"]:
                result["shapes"][base + FP8_SUFFIX] = dict(
                    result["shapes"][base],
                    note=f"FP16 SDPA on {base} (the same run); attnrt reads an FP8 E4M3 cache")

    print(f"device: {result['device']}  torch {result['torch']}  "
          f"read ceiling {result['read_ceiling_TBps']:.3f} TB/s")
    ratios = {}
    if args.gbench_json:
        medians, _, paged_floor = load_gbench_medians(args.gbench_json)
        for shape, us in paged_floor.items():
            if shape in result["shapes"]:
                result["shapes"][shape]["paged_floor_us"] = us
                result["shapes"][shape]["paged_floor_over_sdpa"] = us / result["shapes"][shape]["us"]
        for (shape, variant), us in medians.items():
            if shape in result["shapes"]:
                ratios.setdefault(shape, {})[variant] = {
                    "attnrt_us": us, "sdpa_us": result["shapes"][shape]["us"],
                    "attnrt_over_sdpa": us / result["shapes"][shape]["us"]}
        for shape, rows in ratios.items():
            if "default" not in rows and args.default_variant in rows:
                rows["default"] = dict(rows[args.default_variant],
                                       note="copied from " + args.default_variant +
                                            " (no BM_Decode/<shape>/default in the gbench JSON)")
            if "note" in result["shapes"][shape]:
                for x in rows.values():
                    x.setdefault("sdpa_note", result["shapes"][shape]["note"])
        result["ratios"] = ratios
        result["winners"] = winners(result, ratios, args.default_variant)
    variants = sorted({v for r in ratios.values() for v in r}, key=lambda v: (v != "default", v))
    # floor/SDPA: the shape's bytes at the paged read ceiling over SDPA's time, the lowest
    # attnrt/SDPA ratio a kernel reading this paged cache can reach.
    header = f"{'shape':30s} {'SDPA us':>9s} {'SDPA TB/s':>9s} {'floor/SDPA':>10s}" + "".join(
        f" {v + ' us':>14s} {v + '/SDPA':>14s}" for v in variants)
    print(header)
    for name, r in result["shapes"].items():
        floor = f"{r['paged_floor_over_sdpa']:10.3f}" if "paged_floor_over_sdpa" in r else f"{'-':>10s}"
        line = f"{name:30s} {r['us']:9.1f} {r['TBps']:9.3f} {floor}"
        for v in variants:
            x = ratios.get(name, {}).get(v)
            line += f" {x['attnrt_us']:14.1f} {x['attnrt_over_sdpa']:14.3f}" if x else f" {'-':>14s} {'-':>14s}"
        print(line)
    for name, r in result["shapes"].items():
        if "note" in r:
            print(f"  {name}: {r['note']}")
    if result.get("winners"):
        print(f"\n{'shape':30s} {'winner':>14s} {'us':>9s} {'runner-up':>14s} {'margin':>8s} "
              f"{'default/SDPA':>12s}")
        for name, w in result["winners"].items():
            margin = f"{100 * w['margin']:7.1f}%" if "margin" in w else f"{'-':>8s}"
            default = f"{w['default_over_sdpa']:12.3f}" if "default_over_sdpa" in w else f"{'-':>12s}"
            print(f"{name:30s} {w['winner']:>14s} {w['us']:9.1f} {w.get('runner_up', '-'):>14s} "
                  f"{margin} {default}")
    with open(args.out, "w") as f:
        json.dump(result, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
