// KvCache over host pools: creation checks, pool sizing and alignment, the HND layout (checked
// against the formula written out here, not through the library's own offset helper),
// WriteTokens/ReadToken round trips, ApplyCopies copying every layer's K and V of a block, fork +
// copy-on-write end to end, and errors leaving the pools untouched.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "kvcache/kvcache.h"
#include "tests/support/random_fp16.h"

namespace attnrt::kvcache {
namespace {

using attnrt::testing::RandomNormalHalf;

constexpr int kAll = SequenceTable::kAllLayers;

ModelShape TestShape() {
  ModelShape s;
  s.num_layers = 3;
  s.num_q_heads = 4;
  s.num_kv_heads = 2;
  s.head_dim = 64;
  s.block_size = 16;
  s.max_context = 256;
  return s;
}

// The documented layout, written out independently of KvCache::TokenOffset.
std::int64_t HndOffset(const ModelShape& s, int num_blocks, int layer, int block, int head,
                       int offset, int d) {
  const std::int64_t layer_elems =
      static_cast<std::int64_t>(num_blocks) * s.num_kv_heads * s.block_size * s.head_dim;
  const std::int64_t block_elems = static_cast<std::int64_t>(s.num_kv_heads) * s.block_size * s.head_dim;
  const std::int64_t head_elems = static_cast<std::int64_t>(s.block_size) * s.head_dim;
  return layer * layer_elems + block * block_elems + head * head_elems +
         static_cast<std::int64_t>(offset) * s.head_dim + d;
}

bool SameBits(const Half* a, const Half* b, std::size_t n) {
  return std::memcmp(a, b, n * sizeof(Half)) == 0;
}

std::vector<Half> PoolCopy(KvCache& c, bool v) {
  const std::size_t n = c.kv_bytes() / 2 / sizeof(Half);
  const Half* p = v ? c.v_data() : c.k_data();
  return std::vector<Half>(p, p + n);
}

std::unique_ptr<KvCache> MakeCache(int num_blocks, ModelShape shape = TestShape()) {
  auto c = KvCache::Create(shape, num_blocks, PoolKind::kHost);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return c.ok() ? std::move(c).value() : nullptr;
}

TEST(KvCacheTest, CreateRejectsBadShapesAndBlockCounts) {
  ModelShape bad = TestShape();
  bad.head_dim = 96;
  auto a = KvCache::Create(bad, 8, PoolKind::kHost);
  EXPECT_EQ(a.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(a.status().message().find("head_dim = 96"), std::string::npos);
  ModelShape huge = TestShape();
  huge.num_layers = 1 << 20;
  huge.num_kv_heads = 1 << 10;
  huge.num_q_heads = 1 << 10;
  // 2^41 bytes per block and pool: 2^30 blocks overflow the 2^62-byte pool limit. (No case
  // asks malloc for an impossible size: sanitizer builds abort on that instead of returning null.)
  auto h = KvCache::Create(huge, 1 << 30, PoolKind::kHost);
  EXPECT_EQ(h.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(h.status().message().find("pool limit"), std::string::npos) << h.status().message();
  for (int n : {0, -3}) {
    auto b = KvCache::Create(TestShape(), n, PoolKind::kHost);
    EXPECT_EQ(b.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(b.status().message().find("num_blocks = " + std::to_string(n)), std::string::npos);
  }
}

TEST(KvCacheTest, PoolsAreSizedFromTheShapeAndAligned) {
  const ModelShape s = TestShape();
  auto c = MakeCache(10);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(BlockBytes(s), 2u * 3 * 2 * 16 * 64 * sizeof(Half));
  EXPECT_EQ(c->kv_bytes(), 10 * BlockBytes(s));
  EXPECT_EQ(c->pools().bytes(), c->kv_bytes());
  EXPECT_FALSE(c->pools().on_device());
  EXPECT_EQ(c->num_blocks(), 10);
  EXPECT_EQ(c->allocator().num_free(), 10);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(c->k_data()) % 64, 0u);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(c->v_data()) % 64, 0u);
  EXPECT_GT(c->MetadataBytes(), 0u);
}

TEST(KvCacheTest, CapacityFromAByteBudget) {
  const ModelShape s = TestShape();
  const std::size_t bb = BlockBytes(s);
  EXPECT_EQ(BlocksForBudget(s, 0), 0);
  EXPECT_EQ(BlocksForBudget(s, bb - 1), 0);
  EXPECT_EQ(BlocksForBudget(s, 10 * bb + bb - 1), 10);
  EXPECT_EQ(BlocksForBudget(s, std::size_t{1} << 40),
            static_cast<std::int32_t>((std::size_t{1} << 40) / bb));
  // More blocks than an int32 block id can name: clamped.
  EXPECT_EQ(BlocksForBudget(s, std::size_t{1} << 60), std::numeric_limits<std::int32_t>::max());
  ModelShape zero = s;
  zero.num_layers = 0;
  EXPECT_EQ(BlockBytes(zero), 0u);
  EXPECT_EQ(BlocksForBudget(zero, 1 << 20), 0);
  EXPECT_EQ(BlocksForFreeDeviceMemory(s, 0.0).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(BlocksForFreeDeviceMemory(s, 1.5).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(MakeHostPoolMemory(0).status().code(), StatusCode::kInvalidArgument);
}

TEST(KvCacheTest, WriteThenReadRoundTripsEveryTokenAndLayer) {
  const ModelShape s = TestShape();
  auto c = MakeCache(12);
  ASSERT_NE(c, nullptr);
  std::vector<BlockCopy> copies;
  ASSERT_TRUE(c->sequences().Create(1).ok());
  ASSERT_TRUE(c->sequences().Create(2).ok());
  const int n1 = 37, n2 = 20;  // partial last blocks; the sequences' blocks interleave
  ASSERT_TRUE(c->sequences().Append(1, kAll, 10, &copies).ok());
  ASSERT_TRUE(c->sequences().Append(2, kAll, n2, &copies).ok());
  ASSERT_TRUE(c->sequences().Append(1, kAll, n1 - 10, &copies).ok());
  ASSERT_TRUE(copies.empty());

  const std::size_t tok = static_cast<std::size_t>(s.kv_token_elems());
  std::vector<std::vector<Half>> k1, v1, k2, v2;
  for (int l = 0; l < s.num_layers; ++l) {
    k1.push_back(RandomNormalHalf(n1 * tok, 100 + l));
    v1.push_back(RandomNormalHalf(n1 * tok, 200 + l));
    k2.push_back(RandomNormalHalf(n2 * tok, 300 + l));
    v2.push_back(RandomNormalHalf(n2 * tok, 400 + l));
    // Sequence 1 in two writes, the second starting mid-block.
    ASSERT_TRUE(c->WriteTokens(1, l, 0, 21, k1[l].data(), v1[l].data()).ok());
    ASSERT_TRUE(
        c->WriteTokens(1, l, 21, n1 - 21, k1[l].data() + 21 * tok, v1[l].data() + 21 * tok).ok());
    ASSERT_TRUE(c->WriteTokens(2, l, 0, n2, k2[l].data(), v2[l].data()).ok());
  }
  std::vector<Half> k(tok), v(tok);
  for (int l = 0; l < s.num_layers; ++l) {
    for (int p = 0; p < n1; ++p) {
      attnrt::testing::Poison(k);
      attnrt::testing::Poison(v);
      ASSERT_TRUE(c->ReadToken(1, l, p, k.data(), v.data()).ok());
      ASSERT_TRUE(SameBits(k.data(), k1[l].data() + p * tok, tok)) << "layer " << l << " pos " << p;
      ASSERT_TRUE(SameBits(v.data(), v1[l].data() + p * tok, tok)) << "layer " << l << " pos " << p;
    }
    for (int p = 0; p < n2; ++p) {
      ASSERT_TRUE(c->ReadToken(2, l, p, k.data(), v.data()).ok());
      ASSERT_TRUE(SameBits(k.data(), k2[l].data() + p * tok, tok)) << "layer " << l << " pos " << p;
      ASSERT_TRUE(SameBits(v.data(), v2[l].data() + p * tok, tok)) << "layer " << l << " pos " << p;
    }
  }
}

TEST(KvCacheTest, LayoutMatchesTheDocumentedHndFormula) {
  const ModelShape s = TestShape();
  constexpr int kBlocks = 7;
  auto c = MakeCache(kBlocks);
  ASSERT_NE(c, nullptr);
  std::vector<BlockCopy> copies;
  // Take a few blocks first so that the sequence's blocks are not 0, 1, 2.
  ASSERT_TRUE(c->sequences().Create(9).ok());
  ASSERT_TRUE(c->sequences().Append(9, kAll, 40, &copies).ok());
  ASSERT_TRUE(c->sequences().Create(1).ok());
  const int n = 30;
  ASSERT_TRUE(c->sequences().Append(1, kAll, n, &copies).ok());
  ASSERT_TRUE(c->sequences().Free(9).ok());
  const std::vector<BlockId> table(c->sequences().Blocks(1)->begin(),
                                   c->sequences().Blocks(1)->end());
  ASSERT_EQ(table.size(), 2u);
  EXPECT_NE(table[0], 0);

  const std::size_t tok = static_cast<std::size_t>(s.kv_token_elems());
  for (int l = 0; l < s.num_layers; ++l) {
    const std::vector<Half> k = RandomNormalHalf(n * tok, 10 + l);
    const std::vector<Half> v = RandomNormalHalf(n * tok, 20 + l);
    ASSERT_TRUE(c->WriteTokens(1, l, 0, n, k.data(), v.data()).ok());
    for (int p = 0; p < n; ++p) {
      const int block = table[p / s.block_size];
      for (int h = 0; h < s.num_kv_heads; ++h) {
        EXPECT_EQ(c->TokenOffset(l, block, h, p % s.block_size),
                  HndOffset(s, kBlocks, l, block, h, p % s.block_size, 0));
        for (int d = 0; d < s.head_dim; ++d) {
          const std::int64_t at = HndOffset(s, kBlocks, l, block, h, p % s.block_size, d);
          const std::size_t in = (p * s.num_kv_heads + h) * s.head_dim + d;  // [n][Hkv][D]
          ASSERT_EQ(c->k_data()[at].bits, k[in].bits) << "l " << l << " p " << p << " h " << h;
          ASSERT_EQ(c->v_data()[at].bits, v[in].bits) << "l " << l << " p " << p << " h " << h;
        }
      }
    }
  }
}

// Whole blocks with consecutive ids are written as one range: a table with a run of such blocks
// and a break in it, written in pieces that start and end mid-block and in one piece, lands
// token by token where the documented layout says, and the other sequence's blocks keep theirs.
TEST(KvCacheTest, WritesAcrossRunsOfConsecutiveBlocksMatchTheLayout) {
  ModelShape s = TestShape();
  s.num_q_heads = 6;
  s.num_kv_heads = 3;  // rows of three heads interleave in the input
  s.max_context = 512;
  constexpr int kBlocks = 16;
  auto c = MakeCache(kBlocks, s);
  ASSERT_NE(c, nullptr);
  std::vector<BlockCopy> copies;
  // Sequence 1 takes blocks, sequence 2 one between them, then sequence 1 more: its table has
  // a run of consecutive ids and a break.
  ASSERT_TRUE(c->sequences().Create(1).ok());
  ASSERT_TRUE(c->sequences().Create(2).ok());
  ASSERT_TRUE(c->sequences().Append(1, kAll, 3 * s.block_size, &copies).ok());
  ASSERT_TRUE(c->sequences().Append(2, kAll, 5, &copies).ok());
  const int n = 11 * s.block_size + 5;  // grows into sequence 2's block and past it
  ASSERT_TRUE(c->sequences().Append(1, kAll, n - 3 * s.block_size, &copies).ok());
  ASSERT_TRUE(copies.empty());
  const std::vector<BlockId> table(c->sequences().Blocks(1)->begin(),
                                   c->sequences().Blocks(1)->end());
  int consecutive = 0, breaks = 0;
  for (std::size_t j = 1; j < table.size(); ++j) {
    (table[j] == table[j - 1] + 1 ? consecutive : breaks) += 1;
  }
  ASSERT_GE(consecutive, 2) << "the allocator placed no run of blocks: the test covers nothing";
  ASSERT_GE(breaks, 1) << "the table has no break: the test covers one run only";
  ASSERT_EQ(table.size(), 12u);

  const std::size_t tok = static_cast<std::size_t>(s.kv_token_elems());
  const std::vector<Half> k2 = RandomNormalHalf(5 * tok, 90);
  const std::vector<Half> v2 = RandomNormalHalf(5 * tok, 91);
  for (int l = 0; l < s.num_layers; ++l) {
    ASSERT_TRUE(c->WriteTokens(2, l, 0, 5, k2.data(), v2.data()).ok());
  }
  const std::vector<Half> k2_pool = PoolCopy(*c, false);
  const std::vector<Half> v2_pool = PoolCopy(*c, true);
  const BlockId block2 = (*c->sequences().Blocks(2))[0];
  for (int pieces : {1, 3}) {
    for (int l = 0; l < s.num_layers; ++l) {
      const std::vector<Half> k = RandomNormalHalf(n * tok, 10 * pieces + l);
      const std::vector<Half> v = RandomNormalHalf(n * tok, 20 * pieces + l);
      // One write, or three: [0, 9), [9, 2 bs + 3), [2 bs + 3, n): starts and ends mid-block.
      const std::vector<int> cuts =
          pieces == 1 ? std::vector<int>{0, n} : std::vector<int>{0, 9, 2 * s.block_size + 3, n};
      for (std::size_t i = 0; i + 1 < cuts.size(); ++i) {
        ASSERT_TRUE(c->WriteTokens(1, l, cuts[i], cuts[i + 1] - cuts[i], k.data() + cuts[i] * tok,
                                   v.data() + cuts[i] * tok)
                        .ok());
      }
      for (int p = 0; p < n; ++p) {
        const int block = table[static_cast<std::size_t>(p / s.block_size)];
        for (int h = 0; h < s.num_kv_heads; ++h) {
          for (int d = 0; d < s.head_dim; ++d) {
            const std::int64_t at = HndOffset(s, kBlocks, l, block, h, p % s.block_size, d);
            const std::size_t in = (p * s.num_kv_heads + h) * s.head_dim + d;
            ASSERT_EQ(c->k_data()[at].bits, k[in].bits) << "l " << l << " p " << p << " h " << h;
            ASSERT_EQ(c->v_data()[at].bits, v[in].bits) << "l " << l << " p " << p << " h " << h;
          }
        }
      }
    }
    // Sequence 2's block, between sequence 1's, is as it was.
    for (int l = 0; l < s.num_layers; ++l) {
      const std::int64_t at = HndOffset(s, kBlocks, l, block2, 0, 0, 0);
      const std::size_t elems = static_cast<std::size_t>(s.num_kv_heads) * s.block_size * s.head_dim;
      ASSERT_TRUE(SameBits(c->k_data() + at, k2_pool.data() + at, elems)) << "layer " << l;
      ASSERT_TRUE(SameBits(c->v_data() + at, v2_pool.data() + at, elems)) << "layer " << l;
    }
  }
}

TEST(KvCacheTest, ApplyCopiesCopiesEveryLayersKAndVOfABlock) {
  const ModelShape s = TestShape();
  constexpr int kBlocks = 6;
  auto c = MakeCache(kBlocks);
  ASSERT_NE(c, nullptr);
  const std::size_t pool_elems = c->kv_bytes() / 2 / sizeof(Half);
  const std::vector<Half> k0 = RandomNormalHalf(pool_elems, 5);
  const std::vector<Half> v0 = RandomNormalHalf(pool_elems, 6);
  std::memcpy(c->k_data(), k0.data(), pool_elems * sizeof(Half));
  std::memcpy(c->v_data(), v0.data(), pool_elems * sizeof(Half));

  const std::vector<BlockCopy> copies = {{4, 1}, {2, 5}};
  ASSERT_TRUE(c->ApplyCopies(copies).ok());
  const std::int64_t block_elems = static_cast<std::int64_t>(s.kv_token_elems()) * s.block_size;
  for (int l = 0; l < s.num_layers; ++l) {
    for (int b = 0; b < kBlocks; ++b) {
      const int from = b == 1 ? 4 : b == 5 ? 2 : b;  // what block b must hold now
      const std::int64_t dst = HndOffset(s, kBlocks, l, b, 0, 0, 0);
      const std::int64_t src = HndOffset(s, kBlocks, l, from, 0, 0, 0);
      EXPECT_TRUE(SameBits(c->k_data() + dst, k0.data() + src, block_elems)) << "K l " << l << " b " << b;
      EXPECT_TRUE(SameBits(c->v_data() + dst, v0.data() + src, block_elems)) << "V l " << l << " b " << b;
    }
  }
}

TEST(KvCacheTest, ApplyCopiesRejectsBadBlocksBeforeCopyingAnything) {
  auto c = MakeCache(4);
  ASSERT_NE(c, nullptr);
  const std::size_t pool_elems = c->kv_bytes() / 2 / sizeof(Half);
  const std::vector<Half> k0 = RandomNormalHalf(pool_elems, 7);
  std::memcpy(c->k_data(), k0.data(), pool_elems * sizeof(Half));
  const std::vector<Half> v_before = PoolCopy(*c, true);
  for (const std::vector<BlockCopy>& bad :
       {std::vector<BlockCopy>{{0, 1}, {2, 4}}, std::vector<BlockCopy>{{0, 1}, {-1, 2}},
        std::vector<BlockCopy>{{3, 3}}}) {
    Status s = c->ApplyCopies(bad);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
    EXPECT_NE(s.message().find("copies["), std::string::npos) << s.message();
    EXPECT_TRUE(SameBits(c->k_data(), k0.data(), pool_elems));
    EXPECT_EQ(PoolCopy(*c, true).size(), v_before.size());
    EXPECT_TRUE(SameBits(PoolCopy(*c, true).data(), v_before.data(), pool_elems));
  }
  EXPECT_TRUE(c->ApplyCopies({}).ok());
}

// Fork + copy-on-write through the whole cache: the parent's data survives the child's writes,
// the child sees the parent's prefix and its own token, and each sees its own token 12.
TEST(KvCacheTest, ForkCopyOnWriteKeepsEachSequencesData) {
  const ModelShape s = TestShape();
  auto c = MakeCache(8);
  ASSERT_NE(c, nullptr);
  const std::size_t tok = static_cast<std::size_t>(s.kv_token_elems());
  std::vector<BlockCopy> copies;
  ASSERT_TRUE(c->sequences().Create(1).ok());
  ASSERT_TRUE(c->sequences().Append(1, kAll, 12, &copies).ok());
  std::vector<std::vector<Half>> pk, pv;
  for (int l = 0; l < s.num_layers; ++l) {
    pk.push_back(RandomNormalHalf(13 * tok, 50 + l));
    pv.push_back(RandomNormalHalf(13 * tok, 60 + l));
    ASSERT_TRUE(c->WriteTokens(1, l, 0, 12, pk[l].data(), pv[l].data()).ok());
  }
  ASSERT_TRUE(c->sequences().Fork(1, 2).ok());

  // Writing into the shared block in place is refused.
  Status shared = c->WriteTokens(2, 0, 11, 1, pk[0].data(), pv[0].data());
  EXPECT_EQ(shared.code(), StatusCode::kFailedPrecondition) << shared.ToString();
  EXPECT_NE(shared.message().find("2 references"), std::string::npos) << shared.message();

  // The child decodes token 12 on every layer, one layer at a time.
  std::vector<std::vector<Half>> ck, cv;
  for (int l = 0; l < s.num_layers; ++l) {
    copies.clear();
    auto token = c->sequences().AppendToken(2, l, &copies);
    ASSERT_TRUE(token.ok()) << token.status().ToString();
    EXPECT_EQ(copies.size(), l == 0 ? 1u : 0u);  // the first write copies the block, all layers
    ASSERT_TRUE(c->ApplyCopies(copies).ok());
    ck.push_back(RandomNormalHalf(tok, 70 + l));
    cv.push_back(RandomNormalHalf(tok, 80 + l));
    ASSERT_TRUE(c->WriteTokens(2, l, token->position, 1, ck[l].data(), cv[l].data()).ok());
  }
  // Then the parent decodes its own token 12, in place.
  for (int l = 0; l < s.num_layers; ++l) {
    copies.clear();
    auto token = c->sequences().AppendToken(1, l, &copies);
    ASSERT_TRUE(token.ok());
    EXPECT_TRUE(copies.empty());
    ASSERT_TRUE(
        c->WriteTokens(1, l, token->position, 1, pk[l].data() + 12 * tok, pv[l].data() + 12 * tok).ok());
  }

  std::vector<Half> k(tok), v(tok);
  for (int l = 0; l < s.num_layers; ++l) {
    for (int p = 0; p < 13; ++p) {
      ASSERT_TRUE(c->ReadToken(1, l, p, k.data(), v.data()).ok());
      EXPECT_TRUE(SameBits(k.data(), pk[l].data() + p * tok, tok)) << "parent l " << l << " p " << p;
      EXPECT_TRUE(SameBits(v.data(), pv[l].data() + p * tok, tok)) << "parent l " << l << " p " << p;
      ASSERT_TRUE(c->ReadToken(2, l, p, k.data(), v.data()).ok());
      const Half* want_k = p < 12 ? pk[l].data() + p * tok : ck[l].data();
      const Half* want_v = p < 12 ? pv[l].data() + p * tok : cv[l].data();
      EXPECT_TRUE(SameBits(k.data(), want_k, tok)) << "child l " << l << " p " << p;
      EXPECT_TRUE(SameBits(v.data(), want_v, tok)) << "child l " << l << " p " << p;
    }
  }
}

TEST(KvCacheTest, WriteAndReadErrorsNameTheFieldAndLeaveThePoolsAlone) {
  const ModelShape s = TestShape();
  auto c = MakeCache(4);
  ASSERT_NE(c, nullptr);
  std::vector<BlockCopy> copies;
  ASSERT_TRUE(c->sequences().Create(1).ok());
  ASSERT_TRUE(c->sequences().Append(1, kAll, 10, &copies).ok());
  ASSERT_TRUE(c->sequences().Append(1, 0, 5, &copies).ok());  // layer 0 at 15, others at 10
  const std::vector<Half> data = RandomNormalHalf(20 * s.kv_token_elems(), 3);
  const std::vector<Half> k_before = PoolCopy(*c, false), v_before = PoolCopy(*c, true);
  struct Case {
    Status status;
    StatusCode code;
    std::string text;
  };
  std::vector<Half> out(s.kv_token_elems());
  const Case cases[] = {
      {c->WriteTokens(1, 1, 5, 6, data.data(), data.data()), StatusCode::kInvalidArgument,
       "positions [5, 11) go past its length 10"},
      {c->WriteTokens(1, 0, 0, 16, data.data(), data.data()), StatusCode::kInvalidArgument,
       "length 15"},
      {c->WriteTokens(7, 0, 0, 1, data.data(), data.data()), StatusCode::kNotFound, "sequence 7"},
      {c->WriteTokens(1, 3, 0, 1, data.data(), data.data()), StatusCode::kInvalidArgument,
       "layer = 3"},
      {c->WriteTokens(1, kAll, 0, 1, data.data(), data.data()), StatusCode::kInvalidArgument,
       "layer = -1"},
      {c->WriteTokens(1, 0, -1, 1, data.data(), data.data()), StatusCode::kInvalidArgument,
       "start = -1"},
      {c->WriteTokens(1, 0, 0, 0, data.data(), data.data()), StatusCode::kInvalidArgument, "n = 0"},
      {c->WriteTokens(1, 0, 0, 1, nullptr, data.data()), StatusCode::kInvalidArgument, "k is null"},
      {c->ReadToken(1, 1, 10, out.data(), out.data()), StatusCode::kInvalidArgument,
       "position = 10 is out of range [0, 10)"},
      {c->ReadToken(1, 0, -1, out.data(), out.data()), StatusCode::kInvalidArgument,
       "position = -1"},
      {c->ReadToken(8, 0, 0, out.data(), out.data()), StatusCode::kNotFound, "sequence 8"},
      {c->ReadToken(1, 0, 0, out.data(), nullptr), StatusCode::kInvalidArgument, "v is null"},
  };
  for (const Case& t : cases) {
    EXPECT_EQ(t.status.code(), t.code) << t.status.ToString();
    EXPECT_NE(t.status.message().find(t.text), std::string::npos)
        << t.status.message() << " lacks " << t.text;
  }
  EXPECT_TRUE(SameBits(PoolCopy(*c, false).data(), k_before.data(), k_before.size()));
  EXPECT_TRUE(SameBits(PoolCopy(*c, true).data(), v_before.data(), v_before.size()));
  EXPECT_EQ(*c->sequences().Length(1, 0), 15);
}

TEST(KvCacheTest, PoolRowCopiesRefuseToLeaveThePool) {
  auto pools = MakeHostPoolMemory(1024);
  ASSERT_TRUE(pools.ok());
  PoolMemory& p = **pools;
  std::vector<Half> host(1024);
  EXPECT_TRUE(p.CopyRowsToPool(p.k(), 128, host.data(), 128, 128, 8).ok());  // exactly 1024 B
  EXPECT_EQ(p.CopyRowsToPool(p.k() + 1, 128, host.data(), 128, 128, 8).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(p.CopyRowsFromPool(host.data(), 128, p.v() + 896, 128, 128, 2).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(p.CopyRowsFromPool(host.data(), 128, reinterpret_cast<const std::byte*>(host.data()),
                               128, 128, 1)
                .code(),
            StatusCode::kInvalidArgument);  // not a pool pointer
  EXPECT_EQ(p.CopyBlocks(std::vector<BlockCopy>{{0, 1}}, 128, 1024, 2).code(),
            StatusCode::kInvalidArgument);  // 2 layers x 1024 bytes > 1024 in the pool
  EXPECT_TRUE(p.CopyBlocks(std::vector<BlockCopy>{{0, 1}}, 128, 1024, 1).ok());
}

}  // namespace
}  // namespace attnrt::kvcache
