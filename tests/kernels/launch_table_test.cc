// The tuned launch table (kernels/tc_launch_table.inc) and its lookup, on the host: every row is a
// configuration the kernels support, rows are ordered, and dispatch picks the right row.
#include <gtest/gtest.h>

#include <string>
#include <tuple>

#include "kernels/decode_internal.h"

namespace attnrt::kernels {
namespace {

ModelShape Shape(int q_heads, int kv_heads, int head_dim) {
  ModelShape s;
  s.num_q_heads = q_heads;
  s.num_kv_heads = kv_heads;
  s.head_dim = head_dim;
  s.max_context = 32768;
  return s;
}

TEST(LaunchTableTest, RowsAreSupportedAndOrdered) {
  const auto rows = TunedLaunchTable();
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const TunedLaunchRow& r = rows[i];
    SCOPED_TRACE("row " + std::to_string(i));
    EXPECT_TRUE(CheckLaunchConfig(SplitKvFamily::kTensorCore, r.config, r.head_dim).ok())
        << CheckLaunchConfig(SplitKvFamily::kTensorCore, r.config, r.head_dim).ToString();
    EXPECT_TRUE(r.group == 1 || r.group == 2 || r.group == 4 || r.group == 8) << r.group;
    EXPECT_GE(r.min_work, 1);
    if (i > 0) {
      const TunedLaunchRow& p = rows[i - 1];
      EXPECT_LT(std::tie(p.head_dim, p.group, p.min_work), std::tie(r.head_dim, r.group, r.min_work))
          << "rows must be sorted by (head_dim, group, min_work) without duplicates";
    }
  }
}

TEST(LaunchTableTest, LookupPicksTheLastRowAtOrBelowTheWork) {
  const auto rows = TunedLaunchTable();
  for (const TunedLaunchRow& r : rows) {
    // kv heads 1: work items = capacity.
    const ModelShape s = Shape(r.group, 1, r.head_dim);
    const SplitKvLaunchConfig at = TunedLaunchConfig(SplitKvFamily::kTensorCore, s, r.min_work);
    EXPECT_TRUE(at == r.config) << "D" << r.head_dim << " G" << r.group << " work "
                                          << r.min_work << ": got " << ToString(at);
  }
  // A (head dim, group) no row names (D 256, G 8) gets the default configuration, as does the
  // SIMT family.
  const SplitKvLaunchConfig def;
  EXPECT_TRUE(TunedLaunchConfig(SplitKvFamily::kTensorCore, Shape(16, 2, 256), 4) == def);
  EXPECT_TRUE(TunedLaunchConfig(SplitKvFamily::kSimt, Shape(32, 32, 128), 32) == def);
  // An invalid shape does not crash the lookup (the launch reports it).
  EXPECT_TRUE(TunedLaunchConfig(SplitKvFamily::kTensorCore, Shape(8, 0, 128), 4) == def);
}

TEST(LaunchTableTest, BadConfigurationsNameTheField) {
  struct Bad {
    SplitKvLaunchConfig config;
    int head_dim;
    const char* field;
  };
  for (const Bad& b : {Bad{{3, 0, 256}, 128, "config.warps = 3"},
                       Bad{{8, 0, 256}, 256, "config.warps = 8"},
                       Bad{{4, -1, 256}, 128, "config.ctas_per_sm = -1"},
                       Bad{{4, 65, 256}, 128, "config.ctas_per_sm = 65"},
                       Bad{{4, 0, 0}, 128, "config.min_split_tokens = 0"}}) {
    const Status s = CheckLaunchConfig(SplitKvFamily::kTensorCore, b.config, b.head_dim);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << ToString(b.config);
    EXPECT_NE(s.message().find(b.field), std::string::npos) << s.ToString();
  }
  for (int d : {64, 128, 256}) {
    for (int warps : {2, 4}) {
      EXPECT_TRUE(CheckLaunchConfig(SplitKvFamily::kTensorCore, {warps, 0, 256}, d).ok());
    }
  }
  EXPECT_TRUE(CheckLaunchConfig(SplitKvFamily::kTensorCore, {8, 4, 128}, 128).ok());
}

// The plan follows the configuration: the CTA tile is 16 tokens per warp, pieces are at least
// min_split_tokens long, and a target of ctas_per_sm stops splitting once the work items fill it.
TEST(LaunchTableTest, PlanFollowsTheConfiguration) {
  const ModelShape s = Shape(32, 8, 128);
  for (int warps : {2, 4, 8}) {
    for (int min_split : {128, 512}) {
      const SplitKvPlan plan =
          MakeSplitKvPlan(s, 1, SplitKvFamily::kTensorCore, {warps, 8, min_split});
      EXPECT_EQ(plan.tile_tokens, 16 * warps);
      EXPECT_EQ(plan.min_tiles, std::max(1, min_split / (16 * warps)));
      EXPECT_GT(plan.max_splits, 1) << "8 work items, 8 CTAs per SM wanted: must split";
      EXPECT_LE(plan.max_splits, 64);
      // A split never gets fewer than min_split tokens (except where the context is shorter).
      const SlotSplit ss = SplitSlot(32768, plan);
      EXPECT_GE(ss.tiles_per_split * plan.tile_tokens, min_split);
    }
  }
  // 100000 work items outnumber any SM count times 1: no split.
  EXPECT_EQ(MakeSplitKvPlan(s, 12500, SplitKvFamily::kTensorCore, {4, 1, 256}).max_splits, 1);
}

}  // namespace
}  // namespace attnrt::kernels
