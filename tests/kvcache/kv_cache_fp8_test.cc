// KvCache with an FP8 E4M3 cache type (ModelShape::kv_cache_type): one byte per element in the
// FP16 HND layout (capacity doubles for the same bytes), per-(K/V, layer, KV head) scales,
// WriteTokens quantising (saturating, nearest even), ReadToken dequantising, and block copies
// (copy-on-write after a fork) moving bytes, for every block size. The expected codes are
// computed here with the codec (api/internal/fp8_e4m3.h); the layout is written out by hand.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "api/internal/fp8_e4m3.h"
#include "kvcache/kvcache.h"
#include "tests/support/random_fp16.h"

namespace attnrt::kvcache {
namespace {

using attnrt::testing::RandomNormalHalf;

constexpr int kAll = SequenceTable::kAllLayers;

ModelShape Fp8Shape(int block_size = 16) {
  ModelShape s;
  s.num_layers = 3;
  s.num_q_heads = 4;
  s.num_kv_heads = 2;
  s.head_dim = 64;
  s.block_size = block_size;
  s.max_context = 256;
  s.kv_cache_type = KvCacheType::kFp8E4M3;
  return s;
}

// Distinct scales, so a scale read for the wrong (K/V, layer, head) shows.
std::vector<float> DistinctScales(const ModelShape& s) {
  std::vector<float> scales(2 * static_cast<std::size_t>(s.num_layers) * s.num_kv_heads);
  for (std::size_t i = 0; i < scales.size(); ++i) scales[i] = 0.25f + 0.125f * static_cast<float>(i);
  return scales;
}

// The documented layout in elements (= bytes for FP8), written out independently.
std::int64_t HndOffset(const ModelShape& s, int num_blocks, int layer, int block, int head,
                       int offset) {
  const std::int64_t page = static_cast<std::int64_t>(s.block_size) * s.head_dim;
  return ((static_cast<std::int64_t>(layer) * num_blocks + block) * s.num_kv_heads + head) * page +
         static_cast<std::int64_t>(offset) * s.head_dim;
}

std::unique_ptr<KvCache> MakeCache(const ModelShape& shape, int num_blocks) {
  auto c = KvCache::Create(shape, num_blocks, PoolKind::kHost);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return c.ok() ? std::move(c).value() : nullptr;
}

TEST(KvCacheFp8Test, BlocksTakeHalfTheBytesSoABudgetHoldsTwiceTheBlocks) {
  ModelShape fp16 = Fp8Shape();
  fp16.kv_cache_type = KvCacheType::kFp16;
  const ModelShape fp8 = Fp8Shape();
  EXPECT_EQ(BlockBytes(fp16), 2u * 3 * 2 * 16 * 64 * 2);
  EXPECT_EQ(BlockBytes(fp8), 2u * 3 * 2 * 16 * 64 * 1);
  EXPECT_EQ(fp16.kv_bytes_per_token(), 2 * 3 * 2 * 64 * 2);
  EXPECT_EQ(fp8.kv_bytes_per_token(), 2 * 3 * 2 * 64);
  for (std::size_t budget : {std::size_t{1} << 20, std::size_t{37} << 20, std::size_t{1} << 33}) {
    // Exactly twice, up to the half FP16 block a budget's remainder may hold.
    const std::int32_t fp16_blocks = BlocksForBudget(fp16, budget);
    EXPECT_EQ(BlocksForBudget(fp8, budget),
              2 * fp16_blocks + (budget % BlockBytes(fp16) >= BlockBytes(fp8) ? 1 : 0))
        << budget;
    EXPECT_EQ(BlocksForBudget(fp8, fp16_blocks * BlockBytes(fp16)), 2 * fp16_blocks) << budget;
  }
  auto c = MakeCache(fp8, 10);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->type(), KvCacheType::kFp8E4M3);
  EXPECT_EQ(c->element_bytes(), 1);
  EXPECT_EQ(c->kv_bytes(), 10 * BlockBytes(fp8));
  EXPECT_EQ(c->pools().bytes(), c->kv_bytes());
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(c->k_fp8()) % 64, 0u);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(c->v_fp8()) % 64, 0u);
  // Default scales: 1.0 for every (K/V, layer, head); an FP16 cache reports the same.
  ASSERT_EQ(c->kv_scales().size(), 12u);
  for (float s : c->kv_scales()) EXPECT_EQ(s, 1.0f);
  auto h = MakeCache(fp16, 10);
  ASSERT_NE(h, nullptr);
  EXPECT_EQ(h->element_bytes(), 2);
  EXPECT_EQ(h->kv_scales().size(), 12u);
}

TEST(KvCacheFp8Test, ExplicitScalesAreKeptInTheDocumentedOrder) {
  ModelShape s = Fp8Shape();
  s.kv_scales = DistinctScales(s);
  auto c = MakeCache(s, 4);
  ASSERT_NE(c, nullptr);
  ASSERT_EQ(c->kv_scales().size(), s.kv_scales.size());
  for (int kv = 0; kv < 2; ++kv) {
    for (int l = 0; l < s.num_layers; ++l) {
      for (int h = 0; h < s.num_kv_heads; ++h) {
        const std::size_t i = static_cast<std::size_t>((kv * s.num_layers + l) * s.num_kv_heads + h);
        EXPECT_EQ(s.kv_scale_index(kv == 1, l, h), static_cast<int>(i));
        EXPECT_EQ(c->kv_scale(kv == 1, l, h), s.kv_scales[i]);
        EXPECT_EQ(c->kv_scales()[i], s.kv_scales[i]);
      }
    }
  }
}

TEST(KvCacheFp8Test, CreateRejectsBadScalesNamingTheEntry) {
  struct Case {
    std::vector<float> scales;
    KvCacheType type;
    std::string text;
  };
  const ModelShape base = Fp8Shape();
  std::vector<float> good(12, 1.0f);
  auto with = [&](std::size_t i, float v) {
    std::vector<float> s = good;
    s[i] = v;
    return s;
  };
  const std::vector<Case> cases = {
      {std::vector<float>(11, 1.0f), KvCacheType::kFp8E4M3, "kv_scales has 11 values, expected 2 * num_layers * num_kv_heads = 12"},
      {std::vector<float>(13, 1.0f), KvCacheType::kFp8E4M3, "kv_scales has 13 values"},
      {with(5, -1.0f), KvCacheType::kFp8E4M3, "ModelShape.kv_scales[5] = -1"},
      {with(0, 0.0f), KvCacheType::kFp8E4M3, "ModelShape.kv_scales[0] = 0"},
      {with(11, std::numeric_limits<float>::quiet_NaN()), KvCacheType::kFp8E4M3, "kv_scales[11] = nan"},
      {with(7, std::numeric_limits<float>::infinity()), KvCacheType::kFp8E4M3, "kv_scales[7] = inf"},
      {with(3, 1e37f), KvCacheType::kFp8E4M3, "kv_scales[3] = 1e+37"},  // 448 * scale overflows
      {with(2, -0.0f), KvCacheType::kFp8E4M3, "kv_scales[2] = -0"},
      {good, KvCacheType::kFp16, "kv_cache_type = fp16 takes none"},
      {{}, static_cast<KvCacheType>(7), "kv_cache_type = 7"},
  };
  for (const Case& t : cases) {
    ModelShape s = base;
    s.kv_scales = t.scales;
    s.kv_cache_type = t.type;
    auto c = KvCache::Create(s, 4, PoolKind::kHost);
    EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument) << t.text;
    EXPECT_NE(c.status().message().find(t.text), std::string::npos)
        << c.status().message() << " lacks " << t.text;
  }
  ModelShape tiny = base;
  tiny.kv_scales = with(4, 1e-30f);  // tiny but valid: values saturate at 448 * scale
  EXPECT_TRUE(KvCache::Create(tiny, 4, PoolKind::kHost).ok());
}

// Every block size: prefill writes (quantised with each head's scale, at the documented byte
// offsets), reads back dequantised, then a fork + copy-on-write moves bytes.
class KvCacheFp8BlockSizeTest : public ::testing::TestWithParam<int> {};

TEST_P(KvCacheFp8BlockSizeTest, WritesQuantiseReadsDequantiseAndForksCopyBytes) {
  ModelShape s = Fp8Shape(GetParam());
  s.kv_scales = DistinctScales(s);
  constexpr int kBlocks = 40;
  auto c = MakeCache(s, kBlocks);
  ASSERT_NE(c, nullptr);
  std::vector<BlockCopy> copies;
  ASSERT_TRUE(c->sequences().Create(9).ok());  // so that sequence 1's blocks are not 0, 1, ...
  ASSERT_TRUE(c->sequences().Append(9, kAll, 3, &copies).ok());
  ASSERT_TRUE(c->sequences().Create(1).ok());
  const int n = s.block_size * 2 + 3;  // a partial last block
  ASSERT_TRUE(c->sequences().Append(1, kAll, n, &copies).ok());
  ASSERT_TRUE(copies.empty());

  const std::size_t tok = static_cast<std::size_t>(s.kv_token_elems());
  std::vector<std::vector<Half>> k(s.num_layers), v(s.num_layers);
  for (int l = 0; l < s.num_layers; ++l) {
    // Wide enough that some values saturate at 448 * scale (scales 0.25 .. 1.625).
    k[l] = RandomNormalHalf(n * tok, 50 + l, 60.0f);
    v[l] = RandomNormalHalf(n * tok, 70 + l, 2.0f);
    // Two writes, the second starting mid-block.
    ASSERT_TRUE(c->WriteTokens(1, l, 0, 5, k[l].data(), v[l].data()).ok());
    ASSERT_TRUE(c->WriteTokens(1, l, 5, n - 5, k[l].data() + 5 * tok, v[l].data() + 5 * tok).ok());
  }
  const std::vector<BlockId> table(c->sequences().Blocks(1)->begin(),
                                   c->sequences().Blocks(1)->end());
  int saturated = 0;
  std::vector<std::uint8_t> kb(tok), vb(tok);
  std::vector<Half> kh(tok), vh(tok);
  for (int l = 0; l < s.num_layers; ++l) {
    for (int p = 0; p < n; ++p) {
      ASSERT_TRUE(c->ReadTokenBytes(1, l, p, kb.data(), vb.data()).ok());
      ASSERT_TRUE(c->ReadToken(1, l, p, kh.data(), vh.data()).ok());
      for (int h = 0; h < s.num_kv_heads; ++h) {
        const float ks = s.kv_scales[s.kv_scale_index(false, l, h)];
        const float vs = s.kv_scales[s.kv_scale_index(true, l, h)];
        const std::int64_t at = HndOffset(s, kBlocks, l, table[p / s.block_size], h, p % s.block_size);
        for (int d = 0; d < s.head_dim; ++d) {
          const std::size_t in = (static_cast<std::size_t>(p) * s.num_kv_heads + h) * s.head_dim + d;
          const std::size_t row = static_cast<std::size_t>(h) * s.head_dim + d;
          const std::uint8_t kc = QuantizeE4M3(HalfToFloat(k[l][in]), ks);
          const std::uint8_t vc = QuantizeE4M3(HalfToFloat(v[l][in]), vs);
          ASSERT_EQ(c->k_fp8()[at + d], kc) << "l " << l << " p " << p << " h " << h << " d " << d;
          ASSERT_EQ(c->v_fp8()[at + d], vc) << "l " << l << " p " << p << " h " << h << " d " << d;
          ASSERT_EQ(kb[row], kc);
          ASSERT_EQ(vb[row], vc);
          ASSERT_EQ(kh[row].bits, FloatToHalf(DecodeE4M3(kc) * ks).bits);
          ASSERT_EQ(vh[row].bits, FloatToHalf(DecodeE4M3(vc) * vs).bits);
          saturated += (kc & 0x7f) == 0x7e;
        }
      }
    }
  }
  EXPECT_GT(saturated, 0) << "the test means to cover saturation";

  // Fork, then the child's next token goes into a copy of the shared last block.
  ASSERT_TRUE(c->sequences().Fork(1, 2).ok());
  std::vector<std::vector<Half>> ck(s.num_layers);
  for (int l = 0; l < s.num_layers; ++l) {
    copies.clear();
    auto token = c->sequences().AppendToken(2, l, &copies);
    ASSERT_TRUE(token.ok()) << token.status().ToString();
    if (l == 0) {
      ASSERT_EQ(copies.size(), 1u);
      ASSERT_TRUE(c->ApplyCopies(copies).ok());
      // The copy moved every layer's K and V bytes of the block.
      for (int ll = 0; ll < s.num_layers; ++ll) {
        for (int h = 0; h < s.num_kv_heads; ++h) {
          const std::int64_t src = HndOffset(s, kBlocks, ll, copies[0].src, h, 0);
          const std::int64_t dst = HndOffset(s, kBlocks, ll, copies[0].dst, h, 0);
          const std::size_t page = static_cast<std::size_t>(s.block_size) * s.head_dim;
          ASSERT_EQ(std::memcmp(c->k_fp8() + dst, c->k_fp8() + src, page), 0) << ll;
          ASSERT_EQ(std::memcmp(c->v_fp8() + dst, c->v_fp8() + src, page), 0) << ll;
        }
      }
    } else {
      ASSERT_TRUE(copies.empty());
    }
    ck[l] = RandomNormalHalf(tok, 90 + l);
    ASSERT_TRUE(c->WriteTokens(2, l, token->position, 1, ck[l].data(), ck[l].data()).ok());
  }
  // The parent's bytes are untouched; the child reads the parent's prefix and its own token.
  for (int l = 0; l < s.num_layers; ++l) {
    for (int p = 0; p <= n; ++p) {
      std::vector<std::uint8_t> pk(tok), pv(tok), qk(tok), qv(tok);
      ASSERT_TRUE(c->ReadTokenBytes(2, l, p, qk.data(), qv.data()).ok());
      if (p < n) {
        ASSERT_TRUE(c->ReadTokenBytes(1, l, p, pk.data(), pv.data()).ok());
        EXPECT_EQ(pk, qk) << "l " << l << " p " << p;
        EXPECT_EQ(pv, qv) << "l " << l << " p " << p;
        for (std::size_t i = 0; i < tok; ++i) {
          const int h = static_cast<int>(i / s.head_dim);
          const std::size_t in = static_cast<std::size_t>(p) * tok + i;
          ASSERT_EQ(pk[i], QuantizeE4M3(HalfToFloat(k[l][in]), s.kv_scales[s.kv_scale_index(false, l, h)]));
        }
      } else {
        for (std::size_t i = 0; i < tok; ++i) {
          const int h = static_cast<int>(i / s.head_dim);
          ASSERT_EQ(qk[i], QuantizeE4M3(HalfToFloat(ck[l][i]), s.kv_scales[s.kv_scale_index(false, l, h)]));
          ASSERT_EQ(qv[i], QuantizeE4M3(HalfToFloat(ck[l][i]), s.kv_scales[s.kv_scale_index(true, l, h)]));
        }
      }
    }
    EXPECT_EQ(*c->sequences().Length(1, l), n);
  }
}

INSTANTIATE_TEST_SUITE_P(BlockSizes, KvCacheFp8BlockSizeTest, ::testing::Values(8, 16, 32, 64),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return "bs" + std::to_string(info.param);
                         });

TEST(KvCacheFp8Test, ReadTokenRefusesNullAndOutOfRangeLikeFp16) {
  auto c = MakeCache(Fp8Shape(), 4);
  ASSERT_NE(c, nullptr);
  std::vector<BlockCopy> copies;
  ASSERT_TRUE(c->sequences().Create(1).ok());
  ASSERT_TRUE(c->sequences().Append(1, kAll, 3, &copies).ok());
  std::vector<Half> out(128);
  EXPECT_EQ(c->ReadToken(1, 0, 0, out.data(), nullptr).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(c->ReadToken(1, 0, 3, out.data(), out.data()).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(c->ReadToken(5, 0, 0, out.data(), out.data()).code(), StatusCode::kNotFound);
  EXPECT_EQ(c->ReadTokenBytes(1, 0, 0, nullptr, out.data()).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace attnrt::kvcache
