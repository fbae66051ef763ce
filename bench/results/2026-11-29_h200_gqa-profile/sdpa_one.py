#!/usr/bin/env python3
"""One SDPA call per shape inside a profiler range (for ncu --profile-from-start off): the
kernels cuDNN/flash run for a decode shape, their grids, stalls and DRAM throughput."""
import sys
import torch
import torch.nn.functional as F

SHAPES = {"gqa32_8": (32, 32, 8, 4096), "gqa32_4": (32, 32, 4, 4096),
          "mha_b32": (32, 32, 32, 4096), "b1_h32": (1, 32, 32, 4096)}
for name in sys.argv[1:]:
    b, h, hkv, t = SHAPES[name]
    q = torch.randn(b, h, 1, 128, device="cuda", dtype=torch.float16)
    k = torch.randn(b, hkv, t, 128, device="cuda", dtype=torch.float16)
    v = torch.randn(b, hkv, t, 128, device="cuda", dtype=torch.float16)
    for _ in range(3):
        F.scaled_dot_product_attention(q, k, v, enable_gqa=h != hkv)
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    F.scaled_dot_product_attention(q, k, v, enable_gqa=h != hkv)
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()
