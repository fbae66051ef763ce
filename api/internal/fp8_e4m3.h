// FP8 E4M3 (the OCP "E4M3FN" format of CUDA's __nv_fp8_e4m3): 1 sign bit, 4 exponent bits
// (bias 7), 3 mantissa bits; no infinities; S.1111.111 is NaN; the largest finite value is 448
// (S.1111.110); subnormals are m * 2^-9 for m = 1..7. The codec of the FP8 KV cache (issue 13):
// one codec and one scaling rule, the same in kvcache/ (prefill writes), on the host (CPU
// executor, reference; kernels/fp8_e4m3.h re-exports it) and in kernels, with no CUDA header.
// Internal: not a public header (the rule is documented at attnrt::KvCacheType).
//
// Encode is saturating (as __NV_SATFINITE): finite values beyond +-448 and infinities become
// +-448, NaN stays NaN; rounding is to nearest, ties to even. Decode is exact (every E4M3 value
// is a float). tests/kernels/fp8_e4m3_test.cc checks both exhaustively, and
// tests/kernels/fp8_e4m3_gpu_test.cu against the GPU's own conversion for every FP16 input.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define ATTNRT_HOST_DEVICE __host__ __device__
#else
#define ATTNRT_HOST_DEVICE
#endif

namespace attnrt {

inline constexpr float kE4M3Max = 448.0f;
inline constexpr std::uint8_t kE4M3NaN = 0x7f;

ATTNRT_HOST_DEVICE inline std::uint32_t Fp8FloatBits(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  std::uint32_t b;
  std::memcpy(&b, &x, sizeof(b));
  return b;
#endif
}

ATTNRT_HOST_DEVICE inline float Fp8BitsFloat(std::uint32_t b) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(b);
#else
  float x;
  std::memcpy(&x, &b, sizeof(x));
  return x;
#endif
}

// The E4M3 code nearest to x (ties to even), saturated to +-448; NaN for NaN.
ATTNRT_HOST_DEVICE inline std::uint8_t EncodeE4M3(float x) {
  const std::uint32_t bits = Fp8FloatBits(x);
  const std::uint8_t sign = static_cast<std::uint8_t>((bits >> 24) & 0x80u);
  const std::uint32_t abs = bits & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<std::uint8_t>(sign | kE4M3NaN);  // NaN
  if (abs >= 0x43e00000u) return static_cast<std::uint8_t>(sign | 0x7eu);    // >= 448, inf
  const int exp = static_cast<int>(abs >> 23) - 127;
  if (exp >= -6) {  // normal in E4M3 (before rounding)
    std::uint32_t keep = (abs >> 20) & 0x7u;
    const std::uint32_t rem = abs & 0xfffffu;
    int e = exp;
    if (rem > 0x80000u || (rem == 0x80000u && (keep & 1u))) {
      if (++keep == 8) {
        keep = 0;
        ++e;
      }
    }
    if (e > 8 || (e == 8 && keep == 7)) return static_cast<std::uint8_t>(sign | 0x7eu);
    return static_cast<std::uint8_t>(sign | ((e + 7) << 3) | keep);
  }
  // Subnormal: m * 2^-9, m = round-half-even(|x| * 2^9) in 0..8 (8 is the smallest normal,
  // whose code is 0x08, so the formula holds). |x| < 2^-6 here, so the product is exact.
  if (exp < -11) return sign;  // below 2^-11: less than a quarter of the smallest step
  const std::uint32_t mant = (abs & 0x7fffffu) | 0x800000u;  // 1.m * 2^exp, 24 bits
  const int shift = -exp + 14;  // value * 2^9 = mant * 2^(exp + 9 - 23)
  std::uint32_t m = mant >> shift;
  const std::uint32_t rem = mant & ((1u << shift) - 1u);
  const std::uint32_t halfway = 1u << (shift - 1);
  if (rem > halfway || (rem == halfway && (m & 1u))) ++m;
  return static_cast<std::uint8_t>(sign | m);
}

// The value of an E4M3 code (NaN for the NaN codes).
ATTNRT_HOST_DEVICE inline float DecodeE4M3(std::uint8_t code) {
  const std::uint32_t sign = static_cast<std::uint32_t>(code & 0x80u) << 24;
  const std::uint32_t exp = (code >> 3) & 0xfu;
  const std::uint32_t mant = code & 0x7u;
  if (exp == 0xf && mant == 0x7) return Fp8BitsFloat(sign | 0x7fc00000u);
  if (exp == 0) {  // m * 2^-9: exact in float
    const float v = static_cast<float>(mant) * (1.0f / 512.0f);
    return Fp8BitsFloat(sign | Fp8FloatBits(v));
  }
  return Fp8BitsFloat(sign | ((exp - 7 + 127) << 23) | (mant << 20));
}

// The KV cache's scaling rule (attnrt::KvCacheType): stored code = E4M3(x / scale), FP32
// division (IEEE, as CUDA's default '/'), read value = code * scale. `scale` is finite and > 0
// (ModelShape::Validate).
ATTNRT_HOST_DEVICE inline std::uint8_t QuantizeE4M3(float x, float scale) {
  return EncodeE4M3(x / scale);
}
ATTNRT_HOST_DEVICE inline float DequantizeE4M3(std::uint8_t code, float scale) {
  return DecodeE4M3(code) * scale;
}

}  // namespace attnrt
