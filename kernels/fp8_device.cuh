// Device helpers for reading and writing an FP8 E4M3 KV cache, shared by the decode variants and
// the append kernel: hardware conversion of code pairs to FP16 (exact: every E4M3 value is an
// FP16 value) and quantization with the host's codec (api/internal/fp8_e4m3.h), so device and
// host store the same bytes. Internal to kernels/ (CUDA translation units only).
#pragma once

#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "kernels/fp8_e4m3.h"

namespace attnrt::kernels {

// Two E4M3 codes (byte 0 -> low half) to an FP16x2 register.
__device__ __forceinline__ std::uint32_t E4M3x2ToHalf2(std::uint32_t two_codes) {
  const __half2_raw h =
      __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(two_codes & 0xffffu), __NV_E4M3);
  return static_cast<std::uint32_t>(h.x) | (static_cast<std::uint32_t>(h.y) << 16);
}

// Four E4M3 codes (one 32-bit word, element e in byte e) to FP16x2 registers: elements 0-1 in
// `lo`, 2-3 in `hi`.
__device__ __forceinline__ void E4M3x4ToHalf(std::uint32_t codes, std::uint32_t& lo,
                                             std::uint32_t& hi) {
  // Two conversions straight from the word's halves (no shift or mask in between).
  asm("{\n"
      "  .reg .b16 l, h;\n"
      "  mov.b32 {l, h}, %2;\n"
      "  cvt.rn.f16x2.e4m3x2 %0, l;\n"
      "  cvt.rn.f16x2.e4m3x2 %1, h;\n"
      "}\n"
      : "=r"(lo), "=r"(hi)
      : "r"(codes));
}

// 8 E4M3 codes (one 8-byte vector, element e in byte e) to 8 FP16 values (one 16-byte vector,
// element e in half e): the layout of an FP16 row chunk, so FP16 code can take it as it is.
__device__ __forceinline__ uint4 E4M3x8ToHalf(const uint2& codes) {
  uint4 h;
  E4M3x4ToHalf(codes.x, h.x, h.y);
  E4M3x4ToHalf(codes.y, h.z, h.w);
  return h;
}

// 16 E4M3 codes (one 16-byte vector) to 16 FP16 values: elements 0-7 in `lo`, 8-15 in `hi`.
__device__ __forceinline__ void E4M3x16ToHalf(const uint4& codes, uint4& lo, uint4& hi) {
  E4M3x4ToHalf(codes.x, lo.x, lo.y);
  E4M3x4ToHalf(codes.y, lo.z, lo.w);
  E4M3x4ToHalf(codes.z, hi.x, hi.y);
  E4M3x4ToHalf(codes.w, hi.z, hi.w);
}

// Two floats to two E4M3 codes, `lo`'s in byte 0: the codec's EncodeE4M3 by the hardware's
// saturating round-to-nearest-even conversion (the two agree on every input but NaN's sign,
// tests/kernels/fp8_e4m3_gpu_test.cu). ~10 instructions where the codec's branches take ~40 a
// value.
__device__ __forceinline__ std::uint32_t EncodeE4M3x2(float lo, float hi) {
  std::uint16_t pair;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;\n" : "=h"(pair) : "f"(hi), "f"(lo));
  return pair;
}

// 8 FP16 values (one 16-byte vector) to 8 E4M3 codes under `scale` (the cache's rule,
// QuantizeE4M3: x / scale in IEEE FP32, then the codec), element e in byte e: the host's bytes,
// a NaN's sign included (the GPU's conversions return the canonical NaN; the host keeps the
// input's sign, so it is taken from the FP16 bits; a finite x over a finite scale > 0 is never
// NaN).
__device__ __forceinline__ uint2 QuantizeHalf8(const uint4& halves, float scale) {
  const __half2* h = reinterpret_cast<const __half2*>(&halves);
  const std::uint32_t* bits = reinterpret_cast<const std::uint32_t*>(&halves);
  std::uint32_t w[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const float2 a = __half22float2(h[2 * i]);
    const float2 b = __half22float2(h[2 * i + 1]);
    w[i] = EncodeE4M3x2(__fdiv_rn(a.x, scale), __fdiv_rn(a.y, scale)) |
           (EncodeE4M3x2(__fdiv_rn(b.x, scale), __fdiv_rn(b.y, scale)) << 16);
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const std::uint32_t half = (bits[2 * i + e / 2] >> (16 * (e % 2))) & 0xffffu;
      if ((half & 0x7fffu) > 0x7c00u) {  // NaN
        const std::uint32_t code = kE4M3NaN | ((half >> 8) & 0x80u);
        w[i] = (w[i] & ~(0xffu << (8 * e))) | (code << (8 * e));
      }
    }
  }
  return make_uint2(w[0], w[1]);
}

// 16 FP16 values (two 16-byte vectors) to 16 E4M3 codes under `scale`.
__device__ __forceinline__ uint4 QuantizeHalf16(const uint4& lo, const uint4& hi, float scale) {
  const uint2 a = QuantizeHalf8(lo, scale), b = QuantizeHalf8(hi, scale);
  return make_uint4(a.x, a.y, b.x, b.y);
}

}  // namespace attnrt::kernels
