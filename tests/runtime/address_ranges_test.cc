// AddressRanges: membership is [base, base + bytes), ranges come and go independently.
#include "runtime/address_ranges.h"

#include <gtest/gtest.h>

namespace attnrt::runtime {
namespace {

TEST(AddressRangesTest, ContainsExactlyTheHalfOpenRanges) {
  char buf[160];
  AddressRanges r;
  EXPECT_FALSE(r.Contains(buf));
  r.Add(buf, 64);        // [0, 64)
  r.Add(buf + 96, 32);   // [96, 128)
  EXPECT_EQ(r.size(), 2u);
  EXPECT_TRUE(r.Contains(buf));
  EXPECT_TRUE(r.Contains(buf + 63));
  EXPECT_FALSE(r.Contains(buf + 64)) << "one past the end is outside";
  EXPECT_FALSE(r.Contains(buf + 95)) << "the gap between ranges";
  EXPECT_TRUE(r.Contains(buf + 96));
  EXPECT_TRUE(r.Contains(buf + 127));
  EXPECT_FALSE(r.Contains(buf + 128));
  r.Remove(buf);
  EXPECT_FALSE(r.Contains(buf + 10));
  EXPECT_TRUE(r.Contains(buf + 100));
  EXPECT_EQ(r.size(), 1u);
  r.Clear();
  EXPECT_FALSE(r.Contains(buf + 100));
  EXPECT_EQ(r.size(), 0u);
}

// ContainsAll: every non-null pointer in some range, whether they share one or not.
TEST(AddressRangesTest, ContainsAllNeedsEveryNonNullPointerInARange) {
  char buf[160];
  AddressRanges r;
  r.Add(buf, 64);       // [0, 64)
  r.Add(buf + 96, 32);  // [96, 128)
  EXPECT_TRUE(r.ContainsAll({buf, buf + 10, buf + 63}));
  EXPECT_TRUE(r.ContainsAll({buf, nullptr, buf + 20}));
  EXPECT_TRUE(r.ContainsAll({buf + 100, buf + 5, buf + 127}));  // across both ranges
  EXPECT_FALSE(r.ContainsAll({buf, buf + 64}));                 // one past the first range
  EXPECT_FALSE(r.ContainsAll({buf + 80, buf}));                 // the gap first
  EXPECT_FALSE(r.ContainsAll({buf + 96, buf + 128}));
  EXPECT_FALSE(r.ContainsAll({nullptr, nullptr})) << "nothing to contain";
  EXPECT_FALSE(r.ContainsAll({}));
}

}  // namespace
}  // namespace attnrt::runtime
