// The FP8 E4M3 KV cache on the GPU (issue 13): the kernels that read E4M3 pools (split_kv,
// split_kv_simt, simple) and the append kernels that quantize into them, against the CPU
// reference run over the same codes (FP64 over the dequantised cache: max |out - ref| <= 2e-3,
// relative L2 <= 1e-3, LSE within 1e-3, as FP16). Fresh N(0,1) inputs quantised under random
// per-(K/V, layer, KV head) scales; outputs and workspace poisoned; positions a kernel must not
// read hold the NaN code; after the run the code pools must equal the reference append byte for
// byte (the device quantizes with the host's codec). For every variant, both ways of appending
// (the caller's append kernel; the plan's run: fused in split_kv, the append kernel first in the
// others), every head dim, block size and group, a split 32k context, peaky softmax; and the
// refusal of the one path that does not read FP8 (gemm). Skips (with the reason) where no CUDA
// device is present.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "api/internal/cuda_check.h"
#include "api/internal/fp8_e4m3.h"
#include "kernels/decode.h"
#include "kernels/decode_internal.h"
#include "tests/support/decode_checks.h"
#include "tests/support/device_paged_batch.h"
#include "tests/support/paged_batch.h"

namespace attnrt::kernels {
namespace {

using testing::DeviceArray;
using testing::DevicePagedBatch;
using testing::NewKvRows;
using testing::MakePagedBatch;
using testing::PagedBatch;
using testing::PagedBatchOptions;

ModelShape Fp8Shape(int h, int hkv, int d, int bs, int layers, int max_context,
                    std::uint64_t seed) {
  ModelShape s = testing::DecodeShape(h, hkv, d, bs, layers, max_context);
  s.kv_cache_type = KvCacheType::kFp8E4M3;
  // Scales in [0.25, 4): the kernel must apply each (K/V, layer, head)'s own.
  testing::NormalRng rng(seed);
  s.kv_scales.resize(static_cast<std::size_t>(2) * layers * hkv);
  for (float& x : s.kv_scales) x = 0.25f * static_cast<float>(1 << rng.NextInt(0, 3)) *
                                   (1.0f + 0.5f * static_cast<float>(rng.NextInt(0, 9)) / 10.0f);
  return s;
}

// The host batch's FP16 pools quantised (NaN positions stay NaN codes), and their device copy.
struct Fp8Pools {
  std::vector<std::uint8_t> k, v;
  DeviceArray<std::uint8_t> dev_k, dev_v;
  DeviceArray<float> dev_scales;

  Status Build(const PagedBatch& host) {
    const ModelShape& s = host.shape;
    const KvPoolView geometry = const_cast<PagedBatch&>(host).pools();
    k.resize(host.k_pool.size());
    v.resize(host.v_pool.size());
    for (int l = 0; l < s.num_layers; ++l) {
      for (int b = 0; b < host.num_blocks; ++b) {
        for (int h = 0; h < s.num_kv_heads; ++h) {
          const float ks = s.kv_scales[s.kv_scale_index(false, l, h)];
          const float vs = s.kv_scales[s.kv_scale_index(true, l, h)];
          const std::int64_t off = geometry.TokenOffset(l, b, h, 0);
          for (std::int64_t e = off; e < off + s.block_size * s.head_dim; ++e) {
            k[e] = QuantizeE4M3(HalfToFloat(host.k_pool[e]), ks);
            v[e] = QuantizeE4M3(HalfToFloat(host.v_pool[e]), vs);
          }
        }
      }
    }
    ATTNRT_RETURN_IF_ERROR(dev_k.Upload(k));
    ATTNRT_RETURN_IF_ERROR(dev_v.Upload(v));
    return dev_scales.Upload(s.kv_scales);
  }
  KvPoolView DevicePools(const DevicePagedBatch& dev) const {
    KvPoolView p = dev.pools();
    p.k = reinterpret_cast<Half*>(dev_k.get());
    p.v = reinterpret_cast<Half*>(dev_v.get());
    p.scales = dev_scales.get();
    return p;
  }
  Fp8KvPoolView HostPools(PagedBatch& host) {
    Fp8KvPoolView p;
    p.geometry = host.pools();
    p.k = k.data();
    p.v = v.data();
    p.scales = host.shape.kv_scales.data();
    return p;
  }
};

// kByPlanInPlace: the plan appends, reading the new K/V in place (k_rows/v_rows, NewKvRows).
enum class AppendMode { kByCaller, kByPlan, kByPlanInPlace };

// The variants that read FP8 pools (every one but gemm).
const std::vector<std::string> kFp8Variants = {"split_kv", "split_kv_simt", "simple"};

// Plans `variant` for the batch, appends and decodes on the device, and compares outputs, LSE
// and code pools with the reference over the same codes.
void RunFp8Case(const std::string& variant, const ModelShape& shape,
                const std::vector<int>& lengths, const PagedBatchOptions& options,
                AppendMode mode) {
  SCOPED_TRACE(variant + (mode == AppendMode::kByCaller ? ": append by the caller"
                          : mode == AppendMode::kByPlan ? ": append in the plan's run"
                                                        : ": append in the plan's run, in place"));
  const StatusOr<const DecodeVariant*> found = FindDecodeVariant(variant);
  ASSERT_TRUE(found.ok()) << found.status().ToString();
  const DecodeVariant& v = **found;
  ASSERT_OK(v.supports(shape));
  PagedBatch host = MakePagedBatch(shape, lengths, options);
  Fp8Pools fp8;
  ASSERT_OK(fp8.Build(host));
  DevicePagedBatch dev;
  ASSERT_OK(dev.Upload(host));
  const KvPoolView pools = fp8.DevicePools(dev);
  const StatusOr<DecodeDevice> device = CurrentDecodeDevice();
  ASSERT_TRUE(device.ok()) << device.status().ToString();
  const DecodePlanRequest request{
      shape, host.capacity, 0,
      mode == AppendMode::kByCaller ? DecodeStep::kDecode : DecodeStep::kAppendAndDecode, *device};
  const StatusOr<DecodePlan> plan = v.plan(request);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  // Only the tensor-core kernel appends inside itself; the others' runs launch the append kernel.
  EXPECT_EQ(plan->fuses_append,
            mode != AppendMode::kByCaller && v.name == "split_kv" &&
                plan->split_kv_family == SplitKvFamily::kTensorCore);
  DeviceArray<char> ws_storage;
  DecodeWorkspace ws;
  ASSERT_OK(testing::MakePoisonedWorkspace(*plan, &ws_storage, &ws));
  if (mode == AppendMode::kByCaller) ASSERT_OK(LaunchAppendKv(dev.view(), pools, nullptr));
  NewKvRows in_place;
  if (mode == AppendMode::kByPlanInPlace) ASSERT_OK(in_place.Build(host, dev));
  ASSERT_OK(v.run(*plan, mode == AppendMode::kByPlanInPlace ? in_place.view() : dev.view(), pools,
                  ws, {nullptr, nullptr}));
  ASSERT_OK(CudaStatus(cudaDeviceSynchronize(), "sync", __FILE__, __LINE__));

  std::vector<Half> out(host.out.size());
  std::vector<float> lse(host.lse.size());
  std::vector<std::uint8_t> k_codes(fp8.k.size()), v_codes(fp8.v.size());
  ASSERT_OK(dev.out.Download(out));
  ASSERT_OK(dev.lse.Download(lse));
  ASSERT_OK(fp8.dev_k.Download(k_codes));
  ASSERT_OK(fp8.dev_v.Download(v_codes));

  const Fp8KvPoolView host_pools = fp8.HostPools(host);
  ReferenceAppendKv(host.view(), host_pools);
  std::vector<float> ref_out(host.out.size());
  ReferenceDecode(host.view(), host_pools, ReferencePrecision::kFloat64, ref_out.data());

  EXPECT_TRUE(k_codes == fp8.k) << "K codes differ from the reference append";
  EXPECT_TRUE(v_codes == fp8.v) << "V codes differ from the reference append";
  testing::ExpectOutputMatchesReference(host, out, lse, ref_out, host.lse, "(FP8 codes)");
}

void RunEveryMode(const std::string& variant, const ModelShape& shape,
                  const std::vector<int>& lengths, const PagedBatchOptions& options) {
  for (AppendMode mode :
       {AppendMode::kByCaller, AppendMode::kByPlan, AppendMode::kByPlanInPlace}) {
    RunFp8Case(variant, shape, lengths, options, mode);
  }
}

using SweepParam = std::tuple<std::string, int, int, int>;  // variant, D, block size, group

class DecodeFp8SweepTest : public ::testing::TestWithParam<SweepParam> {};

TEST_P(DecodeFp8SweepTest, MatchesReferenceOverTheCodes) {
  SKIP_WITHOUT_GPU();
  const auto& [variant, d, bs, group] = GetParam();
  const int hkv = 2;
  const ModelShape shape =
      Fp8Shape(group * hkv, hkv, d, bs, /*layers=*/2, /*max_context=*/2048, d + bs + group);
  // Block boundaries, length 1, a padding row, short and long (split) contexts.
  const std::vector<int> lengths = {1, bs, bs + 1, 0, 3 * bs, 3 * bs + 1, 300, 1500, 2048};
  PagedBatchOptions opt;
  opt.seed = 5000 + d * 7 + bs * 13 + group * 31;
  opt.capacity = static_cast<int>(lengths.size()) + 1;
  RunEveryMode(variant, shape, lengths, opt);
}

INSTANTIATE_TEST_SUITE_P(
    AllCombos, DecodeFp8SweepTest,
    ::testing::Combine(::testing::ValuesIn(kFp8Variants), ::testing::Values(64, 128, 256),
                       ::testing::Values(8, 16, 64), ::testing::Values(1, 4, 8)),
    [](const ::testing::TestParamInfo<SweepParam>& info) {
      std::ostringstream os;
      os << std::get<0>(info.param) << "_D" << std::get<1>(info.param) << "_bs"
         << std::get<2>(info.param) << "_G" << std::get<3>(info.param);
      return os.str();
    });

// The long and peaky cases, per variant.
class DecodeFp8VariantTest : public ::testing::TestWithParam<std::string> {};

TEST_P(DecodeFp8VariantTest, Context32kSplits) {
  SKIP_WITHOUT_GPU();
  const ModelShape shape = Fp8Shape(8, 2, 128, 16, 1, 32768, 7);
  PagedBatchOptions opt;
  opt.seed = 77;
  opt.fill_threads = 8;
  RunEveryMode(GetParam(), shape, {32768, 1, 20000}, opt);
}

TEST_P(DecodeFp8VariantTest, PeakySoftmax) {
  SKIP_WITHOUT_GPU();
  const ModelShape shape = Fp8Shape(16, 2, 128, 32, 2, 4096, 8);
  PagedBatchOptions opt;
  opt.seed = 78;
  opt.q_scale = 20.0f;
  RunEveryMode(GetParam(), shape, {4096, 100, 1, 2500}, opt);
}

INSTANTIATE_TEST_SUITE_P(Variants, DecodeFp8VariantTest, ::testing::ValuesIn(kFp8Variants),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

TEST(DecodeFp8Test, PathsThatDoNotReadFp8RefuseIt) {
  SKIP_WITHOUT_GPU();
  const ModelShape shape = Fp8Shape(8, 2, 128, 16, 1, 1024, 9);
  for (const DecodeVariant& v : DecodeVariants()) {
    const Status s = v.supports(shape);
    if (v.name != "gemm") {
      EXPECT_TRUE(s.ok()) << v.name << ": " << s.ToString();
    } else {
      EXPECT_EQ(s.code(), StatusCode::kUnimplemented) << v.name << ": " << s.ToString();
      EXPECT_NE(s.message().find("fp8_e4m3"), std::string::npos) << s.ToString();
    }
  }
  // The tensor-core family builds one CTA size for FP8.
  const StatusOr<DecodeDevice> device = CurrentDecodeDevice();
  ASSERT_TRUE(device.ok());
  SplitKvLaunchConfig config;
  config.warps = 8;
  const StatusOr<DecodePlan> plan = PlanSplitKv(
      SplitKvFamily::kTensorCore, config, {shape, 4, 0, DecodeStep::kDecode, *device});
  ASSERT_FALSE(plan.ok());
  EXPECT_NE(plan.status().message().find("config.warps"), std::string::npos)
      << plan.status().ToString();
}

TEST(DecodeFp8Test, ScalesAreCheckedAgainstTheCacheType) {
  SKIP_WITHOUT_GPU();
  const ModelShape shape = Fp8Shape(8, 2, 64, 16, 1, 256, 10);
  PagedBatch host = MakePagedBatch(shape, std::vector<int>{5, 9});
  Fp8Pools fp8;
  ASSERT_OK(fp8.Build(host));
  DevicePagedBatch dev;
  ASSERT_OK(dev.Upload(host));
  const StatusOr<DecodeDevice> device = CurrentDecodeDevice();
  ASSERT_TRUE(device.ok());
  const DecodeVariant& v = DefaultDecodeVariant();
  const StatusOr<DecodePlan> plan = v.plan({shape, host.capacity, 0, DecodeStep::kDecode, *device});
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  DeviceArray<char> ws_storage;
  ASSERT_OK(ws_storage.Allocate(plan->workspace_bytes));
  const DecodeWorkspace ws{ws_storage.get(), plan->workspace_bytes};
  KvPoolView no_scales = fp8.DevicePools(dev);
  no_scales.scales = nullptr;
  const Status s = v.run(*plan, dev.view(), no_scales, ws, {nullptr, nullptr});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("pools.scales"), std::string::npos) << s.ToString();

  ModelShape fp16 = shape;
  fp16.kv_cache_type = KvCacheType::kFp16;
  fp16.kv_scales.clear();
  const StatusOr<DecodePlan> plan16 =
      v.plan({fp16, host.capacity, 0, DecodeStep::kDecode, *device});
  ASSERT_TRUE(plan16.ok()) << plan16.status().ToString();
  DeviceArray<char> ws16;
  ASSERT_OK(ws16.Allocate(plan16->workspace_bytes));
  KvPoolView fp16_with_scales = dev.pools();
  fp16_with_scales.scales = fp8.dev_scales.get();
  const Status s16 = v.run(*plan16, dev.view(), fp16_with_scales,
                           {ws16.get(), plan16->workspace_bytes}, {nullptr, nullptr});
  EXPECT_EQ(s16.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s16.message().find("pools.scales"), std::string::npos) << s16.ToString();
  ASSERT_OK(CudaStatus(cudaDeviceSynchronize(), "sync", __FILE__, __LINE__));
}

}  // namespace
}  // namespace attnrt::kernels
