// Tests tools/kv_cache_support.h: the values the self-checking programs' mirrors hold for an FP8
// cache, and which Statuses attnrt-check reports as a path's refusal of the cache type (n/a)
// rather than a failure, including the runtime's own refusal.
#include "tools/kv_cache_support.h"

#include <vector>

#include <gtest/gtest.h>

#include <attnrt/runtime.h>
#include "tools/dense_reference.h"

namespace attnrt::tools {
namespace {

TEST(KvCacheSupportTest, Fp16StoresTheValue) {
  for (float x : {0.0f, 0.3f, -1.5f, 1000.0f, 65504.0f}) {
    const Half h = FloatToHalf(x);
    EXPECT_EQ(StoredKvValue(KvCacheType::kFp16, h), HalfToFloat(h)) << x;
  }
}

TEST(KvCacheSupportTest, Fp8StoresTheNearestE4M3ValueSaturated) {
  // 0.3 lies between the E4M3 values 0.28125 and 0.3125 (step 2^-5 in [0.25, 0.5)).
  EXPECT_EQ(StoredKvValue(KvCacheType::kFp8E4M3, FloatToHalf(0.3f)), 0.3125f);
  EXPECT_EQ(StoredKvValue(KvCacheType::kFp8E4M3, FloatToHalf(1.0f)), 1.0f);
  EXPECT_EQ(StoredKvValue(KvCacheType::kFp8E4M3, FloatToHalf(-1000.0f)), -448.0f);
  // Subnormals are m * 2^-9: 0.001 * 2^9 = 0.512 rounds to m = 1; 0.0002 (below 2^-11) to 0.
  EXPECT_EQ(StoredKvValue(KvCacheType::kFp8E4M3, FloatToHalf(0.001f)), 0x1p-9f);
  EXPECT_EQ(StoredKvValue(KvCacheType::kFp8E4M3, FloatToHalf(0.0002f)), 0.0f);
  // Under a scale: code = E4M3(x / scale), value = code * scale.
  EXPECT_EQ(StoredKvValue(KvCacheType::kFp8E4M3, FloatToHalf(0.6f), 2.0f), 0.625f);
}

TEST(KvCacheSupportTest, MirrorHoldsWhatTheCacheHolds) {
  KvMirror fp16, fp8;
  fp8.type = KvCacheType::kFp8E4M3;
  const std::vector<Half> k = {FloatToHalf(0.3f), FloatToHalf(-1000.0f)};
  const std::vector<Half> v = {FloatToHalf(1.0f), FloatToHalf(0.0002f)};
  fp16.Append(k, v);
  fp8.Append(k, v);
  EXPECT_EQ(fp16.k, (std::vector<float>{HalfToFloat(k[0]), HalfToFloat(k[1])}));
  EXPECT_EQ(fp8.k, (std::vector<float>{0.3125f, -448.0f}));
  EXPECT_EQ(fp8.v, (std::vector<float>{1.0f, 0.0f}));
}

TEST(KvCacheSupportTest, RefusalIsUnimplementedOrInvalidArgumentNamingTheType) {
  const KvCacheType fp8 = KvCacheType::kFp8E4M3;
  EXPECT_TRUE(IsKvCacheTypeRefusal(
      UnimplementedError("decode variant 'simple' does not read kv_cache_type = fp8_e4m3"), fp8));
  EXPECT_TRUE(IsKvCacheTypeRefusal(InvalidArgumentError("gemm with fp8_e4m3"), fp8));
  // Other codes, messages that do not name the type, OK, and an fp16 cache: not refusals.
  EXPECT_FALSE(IsKvCacheTypeRefusal(InternalError("fp8_e4m3 kernel faulted"), fp8));
  EXPECT_FALSE(IsKvCacheTypeRefusal(UnimplementedError("head_dim = 96"), fp8));
  EXPECT_FALSE(IsKvCacheTypeRefusal(Status::Ok(), fp8));
  EXPECT_FALSE(IsKvCacheTypeRefusal(UnimplementedError("does not read fp16"), KvCacheType::kFp16));
}

RuntimeOptions CpuOptions(KvCacheType type, const char* path) {
  RuntimeOptions o;
  o.device = DeviceKind::kCpu;
  o.decode_path = path;
  o.shape.num_layers = 1;
  o.shape.num_q_heads = 4;
  o.shape.num_kv_heads = 2;
  o.shape.head_dim = 64;
  o.shape.max_context = 64;
  o.shape.kv_cache_type = type;
  o.kv_cache_bytes = 1 << 20;
  return o;
}

// What attnrt-check sees from Runtime::Create: the GEMM path refuses an FP8 cache on every
// device (so on the CPU executor too), and that refusal is n/a; the same path with FP16 runs.
TEST(KvCacheSupportTest, RuntimeRefusalOfGemmWithFp8IsARefusal) {
  const auto refused = Runtime::Create(CpuOptions(KvCacheType::kFp8E4M3, "gemm"));
  ASSERT_FALSE(refused.ok());
  EXPECT_TRUE(IsKvCacheTypeRefusal(refused.status(), KvCacheType::kFp8E4M3))
      << refused.status().ToString();
  EXPECT_TRUE(Runtime::Create(CpuOptions(KvCacheType::kFp16, "gemm")).ok());
  EXPECT_TRUE(Runtime::Create(CpuOptions(KvCacheType::kFp8E4M3, "")).ok());
  // A bad shape with an FP8 cache is a failure, not n/a.
  RuntimeOptions bad = CpuOptions(KvCacheType::kFp8E4M3, "");
  bad.shape.head_dim = 0;
  const auto invalid = Runtime::Create(bad);
  ASSERT_FALSE(invalid.ok());
  EXPECT_FALSE(IsKvCacheTypeRefusal(invalid.status(), KvCacheType::kFp8E4M3))
      << invalid.status().ToString();
}

}  // namespace
}  // namespace attnrt::tools
