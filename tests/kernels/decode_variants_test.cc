// The variant table and the split-KV plan, on the host (no GPU needed).
#include <gtest/gtest.h>

#include <string>

#include "kernels/decode.h"
#include "kernels/decode_internal.h"

namespace attnrt::kernels {
namespace {

TEST(DecodeVariantsTest, TableListsSimpleFirstAndDefaultsToSplitKv) {
  ASSERT_GE(DecodeVariants().size(), 2u);
  EXPECT_EQ(DecodeVariants().front().name, "simple");
  EXPECT_EQ(DefaultDecodeVariant().name, "split_kv");
  EXPECT_EQ(&DefaultDecodeVariant(), &DecodeVariants().back());
  for (const DecodeVariant& v : DecodeVariants()) {
    auto found = FindDecodeVariant(v.name);
    ASSERT_TRUE(found.ok());
    EXPECT_EQ(*found, &v);
  }
}

TEST(DecodeVariantsTest, UnknownNameIsNotFoundAndListsNames) {
  auto found = FindDecodeVariant("fastest");
  ASSERT_FALSE(found.ok());
  EXPECT_EQ(found.status().code(), StatusCode::kNotFound);
  EXPECT_NE(found.status().message().find("'fastest'"), std::string::npos);
  EXPECT_NE(found.status().message().find("simple, split_kv_simt, split_kv"), std::string::npos);
}

TEST(DecodeVariantsTest, SupportsEveryIssueComboAndNamesTheOthers) {
  for (const DecodeVariant& v : DecodeVariants()) {
    for (int d : {64, 128, 256}) {
      for (int bs : {8, 16, 32, 64}) {
        for (int g : {1, 2, 4, 8}) {
          ModelShape s;
          s.num_kv_heads = 4;
          s.num_q_heads = 4 * g;
          s.head_dim = d;
          s.block_size = bs;
          EXPECT_TRUE(v.supports(s).ok()) << v.name << " D" << d << " bs" << bs << " G" << g;
        }
      }
    }
    ModelShape g16;
    g16.num_kv_heads = 2;
    g16.num_q_heads = 32;
    const Status s = v.supports(g16);
    EXPECT_EQ(s.code(), StatusCode::kUnimplemented);
    EXPECT_NE(s.message().find("32/2"), std::string::npos) << s.ToString();
    ModelShape bad_ratio;
    bad_ratio.num_kv_heads = 3;
    bad_ratio.num_q_heads = 4;
    EXPECT_NE(v.supports(bad_ratio).code(), StatusCode::kOk);
  }
}

// Every token of a slot lands in exactly one split; each split but the last is full; short
// contexts are never split; no slot asks for more splits than the grid has.
TEST(SplitKvPlanTest, SplitsCoverEveryTokenOnce) {
  for (int max_splits : {1, 2, 7, 16, 64}) {
    for (int min_tiles : {1, 4, 8, 16}) {
      SplitKvPlan plan{max_splits, 32, min_tiles};
      for (int len = 1; len <= 20000; len += (len < 600 ? 1 : 97)) {
        const SlotSplit s = SplitSlot(len, plan);
        const int tiles = (len + 31) / 32;
        ASSERT_GE(s.num_splits, 1);
        ASSERT_LE(s.num_splits, max_splits);
        ASSERT_GE(s.num_splits * s.tiles_per_split, tiles) << "tokens left over, len " << len;
        ASSERT_LT((s.num_splits - 1) * s.tiles_per_split, tiles) << "an empty split, len " << len;
        if (tiles < 2 * min_tiles) {
          ASSERT_EQ(s.num_splits, 1) << "len " << len;
        }
        if (s.num_splits > 1) {
          ASSERT_GE(s.tiles_per_split, min_tiles);
        }
      }
    }
  }
}

TEST(SplitKvPlanTest, WorkspaceCoversEveryPartial) {
  const DecodeVariant& v = DefaultDecodeVariant();
  ModelShape s;
  s.num_q_heads = 32;
  s.num_kv_heads = 32;
  s.max_context = 65536;
  const SplitKvPlan plan = MakeSplitKvPlan(s, 1);
  EXPECT_GT(plan.max_splits, 1);
  EXPECT_GE(v.workspace_bytes(s, 1),
            static_cast<std::size_t>(plan.max_splits) * 32 * (128 + 1) * sizeof(float));
  s.max_context = 128;  // too short to ever split: no workspace
  EXPECT_EQ(v.workspace_bytes(s, 1), 0u);
}

}  // namespace
}  // namespace attnrt::kernels
