// check_finite's primitives (api/internal/finite.h): the scan, and the copy that checks in the
// same pass (Submit's staging).
#include "api/internal/finite.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <cstring>
#include <vector>

#include <attnrt/half.h>

namespace attnrt {
namespace {

std::vector<Half> Ramp(std::size_t n) {
  std::vector<Half> x(n);
  for (std::size_t i = 0; i < n; ++i) x[i] = FloatToHalf(static_cast<float>(i % 2000) - 1000.0f);
  return x;
}

// Every length from 1000 to 1040 (whole vectors and tails), destinations aligned and not,
// streaming or not: the copy holds src exactly, and no value is reported while every value is
// finite.
TEST(CopyCheckingFiniteTest, CopiesEveryLengthAndAlignmentExactly) {
  for (std::size_t n = 0; n <= 40; ++n) {
    const std::vector<Half> src = Ramp(n + 1000);
    for (std::size_t dst_offset : {0, 1, 8}) {  // halves: 0 and 8 are 16-byte aligned below
      alignas(64) Half dst[1100 + 8];
      const std::span<const Half> s(src.data(), n + 1000);
      for (bool streaming : {true, false}) {
        for (bool check : {true, false}) {
          std::fill(std::begin(dst), std::end(dst), Half{0xffff});
          EXPECT_EQ(CopyCheckingFinite(dst + dst_offset, s, check, streaming), -1)
              << n << " " << dst_offset;
          StreamingCopiesDone();
          EXPECT_EQ(std::memcmp(dst + dst_offset, src.data(), s.size() * sizeof(Half)), 0)
              << n << " " << dst_offset << " streaming " << streaming;
          EXPECT_EQ(dst[dst_offset + s.size()].bits, 0xffff) << "wrote past the end";
        }
      }
    }
  }
}

// The first Inf or NaN's index, wherever it falls (the vector part, the tail; two bad values:
// the first), for aligned and unaligned destinations; nothing reported with check off.
TEST(CopyCheckingFiniteTest, ReportsTheFirstNonFiniteWhereverItIs) {
  constexpr std::size_t kN = 4096 + 5;
  const Half kBad[] = {Half{0x7c00}, Half{0xfc00}, Half{0x7e00}, Half{0xfe01}};
  for (std::size_t at : {std::size_t{0}, std::size_t{7}, std::size_t{8}, std::size_t{4095},
                         std::size_t{4096}, kN - 1}) {
    for (const Half bad : kBad) {
      std::vector<Half> src = Ramp(kN);
      src[at] = bad;
      if (at + 3 < kN) src[at + 3] = Half{0x7c00};  // a later one does not hide the first
      alignas(64) static Half dst[kN + 1];
      for (std::size_t dst_offset : {0, 1}) {
        for (bool streaming : {true, false}) {
          const std::span<const Half> s(src);
          EXPECT_EQ(CopyCheckingFinite(dst + dst_offset, s, true, streaming),
                    static_cast<std::ptrdiff_t>(at))
              << "at " << at << " bits " << bad.bits << " offset " << dst_offset;
          EXPECT_EQ(CopyCheckingFinite(dst + dst_offset, s, false, streaming), -1);
          StreamingCopiesDone();
        }
        EXPECT_EQ(FirstNonFinite(src), static_cast<std::ptrdiff_t>(at));
      }
    }
  }
}

// The largest finite halves (65504, -65504) and subnormals are finite.
TEST(CopyCheckingFiniteTest, ExtremeFiniteValuesPass) {
  const std::vector<Half> src = {Half{0x7bff}, Half{0xfbff}, Half{0x0001}, Half{0x8001},
                                 Half{0x0000}, Half{0x8000}, Half{0x7bff}, Half{0x03ff},
                                 Half{0x7bff}};
  for (bool streaming : {true, false}) {
    alignas(16) Half dst[16];
    EXPECT_EQ(CopyCheckingFinite(dst, src, true, streaming), -1);
    StreamingCopiesDone();
    EXPECT_EQ(std::memcmp(dst, src.data(), src.size() * sizeof(Half)), 0);
  }
  EXPECT_EQ(FirstNonFinite(src), -1);
}

// The scan alone over every length to 100 (the vector blocks of SSE2 and AVX2, AVX2's 16-half
// steps, the scalar tails): a bad value found at every position, in every lane, by each width;
// the extreme finite values never reported.
TEST(FirstNonFiniteTest, FindsEveryPositionOfEveryLength) {
  const Half kFinite[] = {Half{0x7bff}, Half{0xfbff}, Half{0x03ff}, Half{0x8001}, Half{0x0000}};
  const Half kBad[] = {Half{0x7c00}, Half{0xfc00}, Half{0x7e00}, Half{0xffff}};
  for (std::size_t n = 0; n <= 100; ++n) {
    std::vector<Half> x(n);
    for (std::size_t i = 0; i < n; ++i) x[i] = kFinite[i % std::size(kFinite)];
    EXPECT_EQ(FirstNonFinite(x), -1) << "n " << n;
    EXPECT_FALSE(finite_internal::AnyNonFiniteSse2(x.data(), n)) << "n " << n;
#if defined(ATTNRT_FINITE_AVX2)
    if (finite_internal::HasAvx2()) {
      EXPECT_FALSE(finite_internal::AnyNonFiniteAvx2(x.data(), n)) << "n " << n;
    }
#endif
    for (std::size_t at = 0; at < n; ++at) {
      for (const Half bad : kBad) {
        std::vector<Half> y = x;
        y[at] = bad;
        if (at + 1 < n) y[n - 1] = Half{0x7c00};  // a later one does not hide the first
        EXPECT_EQ(FirstNonFinite(y), static_cast<std::ptrdiff_t>(at))
            << "n " << n << " at " << at << " bits " << bad.bits;
        // Each vector width on its own (the dispatch above takes one of them).
        EXPECT_TRUE(finite_internal::AnyNonFiniteSse2(y.data(), n)) << "n " << n << " at " << at;
#if defined(ATTNRT_FINITE_AVX2)
        if (finite_internal::HasAvx2()) {
          EXPECT_TRUE(finite_internal::AnyNonFiniteAvx2(y.data(), n)) << "n " << n << " at " << at;
        }
#endif
      }
    }
  }
}

}  // namespace
}  // namespace attnrt
