// FP16 storage type for the public API without any CUDA header: IEEE binary16 bits, with exact
// host conversions (round-to-nearest-even) so host buffers match what the GPU's __half holds.
#pragma once

#include <cstdint>
#include <cstring>

namespace attnrt {

struct Half {
  std::uint16_t bits = 0;
};
static_assert(sizeof(Half) == 2, "Half must be 2 bytes to alias __half buffers");

inline float HalfToFloat(Half h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h.bits & 0x8000u) << 16;
  std::uint32_t exp = (h.bits >> 10) & 0x1fu;
  std::uint32_t mant = h.bits & 0x3ffu;
  std::uint32_t f;
  if (exp == 0) {
    if (mant == 0) {
      f = sign;
    } else {  // subnormal: normalise
      exp = 127 - 15 + 1;
      while ((mant & 0x400u) == 0) {
        mant <<= 1;
        --exp;
      }
      mant &= 0x3ffu;
      f = sign | (exp << 23) | (mant << 13);
    }
  } else if (exp == 0x1f) {
    f = sign | 0x7f800000u | (mant << 13);
  } else {
    f = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float out;
  std::memcpy(&out, &f, sizeof(out));
  return out;
}

inline Half FloatToHalf(float value) {
  std::uint32_t f;
  std::memcpy(&f, &value, sizeof(f));
  const std::uint16_t sign = static_cast<std::uint16_t>((f >> 16) & 0x8000u);
  const std::uint32_t abs = f & 0x7fffffffu;
  if (abs >= 0x7f800000u) {  // inf or nan
    return Half{static_cast<std::uint16_t>(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0u))};
  }
  if (abs >= 0x477ff000u) return Half{static_cast<std::uint16_t>(sign | 0x7c00u)};  // overflow
  if (abs < 0x38800000u) {  // subnormal or zero in half
    if (abs < 0x33000000u) return Half{sign};  // rounds to zero
    const std::uint32_t exp = abs >> 23;
    const std::uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
    const std::uint32_t shift = 126 - exp;  // 113 - exp + 13
    std::uint32_t h = mant >> shift;
    const std::uint32_t rem = mant & ((1u << shift) - 1);
    const std::uint32_t halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (h & 1u))) ++h;
    return Half{static_cast<std::uint16_t>(sign | h)};
  }
  std::uint32_t h = ((abs - 0x38000000u) >> 13);
  const std::uint32_t rem = abs & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
  return Half{static_cast<std::uint16_t>(sign | h)};
}

}  // namespace attnrt
