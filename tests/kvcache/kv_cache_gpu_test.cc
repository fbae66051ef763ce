// KvCache over device pools (cudaMalloc): token round trips, copy-on-write copies on the device,
// and capacity from free device memory. Skips (with the reason) where no CUDA device is present;
// one case checks the Unavailable answer on exactly those machines.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "api/internal/cuda_check.h"
#include "kvcache/kvcache.h"
#include "tests/support/random_fp16.h"

namespace attnrt::kvcache {
namespace {

using attnrt::testing::RandomNormalHalf;

constexpr int kAll = SequenceTable::kAllLayers;

ModelShape GpuShape() {
  ModelShape s;
  s.num_layers = 4;
  s.num_q_heads = 8;
  s.num_kv_heads = 2;
  s.head_dim = 128;
  s.block_size = 16;
  s.max_context = 512;
  return s;
}

bool SameBits(const Half* a, const Half* b, std::size_t n) {
  return std::memcmp(a, b, n * sizeof(Half)) == 0;
}

#define SKIP_WITHOUT_GPU()                                                                   \
  do {                                                                                       \
    if (!::attnrt::CudaDeviceAvailable()) GTEST_SKIP() << "no CUDA device: device pools untested"; \
  } while (0)

TEST(KvCacheGpuTest, WithoutADeviceDevicePoolsAreUnavailable) {
  if (CudaDeviceAvailable()) GTEST_SKIP() << "a CUDA device is present: this checks GPU-less machines";
  auto c = KvCache::Create(GpuShape(), 4, PoolKind::kDevice);
  EXPECT_EQ(c.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(c.status().message().find("CUDA device"), std::string::npos) << c.status().message();
  EXPECT_EQ(MakeDevicePoolMemory(1024).status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(BlocksForFreeDeviceMemory(GpuShape(), 0.5).status().code(), StatusCode::kUnavailable);
}

TEST(KvCacheGpuTest, DevicePoolsAreZeroedAndSizedFromTheShape) {
  SKIP_WITHOUT_GPU();
  auto c = KvCache::Create(GpuShape(), 9, PoolKind::kDevice);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  KvCache& cache = **c;
  EXPECT_TRUE(cache.pools().on_device());
  EXPECT_EQ(cache.kv_bytes(), 9 * BlockBytes(GpuShape()));
  cudaPointerAttributes attr{};
  ASSERT_EQ(cudaPointerGetAttributes(&attr, cache.k_data()), cudaSuccess);
  EXPECT_EQ(attr.type, cudaMemoryTypeDevice);
  std::vector<Half> host(cache.kv_bytes() / 2 / sizeof(Half), attnrt::testing::kHalfNaN);
  ASSERT_EQ(cudaMemcpy(host.data(), cache.v_data(), host.size() * sizeof(Half),
                       cudaMemcpyDeviceToHost),
            cudaSuccess);
  for (const Half& h : host) ASSERT_EQ(h.bits, 0);
}

TEST(KvCacheGpuTest, WriteReadAndCopyOnWriteOnTheDevice) {
  SKIP_WITHOUT_GPU();
  const ModelShape s = GpuShape();
  auto created = KvCache::Create(s, 16, PoolKind::kDevice);
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  KvCache& c = **created;
  const std::size_t tok = static_cast<std::size_t>(s.kv_token_elems());
  std::vector<BlockCopy> copies;

  // Parent: 40 tokens (two full blocks and half of a third), every layer.
  const int n = 40;
  ASSERT_TRUE(c.sequences().Create(1).ok());
  ASSERT_TRUE(c.sequences().Append(1, kAll, n, &copies).ok());
  std::vector<std::vector<Half>> pk, pv;
  for (int l = 0; l < s.num_layers; ++l) {
    pk.push_back(RandomNormalHalf((n + 1) * tok, 1000 + l));
    pv.push_back(RandomNormalHalf((n + 1) * tok, 2000 + l));
    ASSERT_TRUE(c.WriteTokens(1, l, 0, n, pk[l].data(), pv[l].data()).ok());
  }

  // Child forks and appends token 40 on every layer at once: the shared partial block is copied
  // on the device (all layers, K and V), then the new token is written into the copy.
  ASSERT_TRUE(c.sequences().Fork(1, 2).ok());
  auto token = c.sequences().AppendToken(2, kAll, &copies);
  ASSERT_TRUE(token.ok()) << token.status().ToString();
  ASSERT_EQ(copies.size(), 1u);
  ASSERT_TRUE(c.ApplyCopies(copies).ok());
  std::vector<std::vector<Half>> ck, cv;
  for (int l = 0; l < s.num_layers; ++l) {
    ck.push_back(RandomNormalHalf(tok, 3000 + l));
    cv.push_back(RandomNormalHalf(tok, 4000 + l));
    ASSERT_TRUE(c.WriteTokens(2, l, n, 1, ck[l].data(), cv[l].data()).ok());
  }
  // The parent appends its own token 40, in place.
  copies.clear();
  ASSERT_TRUE(c.sequences().AppendToken(1, kAll, &copies).ok());
  EXPECT_TRUE(copies.empty());
  for (int l = 0; l < s.num_layers; ++l) {
    ASSERT_TRUE(c.WriteTokens(1, l, n, 1, pk[l].data() + n * tok, pv[l].data() + n * tok).ok());
  }

  std::vector<Half> k(tok), v(tok);
  for (int l = 0; l < s.num_layers; ++l) {
    for (int p = 0; p <= n; ++p) {
      attnrt::testing::Poison(k);
      attnrt::testing::Poison(v);
      ASSERT_TRUE(c.ReadToken(1, l, p, k.data(), v.data()).ok());
      EXPECT_TRUE(SameBits(k.data(), pk[l].data() + p * tok, tok)) << "parent l " << l << " p " << p;
      EXPECT_TRUE(SameBits(v.data(), pv[l].data() + p * tok, tok)) << "parent l " << l << " p " << p;
      attnrt::testing::Poison(k);
      attnrt::testing::Poison(v);
      ASSERT_TRUE(c.ReadToken(2, l, p, k.data(), v.data()).ok());
      const Half* want_k = p < n ? pk[l].data() + p * tok : ck[l].data();
      const Half* want_v = p < n ? pv[l].data() + p * tok : cv[l].data();
      EXPECT_TRUE(SameBits(k.data(), want_k, tok)) << "child l " << l << " p " << p;
      EXPECT_TRUE(SameBits(v.data(), want_v, tok)) << "child l " << l << " p " << p;
    }
  }
}

TEST(KvCacheGpuTest, ApplyCopiesCopiesEveryLayerOnTheDevice) {
  SKIP_WITHOUT_GPU();
  const ModelShape s = GpuShape();
  constexpr int kBlocks = 5;
  auto created = KvCache::Create(s, kBlocks, PoolKind::kDevice);
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  KvCache& c = **created;
  const std::size_t pool_elems = c.kv_bytes() / 2 / sizeof(Half);
  const std::vector<Half> k0 = RandomNormalHalf(pool_elems, 11), v0 = RandomNormalHalf(pool_elems, 12);
  ASSERT_EQ(cudaMemcpy(c.k_data(), k0.data(), pool_elems * 2, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(c.v_data(), v0.data(), pool_elems * 2, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_TRUE(c.ApplyCopies(std::vector<BlockCopy>{{3, 0}, {1, 4}}).ok());
  std::vector<Half> k1(pool_elems), v1(pool_elems);
  ASSERT_EQ(cudaMemcpy(k1.data(), c.k_data(), pool_elems * 2, cudaMemcpyDeviceToHost), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(v1.data(), c.v_data(), pool_elems * 2, cudaMemcpyDeviceToHost), cudaSuccess);
  const std::size_t block = static_cast<std::size_t>(s.kv_token_elems()) * s.block_size;
  for (int l = 0; l < s.num_layers; ++l) {
    for (int b = 0; b < kBlocks; ++b) {
      const int from = b == 0 ? 3 : b == 4 ? 1 : b;
      const std::size_t dst = (static_cast<std::size_t>(l) * kBlocks + b) * block;
      const std::size_t src = (static_cast<std::size_t>(l) * kBlocks + from) * block;
      EXPECT_TRUE(SameBits(k1.data() + dst, k0.data() + src, block)) << "K l " << l << " b " << b;
      EXPECT_TRUE(SameBits(v1.data() + dst, v0.data() + src, block)) << "V l " << l << " b " << b;
    }
  }
  EXPECT_EQ(c.ApplyCopies(std::vector<BlockCopy>{{0, kBlocks}}).code(), StatusCode::kInvalidArgument);
}

TEST(KvCacheGpuTest, CapacityFromFreeDeviceMemory) {
  SKIP_WITHOUT_GPU();
  const ModelShape s = GpuShape();
  std::size_t free_bytes = 0, total_bytes = 0;
  ASSERT_EQ(cudaMemGetInfo(&free_bytes, &total_bytes), cudaSuccess);
  auto blocks = BlocksForFreeDeviceMemory(s, 0.01);
  ASSERT_TRUE(blocks.ok()) << blocks.status().ToString();
  const double expected = 0.01 * static_cast<double>(free_bytes) / BlockBytes(s);
  EXPECT_GT(*blocks, 0);
  EXPECT_NEAR(*blocks, expected, 0.01 * expected + 2);  // free memory moves a little
  auto cache = KvCache::Create(s, *blocks, PoolKind::kDevice);
  ASSERT_TRUE(cache.ok()) << cache.status().ToString();
  EXPECT_EQ((*cache)->kv_bytes(), static_cast<std::size_t>(*blocks) * BlockBytes(s));
}

}  // namespace
}  // namespace attnrt::kvcache
