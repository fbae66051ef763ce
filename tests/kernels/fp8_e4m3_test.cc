// The FP8 E4M3 codec (kernels/fp8_e4m3.h), exhaustively on the host: every code's value from
// the format's definition, every value's round trip, ties to even between every pair of
// neighbours, saturation, NaN, and signed zero.
#include "kernels/fp8_e4m3.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace attnrt::kernels {
namespace {

bool IsNaNCode(int c) { return (c & 0x7f) == 0x7f; }

// The value of code c from the format's definition, computed independently of DecodeE4M3.
double Definition(int c) {
  const double sign = (c & 0x80) ? -1.0 : 1.0;
  const int exp = (c >> 3) & 0xf, mant = c & 7;
  if (exp == 0) return sign * std::ldexp(mant / 8.0, -6);
  return sign * std::ldexp(1.0 + mant / 8.0, exp - 7);
}

TEST(Fp8E4M3Test, EveryCodeDecodesToItsDefinedValue) {
  for (int c = 0; c < 256; ++c) {
    const float v = DecodeE4M3(static_cast<std::uint8_t>(c));
    if (IsNaNCode(c)) {
      EXPECT_TRUE(std::isnan(v)) << "code " << c;
      continue;
    }
    EXPECT_EQ(static_cast<double>(v), Definition(c)) << "code " << c;
  }
  EXPECT_EQ(DecodeE4M3(0x7e), 448.0f);
  EXPECT_EQ(DecodeE4M3(0xfe), -448.0f);
  EXPECT_EQ(DecodeE4M3(0x01), std::ldexp(1.0f, -9));  // smallest subnormal
  EXPECT_EQ(DecodeE4M3(0x08), std::ldexp(1.0f, -6));  // smallest normal
  EXPECT_TRUE(std::signbit(DecodeE4M3(0x80)));        // -0
}

TEST(Fp8E4M3Test, EveryValueRoundTrips) {
  for (int c = 0; c < 256; ++c) {
    if (IsNaNCode(c)) continue;
    EXPECT_EQ(EncodeE4M3(DecodeE4M3(static_cast<std::uint8_t>(c))), c) << "code " << c;
  }
}

// Between neighbouring codes a < b (same sign): just below the midpoint rounds to a, just
// above to b, the midpoint itself to the one with the even mantissa.
TEST(Fp8E4M3Test, RoundsToNearestTiesToEven) {
  for (int sign : {0x00, 0x80}) {
    for (int c = 0; c < 0x7e; ++c) {  // c and c + 1 are neighbours, both finite
      const std::uint8_t a = static_cast<std::uint8_t>(sign | c);
      const std::uint8_t b = static_cast<std::uint8_t>(sign | (c + 1));
      const double lo = Definition(a), hi = Definition(b);
      const float mid = static_cast<float>((lo + hi) / 2);  // exact: few mantissa bits
      ASSERT_EQ(static_cast<double>(mid), (lo + hi) / 2);
      const std::uint8_t even = (c & 1) == 0 ? a : b;
      EXPECT_EQ(EncodeE4M3(mid), even) << "midpoint of codes " << int(a) << ", " << int(b);
      const float below = std::nextafter(mid, static_cast<float>(lo));
      const float above = std::nextafter(mid, static_cast<float>(hi));
      EXPECT_EQ(EncodeE4M3(below), a) << "just past the midpoint toward " << int(a);
      EXPECT_EQ(EncodeE4M3(above), b) << "just past the midpoint toward " << int(b);
    }
  }
}

TEST(Fp8E4M3Test, SaturatesNaNStaysNaNAndTinyValuesGoToZero) {
  const float inf = std::numeric_limits<float>::infinity();
  for (float big : {448.0f, 449.0f, 464.0f, 480.0f, 1e6f, 3e38f, inf}) {
    EXPECT_EQ(EncodeE4M3(big), 0x7e) << big;
    EXPECT_EQ(EncodeE4M3(-big), 0xfe) << -big;
  }
  EXPECT_TRUE(IsNaNCode(EncodeE4M3(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_TRUE(IsNaNCode(EncodeE4M3(-std::numeric_limits<float>::quiet_NaN())));
  EXPECT_EQ(EncodeE4M3(0.0f), 0x00);
  EXPECT_EQ(EncodeE4M3(-0.0f), 0x80);
  EXPECT_EQ(EncodeE4M3(std::ldexp(1.0f, -10)), 0x00);          // half the smallest step: even
  EXPECT_EQ(EncodeE4M3(std::nextafter(std::ldexp(1.0f, -10), 1.0f)), 0x01);
  EXPECT_EQ(EncodeE4M3(std::ldexp(1.0f, -20)), 0x00);
  EXPECT_EQ(EncodeE4M3(std::numeric_limits<float>::denorm_min()), 0x00);
  EXPECT_EQ(EncodeE4M3(-std::ldexp(1.0f, -30)), 0x80);
}

// Encode is the nearest code for a dense sweep of floats (every float whose bits are a multiple
// of 2^12, up to 448): checked against a brute-force nearest search.
TEST(Fp8E4M3Test, EncodeIsTheNearestCodeOverASweep) {
  std::vector<double> values;
  std::vector<int> codes;
  for (int c = 0; c < 0x7f; ++c) {  // non-negative finite codes, ascending
    values.push_back(Definition(c));
    codes.push_back(c);
  }
  int checked = 0;
  for (std::uint64_t bits = 0; bits < 0x7f800000u; bits += 0x1000u) {
    float x;
    const std::uint32_t b = static_cast<std::uint32_t>(bits);
    std::memcpy(&x, &b, sizeof(x));
    if (x > 448.0f) break;
    // Nearest by search; ties to the even code.
    int best = 0;
    double best_d = std::fabs(values[0] - x);
    for (std::size_t i = 1; i < values.size(); ++i) {
      const double d = std::fabs(values[i] - x);
      if (d < best_d || (d == best_d && (codes[i] & 1) == 0)) {
        best = static_cast<int>(i);
        best_d = d;
      }
    }
    ASSERT_EQ(EncodeE4M3(x), codes[best]) << "x = " << x;
    ASSERT_EQ(EncodeE4M3(-x), 0x80 | codes[best]) << "x = " << -x;
    ++checked;
  }
  EXPECT_GT(checked, 200000);
}

}  // namespace
}  // namespace attnrt::kernels
