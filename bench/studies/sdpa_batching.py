#!/usr/bin/env python3
"""Study 2, PyTorch side: per-query decode latency of torch SDPA vs B x H on this GPU.

Same table as bench/kernels_study_batching_bench.cu (the seed's (B, H) configs, D = 64, MHA,
q-len 1, context T = 128 and 4096, FP16). GPU time: the stream is held by torch.cuda._sleep while
the host enqueues the call between two events (so Python's launch cost is not counted); wall
time: host clock around the call plus a synchronize. Medians of 30. max_diff: |out - ref| with the
reference computed in float64 by the math path on the same inputs.

    python3 bench/studies/sdpa_batching.py --out sdpa_batching.json
"""
import argparse
import json
import statistics
import sys
import time

torch = F = None  # torch and torch.nn.functional, imported by main() after the arguments parsed

CONFIGS = [(1, 1), (2, 4), (8, 4), (16, 8), (32, 8)]
D = 64


def backend_fns():
    fns = {"default": None}
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
        fns.update({"flash": (sdpa_kernel, SDPBackend.FLASH_ATTENTION),
                    "efficient": (sdpa_kernel, SDPBackend.EFFICIENT_ATTENTION),
                    "math": (sdpa_kernel, SDPBackend.MATH)})
    except ImportError:
        pass
    return fns


def run_one(q, k, v, ctx):
    if ctx is None:
        return F.scaled_dot_product_attention(q, k, v)
    mgr, backend = ctx
    with mgr(backend):
        return F.scaled_dot_product_attention(q, k, v)


def measure(q, k, v, ctx, reps=30):
    for _ in range(5):
        run_one(q, k, v, ctx)
    torch.cuda.synchronize()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    gpu, wall = [], []
    for _ in range(reps):
        torch.cuda._sleep(2_000_000)  # ~1 ms of device cycles: the host enqueues meanwhile
        start.record()
        run_one(q, k, v, ctx)
        stop.record()
        torch.cuda.synchronize()
        gpu.append(start.elapsed_time(stop) * 1e3)
        t0 = time.perf_counter()
        run_one(q, k, v, ctx)
        torch.cuda.synchronize()
        wall.append((time.perf_counter() - t0) * 1e6)
    return statistics.median(gpu), statistics.median(wall)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    global torch, F
    try:
        import torch
        import torch.nn.functional as F
    except ImportError:
        sys.exit("sdpa_batching.py: needs PyTorch with CUDA: pip install torch "
                 "(see https://pytorch.org/get-started/locally/)")
    torch.manual_seed(0)
    dev = torch.device("cuda")
    props = torch.cuda.get_device_properties(dev)
    rows = []
    for t in (128, 4096):
        for b, h in CONFIGS:
            q = torch.randn(b, h, 1, D, device=dev, dtype=torch.float16)
            k = torch.randn(b, h, t, D, device=dev, dtype=torch.float16)
            v = torch.randn(b, h, t, D, device=dev, dtype=torch.float16)
            ref = F.scaled_dot_product_attention(q.double(), k.double(), v.double())
            for name, ctx in backend_fns().items():
                try:
                    out = run_one(q, k, v, ctx)
                    torch.cuda.synchronize()
                except RuntimeError as e:  # backend refuses this shape
                    rows.append({"T": t, "B": b, "H": h, "backend": name, "error": str(e)[:200]})
                    continue
                max_diff = (out.double() - ref).abs().max().item()
                gpu_us, wall_us = measure(q, k, v, ctx)
                rows.append({"T": t, "B": b, "H": h, "BxH": b * h, "backend": name,
                             "gpu_us": gpu_us, "wall_us": wall_us,
                             "per_query_gpu_us": gpu_us / (b * h),
                             "per_query_wall_us": wall_us / (b * h), "max_diff": max_diff})
                print(f"T={t:5d} B={b:2d} H={h} {name:9s} gpu {gpu_us:9.2f} us  wall "
                      f"{wall_us:9.2f} us  per-query {gpu_us / (b * h):8.3f} us  "
                      f"max_diff {max_diff:.2e}", flush=True)
    with open(args.out, "w") as f:
        json.dump({"device": props.name, "sms": props.multi_processor_count,
                   "torch": torch.__version__, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
