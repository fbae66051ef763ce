// kernels::ShuffledIds (read_ceiling.h): the order the paged read probe reads its chunks in and
// the benchmarks' batches place their blocks in.
#include "kernels/read_ceiling.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

namespace attnrt::kernels {
namespace {

TEST(ShuffledIdsTest, IsAFixedPermutationThatMovesIds) {
  const std::vector<std::int32_t> a = ShuffledIds(1000, 7);
  ASSERT_EQ(a.size(), 1000u);
  std::vector<std::int32_t> sorted = a;
  std::sort(sorted.begin(), sorted.end());
  for (std::int32_t i = 0; i < 1000; ++i) ASSERT_EQ(sorted[i], i) << "not a permutation";
  EXPECT_EQ(ShuffledIds(1000, 7), a) << "the same seed gives the same order";
  EXPECT_NE(ShuffledIds(1000, 8), a) << "another seed gives another order";
  int in_place = 0;
  for (std::int32_t i = 0; i < 1000; ++i) in_place += a[static_cast<std::size_t>(i)] == i;
  EXPECT_LT(in_place, 50) << "a shuffle leaves few ids where they were";
}

TEST(ShuffledIdsTest, EmptyAndSingle) {
  EXPECT_TRUE(ShuffledIds(0, 1).empty());
  EXPECT_TRUE(ShuffledIds(-3, 1).empty());
  EXPECT_EQ(ShuffledIds(1, 1), std::vector<std::int32_t>{0});
}

}  // namespace
}  // namespace attnrt::kernels
