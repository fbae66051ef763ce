#!/usr/bin/env python3
"""PyTorch SDPA on the decode shapes of bench/kernels_decode_bench.cu with *contiguous* KV.

Each shape is timed as CUDA-graph replays (torch.cuda.graphs): one graph runs `steps` SDPA calls
cycling over input sets whose total exceeds L2; CUDA events around each replay; the median over
replays is the time per call. Prints a table and writes JSON. With --gbench-json (the Google
Benchmark JSON of kernels_decode_bench, ideally from the same device run) it adds attnrt/SDPA
time ratios per shape and variant.

  python3 bench/sdpa_compare.py --out sdpa.json [--gbench-json decode.json] [--ratios-out r.json]
"""
import argparse
import json
import math
import statistics
import sys

# name, B, H, Hkv, T, D  (block size is irrelevant for contiguous KV)
SHAPES = [
    ("mha_b32_h32_t4096_bs16", 32, 32, 32, 4096, 128),
    ("mha_b32_h32_t4096_bs32", 32, 32, 32, 4096, 128),
    ("mha_b32_h32_t4096_bs64", 32, 32, 32, 4096, 128),
    ("b1_h32_t4096", 1, 32, 32, 4096, 128),
    ("b1_h32_t65536", 1, 32, 32, 65536, 128),
    ("gqa32_8_b32_t4096", 32, 32, 8, 4096, 128),
    ("gqa64_8_b32_t4096", 32, 64, 8, 4096, 128),
    ("b32_h8_t128_d64", 32, 8, 8, 128, 64),
    ("b32_h8_t128_d64_append", 32, 8, 8, 128, 64),
]
ROTATION_BYTES = 256 << 20
MIN_STEPS = 20


def step_bytes(b, h, hkv, t, d):
    return 2 * b * hkv * t * d * 2 + 2 * b * h * d * 2


def time_sdpa(torch, b, h, hkv, t, d, replays):
    import torch.nn.functional as F

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

    def run(i):
        q, k, v = sets[i % n_sets]
        return F.scaled_dot_product_attention(q, k, v, enable_gqa=gqa)

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
    """{(shape, variant): us} from Google Benchmark JSON (median aggregates, else plain runs)."""
    with open(path) as f:
        data = json.load(f)
    medians, plain = {}, {}
    for bm in data.get("benchmarks", []):
        name = bm.get("run_name", bm.get("name", ""))
        parts = name.split("/")
        if len(parts) < 3 or parts[0] != "BM_Decode" or "us" not in bm:
            continue
        key = (parts[1], parts[2])
        if bm.get("aggregate_name") == "median":
            medians[key] = bm["us"]
        elif bm.get("run_type", "iteration") == "iteration":
            plain.setdefault(key, []).append(bm["us"])
    for key, values in plain.items():
        medians.setdefault(key, statistics.median(values))
    return medians, data.get("context", {})


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="sdpa_compare.json", help="JSON with SDPA timings (and ratios)")
    ap.add_argument("--gbench-json", help="kernels_decode_bench --benchmark_out JSON to compare with")
    ap.add_argument("--sdpa-json", help="reuse SDPA timings from an earlier --out instead of timing")
    ap.add_argument("--replays", type=int, default=50)
    ap.add_argument("--shapes", help="comma-separated subset of shape names")
    args = ap.parse_args()

    if args.sdpa_json:
        with open(args.sdpa_json) as f:
            result = json.load(f)
    else:
        import torch

        if not torch.cuda.is_available():
            print("no CUDA device: SDPA not timed", file=sys.stderr)
            return 2
        result = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                  "read_ceiling_TBps": read_ceiling(torch), "shapes": {}}
        wanted = set(args.shapes.split(",")) if args.shapes else None
        for name, b, h, hkv, t, d in SHAPES:
            if wanted and name not in wanted:
                continue
            if name.endswith("_append") and name[: -len("_append")] in result["shapes"]:
                result["shapes"][name] = dict(result["shapes"][name[: -len("_append")]],
                                              note="SDPA alone (no KV append)")
                continue
            result["shapes"][name] = dict(time_sdpa(torch, b, h, hkv, t, d, args.replays),
                                          B=b, H=h, Hkv=hkv, T=t, D=d)

    print(f"device: {result['device']}  torch {result['torch']}  "
          f"read ceiling {result['read_ceiling_TBps']:.3f} TB/s")
    ratios = {}
    if args.gbench_json:
        medians, _ = load_gbench_medians(args.gbench_json)
        for (shape, variant), us in medians.items():
            if shape in result["shapes"]:
                ratios.setdefault(shape, {})[variant] = {
                    "attnrt_us": us, "sdpa_us": result["shapes"][shape]["us"],
                    "attnrt_over_sdpa": us / result["shapes"][shape]["us"]}
        result["ratios"] = ratios
    variants = sorted({v for r in ratios.values() for v in r})
    header = f"{'shape':26s} {'SDPA us':>9s} {'SDPA TB/s':>9s}" + "".join(
        f" {v + ' us':>14s} {v + '/SDPA':>14s}" for v in variants)
    print(header)
    for name, r in result["shapes"].items():
        line = f"{name:26s} {r['us']:9.1f} {r['TBps']:9.3f}"
        for v in variants:
            x = ratios.get(name, {}).get(v)
            line += f" {x['attnrt_us']:14.1f} {x['attnrt_over_sdpa']:14.3f}" if x else f" {'-':>14s} {'-':>14s}"
        print(line)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
