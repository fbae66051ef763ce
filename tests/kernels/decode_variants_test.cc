// The decode-variant table and its plans, on the host (no GPU needed): every entry is complete
// and findable, the GEMM path is one of them, plans reject what they cannot run naming the field,
// plans for a described device size without one and never run, and the split-KV splits.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "api/internal/cuda_check.h"
#include "kernels/decode.h"
#include "kernels/decode_internal.h"
#include "kernels/gemm_path.h"

namespace attnrt::kernels {
namespace {

// A device without a GPU behind it: plans size against its SM count, runs refuse them.
constexpr DecodeDevice kDescribedH100{-1, 132};

ModelShape Shape(int q_heads, int kv_heads, int head_dim, int max_context = 4096) {
  ModelShape s;
  s.num_q_heads = q_heads;
  s.num_kv_heads = kv_heads;
  s.head_dim = head_dim;
  s.max_context = max_context;
  return s;
}

DecodePlanRequest Request(const ModelShape& shape, int capacity,
                          DecodeStep step = DecodeStep::kAppendAndDecode) {
  return {shape, capacity, 0, step, kDescribedH100};
}

// A configuration that needs no occupancy query (ctas_per_sm > 0): plannable on the host.
constexpr SplitKvLaunchConfig kHostPlannable{4, 2, 256};

// What `variant` plans for `request` on the host: split-KV entries under kHostPlannable (their
// tuned configuration may use the occupancy rule, which needs a live device).
StatusOr<DecodePlan> HostPlan(const DecodeVariant& variant, const DecodePlanRequest& request) {
  if (variant.name == SplitKvVariantName(SplitKvFamily::kSimt)) {
    return PlanSplitKv(SplitKvFamily::kSimt, kHostPlannable, request);
  }
  if (variant.name == SplitKvVariantName(SplitKvFamily::kTensorCore)) {
    return PlanSplitKv(SplitKvFamily::kTensorCore, kHostPlannable, request);
  }
  return variant.plan(request);
}

TEST(DecodeVariantsTest, EveryEntryIsCompleteNamedOnceAndFindable) {
  std::set<std::string_view> names;
  for (const DecodeVariant& v : DecodeVariants()) {
    EXPECT_FALSE(v.name.empty());
    EXPECT_TRUE(names.insert(v.name).second) << "two entries named " << v.name;
    EXPECT_NE(v.supports, nullptr) << v.name;
    EXPECT_NE(v.kv_length_buckets, nullptr) << v.name;
    EXPECT_NE(v.plan, nullptr) << v.name;
    EXPECT_NE(v.run, nullptr) << v.name;
    auto found = FindDecodeVariant(v.name);
    ASSERT_TRUE(found.ok()) << found.status().ToString();
    EXPECT_EQ(*found, &v);
  }
}

TEST(DecodeVariantsTest, SimpleFirstGemmInTheTableSplitKvDefault) {
  ASSERT_GE(DecodeVariants().size(), 4u);
  EXPECT_EQ(DecodeVariants().front().name, "simple");
  EXPECT_EQ(DefaultDecodeVariant().name, "split_kv");
  EXPECT_EQ(&DefaultDecodeVariant(), &DecodeVariants().back());
  auto gemm = FindDecodeVariant(kGemmVariantName);
  ASSERT_TRUE(gemm.ok()) << gemm.status().ToString();
  EXPECT_EQ((*gemm)->name, "gemm");
}

TEST(DecodeVariantsTest, UnknownNameIsNotFoundAndListsNames) {
  auto found = FindDecodeVariant("fastest");
  ASSERT_FALSE(found.ok());
  EXPECT_EQ(found.status().code(), StatusCode::kNotFound);
  EXPECT_NE(found.status().message().find("'fastest'"), std::string::npos);
  EXPECT_NE(found.status().message().find("simple, gemm, split_kv_simt, split_kv"),
            std::string::npos)
      << found.status().ToString();
}

TEST(DecodeVariantsTest, SupportsEveryIssueComboAndNamesTheOthers) {
  for (const DecodeVariant& v : DecodeVariants()) {
    for (int d : {64, 128, 256}) {
      for (int bs : {8, 16, 32, 64}) {
        for (int g : {1, 2, 4, 8}) {
          ModelShape s = Shape(4 * g, 4, d);
          s.block_size = bs;
          EXPECT_TRUE(v.supports(s).ok()) << v.name << " D" << d << " bs" << bs << " G" << g;
        }
      }
    }
    // The fused kernels are instantiated for groups up to 8; the GEMM path takes any group.
    const Status g16 = v.supports(Shape(32, 2, 128));
    if (v.name == kGemmVariantName) {
      EXPECT_TRUE(g16.ok()) << g16.ToString();
    } else {
      EXPECT_EQ(g16.code(), StatusCode::kUnimplemented);
      EXPECT_NE(g16.message().find("32/2"), std::string::npos) << g16.ToString();
    }
    const Status bad_ratio = v.supports(Shape(4, 3, 128));
    EXPECT_FALSE(bad_ratio.ok()) << v.name;
    EXPECT_NE(bad_ratio.message().find("num_q_heads"), std::string::npos) << bad_ratio.ToString();
  }
}

// An FP8 E4M3 cache: every fused kernel (split_kv, split_kv_simt, simple) takes it at every
// instantiated (D, block size, group) and plans it; the GEMM path refuses it naming the type.
TEST(DecodeVariantsTest, EveryPathButGemmReadsFp8) {
  for (const DecodeVariant& v : DecodeVariants()) {
    SCOPED_TRACE(std::string(v.name));
    for (int d : {64, 128, 256}) {
      for (int bs : {8, 16, 32, 64}) {
        for (int g : {1, 2, 4, 8}) {
          ModelShape s = Shape(4 * g, 4, d);
          s.block_size = bs;
          s.kv_cache_type = KvCacheType::kFp8E4M3;
          const Status supported = v.supports(s);
          if (v.name == kGemmVariantName) {
            EXPECT_EQ(supported.code(), StatusCode::kUnimplemented) << supported.ToString();
            EXPECT_NE(supported.message().find("fp8_e4m3"), std::string::npos)
                << supported.ToString();
            continue;
          }
          EXPECT_TRUE(supported.ok()) << "D" << d << " bs" << bs << " G" << g << ": "
                                      << supported.ToString();
          for (DecodeStep step : {DecodeStep::kDecode, DecodeStep::kAppendAndDecode}) {
            const StatusOr<DecodePlan> plan = HostPlan(v, Request(s, 8, step));
            ASSERT_TRUE(plan.ok()) << "D" << d << " bs" << bs << " G" << g << ": "
                                   << plan.status().ToString();
            EXPECT_NE(plan->decode.fn, nullptr);
            EXPECT_EQ(plan->shape.kv_cache_type, KvCacheType::kFp8E4M3);
            // Only the tensor-core kernel appends inside itself (quantizing as it goes).
            EXPECT_EQ(plan->fuses_append,
                      v.name == "split_kv" && step == DecodeStep::kAppendAndDecode);
          }
        }
      }
    }
  }
  // The FP8 kernels are other instances than the FP16 ones, with the same tiles (so the same
  // splits and workspace).
  ModelShape fp16 = Shape(32, 8, 128);
  ModelShape fp8 = fp16;
  fp8.kv_cache_type = KvCacheType::kFp8E4M3;
  for (const char* name : {"split_kv_simt", "simple"}) {
    SCOPED_TRACE(name);
    const DecodeVariant& v = *FindDecodeVariant(name).value();
    const StatusOr<DecodePlan> a = HostPlan(v, Request(fp16, 8));
    const StatusOr<DecodePlan> b = HostPlan(v, Request(fp8, 8));
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_NE(a->decode.fn, b->decode.fn);
    EXPECT_EQ(a->decode.grid.x, b->decode.grid.x);
    EXPECT_EQ(a->decode.threads, b->decode.threads);
    EXPECT_EQ(a->split_kv.tile_tokens, b->split_kv.tile_tokens);
    EXPECT_EQ(a->workspace_bytes, b->workspace_bytes);
  }
}

// Every plan refuses what it cannot run with a Status naming the offending field.
TEST(DecodeVariantsTest, PlanRejectsWhatItCannotRunNamingTheField) {
  for (const DecodeVariant& v : DecodeVariants()) {
    SCOPED_TRACE(std::string(v.name));
    struct Bad {
      DecodePlanRequest request;
      const char* field;
    };
    const ModelShape good = Shape(8, 2, 128);
    ModelShape d96 = good;
    d96.head_dim = 96;
    ModelShape bs128 = good;
    bs128.block_size = 128;
    DecodePlanRequest no_sms = Request(good, 4);
    no_sms.device.sm_count = 0;
    DecodePlanRequest too_long = Request(good, 4);
    too_long.max_kv_length = good.max_context + 1;
    for (const Bad& bad : {Bad{Request(d96, 4), "head_dim"}, Bad{Request(bs128, 4), "block_size"},
                           Bad{Request(good, 0), "request.capacity = 0"},
                           Bad{Request(good, 70000), "request.capacity = 70000"},
                           Bad{no_sms, "request.device.sm_count = 0"},
                           Bad{too_long, "request.max_kv_length = 4097"}}) {
      const StatusOr<DecodePlan> plan = v.plan(bad.request);
      ASSERT_FALSE(plan.ok()) << bad.field;
      EXPECT_TRUE(plan.status().code() == StatusCode::kInvalidArgument ||
                  plan.status().code() == StatusCode::kUnimplemented)
          << plan.status().ToString();
      EXPECT_NE(plan.status().message().find(bad.field), std::string::npos)
          << plan.status().ToString();
    }
  }
}

// Split-KV plans take the context class of their max_kv_length: the short bound up to it, the
// model's max_context past it; the splits of a short plan are capped by its own bound.
TEST(DecodeVariantsTest, SplitKvPlansRecordTheirContextClass) {
  const ModelShape shape = Shape(32, 8, 128, 32768);
  for (SplitKvFamily family : {SplitKvFamily::kSimt, SplitKvFamily::kTensorCore}) {
    SCOPED_TRACE(std::string(SplitKvVariantName(family)));
    for (const auto& [requested, planned] :
         std::vector<std::pair<int, int>>{{100, kSplitKvShortContext},
                                          {kSplitKvShortContext, kSplitKvShortContext},
                                          {kSplitKvShortContext + 1, 32768},
                                          {0, 32768}}) {
      DecodePlanRequest request = Request(shape, 1);
      request.max_kv_length = requested;
      const StatusOr<DecodePlan> plan = PlanSplitKv(family, {4, 64, 128}, request);
      ASSERT_TRUE(plan.ok()) << plan.status().ToString();
      EXPECT_EQ(plan->max_kv_length, planned) << "requested " << requested;
      const int tiles = (planned + plan->split_kv.tile_tokens - 1) / plan->split_kv.tile_tokens;
      EXPECT_LE(plan->split_kv.max_splits, std::max(1, tiles / plan->split_kv.min_tiles));
    }
  }
  const DecodeVariant& v = DefaultDecodeVariant();
  EXPECT_EQ(v.kv_length_buckets(shape), (std::vector<int>{kSplitKvShortContext, 32768}));
}

TEST(DecodeVariantsTest, PlansOnADescribedDeviceRecordTheirDecisions) {
  const ModelShape shape = Shape(32, 8, 128, 4096);
  for (const DecodeVariant& v : DecodeVariants()) {
    for (DecodeStep step : {DecodeStep::kDecode, DecodeStep::kAppendAndDecode}) {
      SCOPED_TRACE(std::string(v.name) + (step == DecodeStep::kDecode ? " decode" : " append"));
      const StatusOr<DecodePlan> plan = HostPlan(v, Request(shape, 8, step));
      ASSERT_TRUE(plan.ok()) << plan.status().ToString();
      EXPECT_EQ(plan->variant, v.name);
      EXPECT_EQ(plan->capacity, 8);
      EXPECT_EQ(plan->step, step);
      EXPECT_EQ(plan->device.sm_count, kDescribedH100.sm_count);
      EXPECT_GE(plan->max_kv_length, shape.max_context);
      // Only the tensor-core kernel appends inside itself.
      EXPECT_EQ(plan->fuses_append, v.name == "split_kv" && step == DecodeStep::kAppendAndDecode);
      EXPECT_EQ(plan->uses_cublas, v.name == kGemmVariantName);
      if (v.name == kGemmVariantName) {
        EXPECT_EQ(plan->gemm.t_pad, 4096);
        EXPECT_EQ(plan->workspace_bytes, plan->gemm.workspace_bytes);
        EXPECT_EQ(plan->decode.fn, nullptr);
      } else {
        EXPECT_NE(plan->decode.fn, nullptr);
        EXPECT_GT(plan->decode.threads, 0);
        EXPECT_GT(plan->decode.grid.x * plan->decode.grid.y * plan->decode.grid.z, 0u);
      }
      if (v.name == "simple") {
        EXPECT_EQ(plan->workspace_bytes, 0u);
        EXPECT_EQ(plan->decode.grid.x, 32u);  // one CTA per (q head, batch row)
        EXPECT_EQ(plan->decode.grid.y, 8u);
      }
    }
  }
}

// One plan per bucket: the GEMM path's Tpad buckets, the others one bucket that runs any length.
TEST(DecodeVariantsTest, KvLengthBucketsCoverMaxContext) {
  const ModelShape shape = Shape(32, 8, 128, 5000);
  for (const DecodeVariant& v : DecodeVariants()) {
    SCOPED_TRACE(std::string(v.name));
    const std::vector<int> buckets = v.kv_length_buckets(shape);
    ASSERT_FALSE(buckets.empty());
    EXPECT_EQ(buckets.back(), shape.max_context);
    for (std::size_t i = 1; i < buckets.size(); ++i) EXPECT_LT(buckets[i - 1], buckets[i]);
    for (int bucket : buckets) {
      DecodePlanRequest request = Request(shape, 4);
      request.max_kv_length = bucket;
      const StatusOr<DecodePlan> plan = HostPlan(v, request);
      ASSERT_TRUE(plan.ok()) << bucket << ": " << plan.status().ToString();
      EXPECT_GE(plan->max_kv_length, bucket);
    }
  }
  EXPECT_EQ(FindDecodeVariant(kGemmVariantName).value()->kv_length_buckets(shape),
            (std::vector<int>{64, 128, 256, 512, 1024, 2048, 4096, 5000}));
  DecodePlanRequest top = Request(shape, 4);
  top.max_kv_length = 5000;
  const StatusOr<DecodePlan> gemm_top = PlanGemm(top);
  ASSERT_TRUE(gemm_top.ok());
  EXPECT_EQ(gemm_top->gemm.t_pad, 5056);  // max_context rounded up to the Tpad quantum
  EXPECT_EQ(gemm_top->max_kv_length, 5056);
}

// Without a live device the occupancy rule cannot be evaluated: the plan says so instead of
// assuming some GPU's SM count.
TEST(DecodeVariantsTest, OccupancyRuleNeedsALiveDevice) {
  const StatusOr<DecodePlan> plan =
      PlanSplitKv(SplitKvFamily::kTensorCore, {4, 0, 256}, Request(Shape(32, 8, 128), 4));
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(plan.status().message().find("config.ctas_per_sm = 0"), std::string::npos)
      << plan.status().ToString();
}

// A plan runs only on the variant that made it and only on a live device; both are refused
// before anything is checked or enqueued (no CUDA call here).
TEST(DecodeVariantsTest, RunRefusesAForeignOrDescribedPlan) {
  const StatusOr<DecodePlan> simple = PlanSimple(Request(Shape(8, 2, 128), 2));
  ASSERT_TRUE(simple.ok()) << simple.status().ToString();
  const Status described = DecodeVariants().front().run(*simple, {}, {}, {}, {});
  EXPECT_EQ(described.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(described.message().find("plan.device.ordinal = -1"), std::string::npos)
      << described.ToString();
  const Status foreign = DefaultDecodeVariant().run(*simple, {}, {}, {}, {});
  EXPECT_EQ(foreign.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(foreign.message().find("plan.variant = 'simple'"), std::string::npos)
      << foreign.ToString();
}

TEST(DecodeVariantsTest, CurrentDeviceIsUnavailableWithoutAGpu) {
  const StatusOr<DecodeDevice> device = CurrentDecodeDevice();
  if (CudaDeviceAvailable()) {
    ASSERT_TRUE(device.ok()) << device.status().ToString();
    EXPECT_GE(device->ordinal, 0);
    EXPECT_GT(device->sm_count, 0);
  } else {
    EXPECT_EQ(device.status().code(), StatusCode::kUnavailable);
  }
}

// Every token of a row lands in exactly one split; each split but the last is full; short
// contexts are never split; no row asks for more splits than the grid has.
TEST(SplitKvPlanTest, SplitsCoverEveryTokenOnce) {
  for (int max_splits : {1, 2, 7, 16, 64}) {
    for (int min_tiles : {1, 4, 8, 16}) {
      SplitKvPlan plan{max_splits, 32, min_tiles};
      for (int len = 1; len <= 20000; len += (len < 600 ? 1 : 97)) {
        const RowSplit s = SplitRow(len, plan);
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
  ModelShape s = Shape(32, 32, 128, 65536);
  for (SplitKvFamily family : {SplitKvFamily::kSimt, SplitKvFamily::kTensorCore}) {
    const StatusOr<DecodePlan> plan = PlanSplitKv(family, kHostPlannable, Request(s, 1));
    ASSERT_TRUE(plan.ok()) << plan.status().ToString();
    EXPECT_GT(plan->split_kv.max_splits, 1);
    EXPECT_GE(plan->workspace_bytes,
              static_cast<std::size_t>(plan->split_kv.max_splits) * 32 * (128 + 1) * sizeof(float));
    // The arrival counters of the in-kernel merge come first: one per SM and resident CTA.
    EXPECT_EQ(plan->workspace_zero_bytes,
              static_cast<std::size_t>(plan->device.sm_count) * 32 * sizeof(unsigned));
    EXPECT_GE(plan->workspace_bytes - plan->workspace_zero_bytes,
              static_cast<std::size_t>(plan->split_kv.max_splits) * 32 * (128 + 1) * sizeof(float));
    EXPECT_EQ(plan->decode.grid.x, static_cast<unsigned>(plan->split_kv.max_splits));
  }
  s.max_context = 128;  // too short to ever split: no workspace, no counters
  const StatusOr<DecodePlan> short_plan =
      PlanSplitKv(SplitKvFamily::kTensorCore, kHostPlannable, Request(s, 1));
  ASSERT_TRUE(short_plan.ok()) << short_plan.status().ToString();
  EXPECT_EQ(short_plan->workspace_bytes, 0u);
  EXPECT_EQ(short_plan->workspace_zero_bytes, 0u);
}

}  // namespace
}  // namespace attnrt::kernels
