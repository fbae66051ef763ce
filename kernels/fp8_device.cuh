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

// 16 FP16 values (two 16-byte vectors) to 16 E4M3 codes under `scale` (the cache's rule: the
// host's codec, saturating, round to nearest even).
__device__ __forceinline__ uint4 QuantizeHalf16(const uint4& lo, const uint4& hi, float scale) {
  const __half* a = reinterpret_cast<const __half*>(&lo);
  const __half* b = reinterpret_cast<const __half*>(&hi);
  std::uint32_t w[4] = {0u, 0u, 0u, 0u};
#pragma unroll
  for (int e = 0; e < 16; ++e) {
    const float x = __half2float(e < 8 ? a[e] : b[e - 8]);
    w[e / 4] |= static_cast<std::uint32_t>(QuantizeE4M3(x, scale)) << (8 * (e % 4));
  }
  return make_uint4(w[0], w[1], w[2], w[3]);
}

}  // namespace attnrt::kernels
