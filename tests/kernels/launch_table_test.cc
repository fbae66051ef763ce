// The tuned launch tables (kernels/launch_tables/, one per GPU model) and their lookup, on the
// host: every row is a configuration the kernels support, rows are ordered, and dispatch picks the
// right row of the device model's table.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/decode.h"
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

class LaunchTableGpuTest : public ::testing::TestWithParam<TunedGpu> {};

TEST_P(LaunchTableGpuTest, RowsAreSupportedAndOrdered) {
  const TunedGpu gpu = GetParam();
  for (const KvCacheType type : {KvCacheType::kFp16, KvCacheType::kFp8E4M3}) {
    const auto rows = TunedLaunchTable(gpu, type);
    for (std::size_t i = 0; i < rows.size(); ++i) {
      const TunedLaunchRow& r = rows[i];
      SCOPED_TRACE(std::string(KvCacheTypeName(type)) + " row " + std::to_string(i));
      EXPECT_TRUE(CheckLaunchConfig(r.family, r.config, r.head_dim, type).ok())
          << CheckLaunchConfig(r.family, r.config, r.head_dim, type).ToString();
      // The FP8 table is the tensor-core family's (an FP8 shape never falls back to SIMT).
      if (type == KvCacheType::kFp8E4M3) {
        EXPECT_EQ(r.family, SplitKvFamily::kTensorCore);
      }
      EXPECT_TRUE(r.group == 1 || r.group == 2 || r.group == 4 || r.group == 8) << r.group;
      EXPECT_GE(r.min_work, 1);
      EXPECT_TRUE(r.max_kv_length == 0 || r.max_kv_length == kSplitKvShortContext)
          << r.max_kv_length;
      if (i > 0) {
        const TunedLaunchRow& p = rows[i - 1];
        EXPECT_LT(std::tie(p.head_dim, p.group, p.max_kv_length, p.min_work),
                  std::tie(r.head_dim, r.group, r.max_kv_length, r.min_work))
            << "rows must be sorted by (head_dim, group, max_kv_length, min_work) without "
               "duplicates";
      }
    }
  }
}

TEST_P(LaunchTableGpuTest, LookupPicksTheLastRowAtOrBelowTheWork) {
  const TunedGpu gpu = GetParam();
  const auto rows = TunedLaunchTable(gpu);
  for (const TunedLaunchRow& r : rows) {
    // kv heads 1: work items = capacity.
    // Shape() has max_context 32768: a plan of max_kv_length 0 is in the any-length class.
    const ModelShape s = Shape(r.group, 1, r.head_dim);
    const int length = r.max_kv_length;  // 0 or kSplitKvShortContext
    const TunedSplitKv at = TunedSplitKvLaunch(s, r.min_work, length, gpu);
    EXPECT_TRUE(at.config == r.config && at.family == r.family)
        << "D" << r.head_dim << " G" << r.group << " work " << r.min_work << " class " << length
        << ": got " << SplitKvVariantName(at.family) << " " << ToString(at.config);
    // A family asks for its configuration: the row's where the row names it, else the default.
    const SplitKvFamily other = r.family == SplitKvFamily::kSimt ? SplitKvFamily::kTensorCore
                                                                  : SplitKvFamily::kSimt;
    EXPECT_TRUE(TunedLaunchConfig(r.family, s, r.min_work, length, gpu) == r.config);
    EXPECT_TRUE(TunedLaunchConfig(other, s, r.min_work, length, gpu) == SplitKvLaunchConfig{});
    if (length == kSplitKvShortContext) {
      // Any short plan takes the short rows, whatever its own bound.
      const TunedSplitKv shorter = TunedSplitKvLaunch(s, r.min_work, 100, gpu);
      EXPECT_TRUE(shorter.config == r.config && shorter.family == r.family);
      ModelShape short_shape = s;
      short_shape.max_context = 4096;
      const TunedSplitKv by_shape = TunedSplitKvLaunch(short_shape, r.min_work, 0, gpu);
      EXPECT_TRUE(by_shape.config == r.config && by_shape.family == r.family);
    }
  }
  // A (head dim, group) no row names (D 256, G 8) gets the tensor-core family under the default
  // configuration.
  const SplitKvLaunchConfig def;
  EXPECT_TRUE(TunedLaunchConfig(SplitKvFamily::kTensorCore, Shape(16, 2, 256), 4, 0, gpu) == def);
  EXPECT_EQ(TunedSplitKvLaunch(Shape(16, 2, 256), 4, 0, gpu).family, SplitKvFamily::kTensorCore);
  // An FP8 shape takes its own table's row, else the FP16 row's splitting with the FP8 CTA size.
  for (const TunedLaunchRow& r : TunedLaunchTable(gpu, KvCacheType::kFp16)) {
    ModelShape s = Shape(r.group, 1, r.head_dim);
    s.kv_cache_type = KvCacheType::kFp8E4M3;
    const SplitKvLaunchConfig at =
        TunedLaunchConfig(SplitKvFamily::kTensorCore, s, r.min_work, r.max_kv_length, gpu);
    EXPECT_EQ(at.warps, kTcFp8Warps);
    EXPECT_EQ(TunedSplitKvLaunch(s, r.min_work, r.max_kv_length, gpu).family,
              SplitKvFamily::kTensorCore);
    EXPECT_TRUE(CheckLaunchConfig(SplitKvFamily::kTensorCore, at, r.head_dim,
                                  KvCacheType::kFp8E4M3).ok()) << ToString(at);
    bool own_row = false;
    for (const TunedLaunchRow& f : TunedLaunchTable(gpu, KvCacheType::kFp8E4M3)) {
      own_row |= f.head_dim == r.head_dim && f.group == r.group && f.min_work <= r.min_work;
    }
    if (!own_row) {
      EXPECT_EQ(at.ctas_per_sm, r.config.ctas_per_sm);
      EXPECT_EQ(at.min_split_tokens, r.config.min_split_tokens);
    }
  }
  for (const TunedLaunchRow& r : TunedLaunchTable(gpu, KvCacheType::kFp8E4M3)) {
    ModelShape s = Shape(r.group, 1, r.head_dim);
    s.kv_cache_type = KvCacheType::kFp8E4M3;
    EXPECT_TRUE(TunedLaunchConfig(SplitKvFamily::kTensorCore, s, r.min_work, 0, gpu) == r.config);
    EXPECT_EQ(TunedSplitKvLaunch(s, r.min_work, 0, gpu).family, SplitKvFamily::kTensorCore);
    if (r.max_kv_length == 0) {
      // A short plan of a (D, G) whose short class has no rows falls back to these.
      bool short_rows = false;
      for (const TunedLaunchRow& f : TunedLaunchTable(gpu, KvCacheType::kFp8E4M3)) {
        short_rows |= f.head_dim == r.head_dim && f.group == r.group && f.max_kv_length != 0;
      }
      if (!short_rows) {
        EXPECT_TRUE(TunedLaunchConfig(SplitKvFamily::kTensorCore, s, r.min_work, 1000, gpu) ==
                    r.config);
      }
    }
  }
  // An invalid shape does not crash the lookup (the launch reports it).
  EXPECT_TRUE(TunedLaunchConfig(SplitKvFamily::kTensorCore, Shape(8, 0, 128), 4, 0, gpu) == def);
}

INSTANTIATE_TEST_SUITE_P(Models, LaunchTableGpuTest, ::testing::ValuesIn(kTunedGpus),
                         [](const auto& info) { return std::string(TunedGpuName(info.param)); });

// A device reads its model's table: the H200's by name, every other GPU the H100's; a plan
// follows the table of the device it is made for.
TEST(LaunchTableTest, DeviceModelPicksItsTable) {
  EXPECT_EQ(TunedGpuFor("NVIDIA H200"), TunedGpu::kH200);
  EXPECT_EQ(TunedGpuFor("NVIDIA H200 NVL"), TunedGpu::kH200);
  EXPECT_EQ(TunedGpuFor("NVIDIA H100 80GB HBM3"), TunedGpu::kH100);
  EXPECT_EQ(TunedGpuFor("NVIDIA A100-SXM4-80GB"), TunedGpu::kH100);
  EXPECT_EQ(TunedGpuFor(""), TunedGpu::kH100);
  EXPECT_NE(TunedLaunchTable(TunedGpu::kH100).data(), TunedLaunchTable(TunedGpu::kH200).data());
  EXPECT_EQ(TunedLaunchTable(TunedGpu::kH100, KvCacheType::kFp8E4M3).data(),
            TunedLaunchTable(TunedGpu::kH200, KvCacheType::kFp8E4M3).data());
  // Some (shape, work, class) where the two tables differ plans each model's row (rows with a
  // CTA target, which a described device without a GPU can plan).
  int differing = 0;
  for (const TunedLaunchRow& r : TunedLaunchTable(TunedGpu::kH200)) {
    const ModelShape s = Shape(r.group, 1, r.head_dim);
    const TunedSplitKv h100 = TunedSplitKvLaunch(s, r.min_work, r.max_kv_length, TunedGpu::kH100);
    const TunedSplitKv h200 = TunedSplitKvLaunch(s, r.min_work, r.max_kv_length, TunedGpu::kH200);
    if ((h100.config == h200.config && h100.family == h200.family) || h100.family != h200.family ||
        h100.config.ctas_per_sm == 0 || h200.config.ctas_per_sm == 0) {
      continue;
    }
    ++differing;
    for (const TunedGpu gpu : kTunedGpus) {
      const DecodeDevice device{-1, 132, gpu};
      const StatusOr<DecodePlan> plan =
          DefaultDecodeVariant().plan({s, r.min_work, r.max_kv_length, DecodeStep::kDecode, device});
      ASSERT_TRUE(plan.ok()) << plan.status().ToString();
      const SplitKvLaunchConfig want = gpu == TunedGpu::kH200 ? h200.config : h100.config;
      EXPECT_TRUE(plan->split_kv_config == want)
          << TunedGpuName(gpu) << " D" << r.head_dim << " G" << r.group << " work " << r.min_work
          << ": " << ToString(plan->split_kv_config) << " instead of " << ToString(want);
    }
  }
  EXPECT_GT(differing, 0) << "the H100 and H200 tables agree on every tensor-core row";
}

TEST(LaunchTableTest, SplitKvPlansTwoContextClassesPastTheShortBound) {
  ModelShape s = Shape(32, 8, 128);
  s.max_context = 4096;
  EXPECT_EQ(SplitKvKvLengthBuckets(s), std::vector<int>{4096});
  s.max_context = kSplitKvShortContext;
  EXPECT_EQ(SplitKvKvLengthBuckets(s), std::vector<int>{kSplitKvShortContext});
  s.max_context = 65536;
  EXPECT_EQ(SplitKvKvLengthBuckets(s), (std::vector<int>{kSplitKvShortContext, 65536}));
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
  // The FP8 kernel is built with kTcFp8Warps warps only.
  const Status fp8 = CheckLaunchConfig(SplitKvFamily::kTensorCore, {8, 0, 256}, 128,
                                       KvCacheType::kFp8E4M3);
  EXPECT_EQ(fp8.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(fp8.message().find("config.warps = 8"), std::string::npos) << fp8.ToString();
  EXPECT_TRUE(CheckLaunchConfig(SplitKvFamily::kTensorCore, {kTcFp8Warps, 0, 256}, 128,
                                KvCacheType::kFp8E4M3).ok());
}

// The plan follows the configuration: the CTA tile is 16 tokens per warp, pieces are at least
// min_split_tokens long, and a target of ctas_per_sm stops splitting once the work items fill the
// device's SMs (here a described 132-SM device: no GPU needed when ctas_per_sm > 0).
TEST(LaunchTableTest, PlanFollowsTheConfiguration) {
  const ModelShape s = Shape(32, 8, 128);
  const DecodeDevice h100{-1, 132};
  for (int warps : {2, 4, 8}) {
    for (int min_split : {128, 512}) {
      const StatusOr<DecodePlan> plan = PlanSplitKv(SplitKvFamily::kTensorCore, {warps, 8, min_split},
                                                    {s, 1, 0, DecodeStep::kDecode, h100});
      ASSERT_TRUE(plan.ok()) << plan.status().ToString();
      const SplitKvPlan& split = plan->split_kv;
      EXPECT_EQ(split.tile_tokens, 16 * warps);
      EXPECT_EQ(split.min_tiles, std::max(1, min_split / (16 * warps)));
      EXPECT_GT(split.max_splits, 1) << "8 work items, 8 CTAs per SM wanted: must split";
      EXPECT_LE(split.max_splits, 64);
      EXPECT_EQ(plan->decode.threads, 32 * warps);
      EXPECT_EQ(plan->decode.grid.x, static_cast<unsigned>(split.max_splits));
      // A split never gets fewer than min_split tokens (except where the context is shorter).
      const RowSplit ss = SplitRow(32768, split);
      EXPECT_GE(ss.tiles_per_split * split.tile_tokens, min_split);
    }
  }
  // 100000 work items outnumber 132 SMs times 1: no split, no workspace, no counters.
  const StatusOr<DecodePlan> wide = PlanSplitKv(SplitKvFamily::kTensorCore, {4, 1, 256},
                                                {s, 12500, 0, DecodeStep::kDecode, h100});
  ASSERT_TRUE(wide.ok()) << wide.status().ToString();
  EXPECT_EQ(wide->split_kv.max_splits, 1);
  EXPECT_EQ(wide->workspace_bytes, 0u);
  EXPECT_EQ(wide->workspace_zero_bytes, 0u);
  // The SM count is the device's: twice the SMs, twice the splits for a few work items.
  const StatusOr<DecodePlan> small = PlanSplitKv(SplitKvFamily::kTensorCore, {4, 1, 128},
                                                 {s, 2, 0, DecodeStep::kDecode, {-1, 16}});
  const StatusOr<DecodePlan> large = PlanSplitKv(SplitKvFamily::kTensorCore, {4, 1, 128},
                                                 {s, 2, 0, DecodeStep::kDecode, {-1, 32}});
  ASSERT_TRUE(small.ok() && large.ok());
  EXPECT_EQ(small->split_kv.max_splits, 1);  // 16 SMs * 1 / 16 work items
  EXPECT_EQ(large->split_kv.max_splits, 2);
}

}  // namespace
}  // namespace attnrt::kernels
