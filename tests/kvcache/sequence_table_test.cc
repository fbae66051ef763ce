// SequenceTable: block tables shared by all layers, per-layer lengths, fork with copy-on-write,
// and every error leaving a full snapshot (tables, lengths, reference counts, free count)
// unchanged. Also the metadata bound: block tables and counts <= 1% of the KV bytes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <span>
#include <string>
#include <vector>

#include "kvcache/kvcache.h"
#include "tests/kvcache/table_snapshot.h"

namespace attnrt::kvcache {
namespace {

using testing::TableSnapshot;
using testing::TakeSnapshot;

constexpr int kAll = SequenceTable::kAllLayers;

ModelShape SmallShape() {
  ModelShape s;
  s.num_layers = 3;
  s.num_q_heads = 4;
  s.num_kv_heads = 2;
  s.head_dim = 64;
  s.block_size = 8;
  s.max_context = 64;
  return s;
}

std::vector<BlockId> TableOf(const SequenceTable& t, SequenceId id) {
  auto b = t.Blocks(id);
  EXPECT_TRUE(b.ok()) << b.status().ToString();
  return b.ok() ? std::vector<BlockId>(b->begin(), b->end()) : std::vector<BlockId>{};
}

int LengthOf(const SequenceTable& t, SequenceId id, int layer) {
  auto l = t.Length(id, layer);
  EXPECT_TRUE(l.ok()) << l.status().ToString();
  return l.ok() ? *l : -1;
}

bool Mentions(const Status& s, const std::string& text) {
  return s.message().find(text) != std::string::npos;
}

class SequenceTableTest : public ::testing::Test {
 protected:
  SequenceTableTest() : allocator_(12), table_(SmallShape(), &allocator_) {}

  // Asserts `call` fails with `code`, mentions every string in `texts`, and changes nothing
  // (snapshot and the caller's copies vector).
  template <typename Call>
  void ExpectFailsUnchanged(Call call, StatusCode code, std::vector<std::string> texts) {
    const TableSnapshot before = TakeSnapshot(table_, allocator_);
    copies_ = {BlockCopy{7, 8}};  // pre-existing content must survive a failed call
    Status s = call();
    EXPECT_EQ(s.code(), code) << s.ToString();
    for (const std::string& t : texts) EXPECT_TRUE(Mentions(s, t)) << s.message() << " lacks " << t;
    EXPECT_EQ(TakeSnapshot(table_, allocator_), before);
    EXPECT_EQ(copies_, (std::vector<BlockCopy>{BlockCopy{7, 8}}));
  }

  BlockAllocator allocator_;
  SequenceTable table_;
  std::vector<BlockCopy> copies_;
};

TEST_F(SequenceTableTest, AppendGrowsTheTableToCoverTheLongestLayer) {
  ASSERT_TRUE(table_.Create(1).ok());
  EXPECT_TRUE(table_.Contains(1));
  EXPECT_EQ(table_.num_sequences(), 1u);
  EXPECT_TRUE(TableOf(table_, 1).empty());
  for (int l = 0; l < 3; ++l) EXPECT_EQ(LengthOf(table_, 1, l), 0);

  auto first = table_.Append(1, kAll, 10, &copies_);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ(*first, 0);
  EXPECT_EQ(TableOf(table_, 1).size(), 2u);  // 10 tokens, 8 per block
  for (int l = 0; l < 3; ++l) EXPECT_EQ(LengthOf(table_, 1, l), 10);
  EXPECT_EQ(*table_.Length(1, kAll), 10);

  auto second = table_.Append(1, 1, 7, &copies_);  // layer 1 -> 17 tokens: a third block
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(*second, 10);
  EXPECT_EQ(TableOf(table_, 1).size(), 3u);
  EXPECT_EQ(LengthOf(table_, 1, 0), 10);
  EXPECT_EQ(LengthOf(table_, 1, 1), 17);
  EXPECT_EQ(LengthOf(table_, 1, 2), 10);

  const std::vector<BlockId> table_before = TableOf(table_, 1);
  auto third = table_.Append(1, 0, 14, &copies_);  // layer 0 -> 24: still three blocks
  ASSERT_TRUE(third.ok());
  EXPECT_EQ(*third, 10);
  EXPECT_EQ(TableOf(table_, 1), table_before);
  EXPECT_TRUE(copies_.empty());
  for (BlockId b : table_before) EXPECT_EQ(allocator_.ref_count(b), 1);
  EXPECT_EQ(allocator_.num_free(), 12 - 3);
}

TEST_F(SequenceTableTest, AppendTokenReturnsThePositionOfTheNewToken) {
  ASSERT_TRUE(table_.Create(5).ok());
  for (int pos = 0; pos < 20; ++pos) {
    auto token = table_.AppendToken(5, 2, &copies_);
    ASSERT_TRUE(token.ok()) << token.status().ToString();
    EXPECT_EQ(token->position, pos);
    EXPECT_EQ(token->offset, pos % 8);
    EXPECT_EQ(token->block, TableOf(table_, 5)[static_cast<std::size_t>(pos / 8)]);
    EXPECT_EQ(LengthOf(table_, 5, 2), pos + 1);
  }
  EXPECT_EQ(LengthOf(table_, 5, 0), 0);
  EXPECT_EQ(TableOf(table_, 5).size(), 3u);
  EXPECT_TRUE(copies_.empty());
}

// A prefilled table takes its first decode tokens' blocks without growing its allocation
// (sequences prefilled to one length would otherwise all reallocate in their first decode
// batch).
TEST_F(SequenceTableTest, APrefilledTableTakesItsFirstDecodeBlocksWithoutReallocating) {
  ASSERT_TRUE(table_.Create(3).ok());
  ASSERT_TRUE(table_.Append(3, kAll, 32, &copies_).ok());  // 4 full blocks of 8
  const std::size_t after_prefill = table_.MetadataBytes();
  for (int t = 0; t < 16; ++t) ASSERT_TRUE(table_.Append(3, kAll, 1, &copies_).ok());
  EXPECT_EQ(TableOf(table_, 3).size(), 6u);
  EXPECT_EQ(table_.MetadataBytes(), after_prefill) << "two more blocks reallocated the table";
}

// Tables prefilled to one length and decoded in lockstep (a static batch) reallocate over many
// rounds, not all in one: their capacities past a prefill differ by sequence. Before, all of
// them reallocated in the round that took them to 1.5x the prefill, in the same few batches of
// a serving run (the host-path bench's largest late clusters at 70% load, H200, 2026-11-29).
TEST(SequenceTableGrowthTest, TablesPrefilledToOneLengthReallocateInDifferentRounds) {
  ModelShape shape = SmallShape();
  shape.num_layers = 1;
  shape.block_size = 16;
  shape.max_context = 4096;
  constexpr int kSequences = 512;
  constexpr int kPrefill = 512;  // 32 blocks
  BlockAllocator allocator(kSequences * (shape.max_blocks_per_sequence() + 1));
  SequenceTable table(shape, &allocator);
  std::vector<BlockCopy> copies;
  std::vector<const BlockId*> storage(kSequences);
  for (SequenceId id = 0; id < kSequences; ++id) {
    ASSERT_TRUE(table.Create(id).ok());
    ASSERT_TRUE(table.Append(id, kAll, kPrefill, &copies).ok());
    storage[static_cast<std::size_t>(id)] = table.Blocks(id)->data();
  }
  int most_in_a_round = 0, reallocations = 0;
  for (int round = 0; round < kPrefill; ++round) {  // to twice the prefill
    int moved = 0;
    for (SequenceId id = 0; id < kSequences; ++id) {
      ASSERT_TRUE(table.Append(id, kAll, 1, &copies).ok());
      const BlockId* now = table.Blocks(id)->data();
      if (now != storage[static_cast<std::size_t>(id)]) ++moved;
      storage[static_cast<std::size_t>(id)] = now;
    }
    most_in_a_round = std::max(most_in_a_round, moved);
    reallocations += moved;
  }
  // Each table grows once on the way (to 1.5-2x its prefill) ...
  EXPECT_LE(reallocations, kSequences);
  EXPECT_GT(reallocations, kSequences / 2);
  // ... spread over the rounds that cross a block boundary in that range (16 of them): ~32 a
  // round; all 512 in one round before.
  EXPECT_LE(most_in_a_round, kSequences / 8) << "tables reallocating together";
}

// The entry API (one lookup for several calls): the same tokens, blocks and errors as by id, and
// an entry stays valid while other sequences are created, appended to, forked and freed.
TEST_F(SequenceTableTest, EntryFromFindAppendsAndReadsAsTheIdCalls) {
  EXPECT_EQ(table_.Find(5), nullptr);
  ASSERT_TRUE(table_.Create(5).ok());
  SequenceTable::Sequence* entry = table_.Find(5);
  ASSERT_NE(entry, nullptr);
  for (int pos = 0; pos < 12; ++pos) {
    if (pos == 4) {  // other sequences change around the entry (the map may rehash)
      for (SequenceId id = 100; id < 140; ++id) ASSERT_TRUE(table_.Create(id).ok());
      ASSERT_TRUE(table_.Fork(5, 6).ok());
      for (SequenceId id = 100; id < 140; ++id) ASSERT_TRUE(table_.Free(id).ok());
      ASSERT_TRUE(table_.Free(6).ok());
    }
    auto token = table_.AppendToken(*entry, 5, 1, &copies_);
    ASSERT_TRUE(token.ok()) << token.status().ToString();
    EXPECT_EQ(token->position, pos);
    EXPECT_EQ(token->block, TableOf(table_, 5)[static_cast<std::size_t>(pos / 8)]);
    const std::span<const BlockId> blocks = table_.Blocks(*entry);
    EXPECT_EQ(std::vector<BlockId>(blocks.begin(), blocks.end()), TableOf(table_, 5));
  }
  EXPECT_EQ(LengthOf(table_, 5, 1), 12);
  EXPECT_TRUE(copies_.empty());
  ExpectFailsUnchanged([&] { return table_.AppendToken(*entry, 5, 3, &copies_).status(); },
                       StatusCode::kInvalidArgument, {"layer = 3"});
  ExpectFailsUnchanged([&] { return table_.AppendToken(*entry, 5, 1, nullptr).status(); },
                       StatusCode::kInvalidArgument, {"copies is null"});
}

TEST_F(SequenceTableTest, ForkSharesEveryBlockAndCopiesTheLengths) {
  ASSERT_TRUE(table_.Create(1).ok());
  ASSERT_TRUE(table_.Append(1, kAll, 12, &copies_).ok());
  ASSERT_TRUE(table_.Append(1, 2, 9, &copies_).ok());  // layer 2 at 21: three blocks
  ASSERT_TRUE(table_.Fork(1, 2).ok());
  EXPECT_EQ(table_.num_sequences(), 2u);
  EXPECT_EQ(TableOf(table_, 2), TableOf(table_, 1));
  for (int l = 0; l < 3; ++l) EXPECT_EQ(LengthOf(table_, 2, l), LengthOf(table_, 1, l));
  for (BlockId b : TableOf(table_, 1)) EXPECT_EQ(allocator_.ref_count(b), 2);
  EXPECT_EQ(allocator_.num_free(), 12 - 3);
  EXPECT_TRUE(copies_.empty());
}

// The partial last block is shared after a fork; the child's first write copies it, after which
// the parent holds the original alone and writes into it in place.
TEST_F(SequenceTableTest, PartialBlockIsCopiedOnTheChildsWriteThenTheParentWritesInPlace) {
  ASSERT_TRUE(table_.Create(1).ok());
  ASSERT_TRUE(table_.Append(1, kAll, 12, &copies_).ok());  // [A full][B: 4 of 8]
  const std::vector<BlockId> parent = TableOf(table_, 1);
  const BlockId a = parent[0], b = parent[1];
  ASSERT_TRUE(table_.Fork(1, 2).ok());

  auto child_token = table_.AppendToken(2, kAll, &copies_);
  ASSERT_TRUE(child_token.ok());
  ASSERT_EQ(copies_.size(), 1u);
  const BlockId c = copies_[0].dst;
  EXPECT_EQ(copies_[0].src, b);
  EXPECT_NE(c, a);
  EXPECT_NE(c, b);
  EXPECT_EQ(child_token->block, c);
  EXPECT_EQ(child_token->offset, 4);
  EXPECT_EQ(child_token->position, 12);
  EXPECT_EQ(TableOf(table_, 2), (std::vector<BlockId>{a, c}));
  EXPECT_EQ(TableOf(table_, 1), (std::vector<BlockId>{a, b}));
  EXPECT_EQ(allocator_.ref_count(a), 2);  // full block stays shared
  EXPECT_EQ(allocator_.ref_count(b), 1);
  EXPECT_EQ(allocator_.ref_count(c), 1);
  EXPECT_EQ(LengthOf(table_, 1, 0), 12);
  EXPECT_EQ(LengthOf(table_, 2, 0), 13);

  copies_.clear();
  auto parent_token = table_.AppendToken(1, kAll, &copies_);
  ASSERT_TRUE(parent_token.ok());
  EXPECT_TRUE(copies_.empty());  // B is the parent's alone now
  EXPECT_EQ(parent_token->block, b);
  EXPECT_EQ(parent_token->offset, 4);
  EXPECT_EQ(TableOf(table_, 1), (std::vector<BlockId>{a, b}));
  EXPECT_EQ(allocator_.num_free(), 12 - 3);
}

TEST_F(SequenceTableTest, ParentWritingFirstCopiesAndTheChildKeepsTheOriginal) {
  ASSERT_TRUE(table_.Create(1).ok());
  ASSERT_TRUE(table_.Append(1, kAll, 5, &copies_).ok());
  const BlockId b = TableOf(table_, 1)[0];
  ASSERT_TRUE(table_.Fork(1, 2).ok());
  ASSERT_TRUE(table_.Append(1, 0, 2, &copies_).ok());
  ASSERT_EQ(copies_.size(), 1u);
  EXPECT_EQ(copies_[0].src, b);
  EXPECT_EQ(TableOf(table_, 1), (std::vector<BlockId>{copies_[0].dst}));
  EXPECT_EQ(TableOf(table_, 2), (std::vector<BlockId>{b}));
  copies_.clear();
  ASSERT_TRUE(table_.Append(2, 0, 1, &copies_).ok());
  EXPECT_TRUE(copies_.empty());
}

TEST_F(SequenceTableTest, FullSharedBlocksAreNeverCopied) {
  ASSERT_TRUE(table_.Create(1).ok());
  ASSERT_TRUE(table_.Append(1, kAll, 16, &copies_).ok());  // two full blocks
  ASSERT_TRUE(table_.Fork(1, 2).ok());
  ASSERT_TRUE(table_.Append(2, kAll, 3, &copies_).ok());
  EXPECT_TRUE(copies_.empty());
  const std::vector<BlockId> child = TableOf(table_, 2);
  ASSERT_EQ(child.size(), 3u);
  EXPECT_EQ(std::vector<BlockId>(child.begin(), child.begin() + 2), TableOf(table_, 1));
  EXPECT_EQ(allocator_.ref_count(child[2]), 1);
}

// Layers advance separately: a layer behind the others writes into a block the table already
// holds, and that block is copied if shared.
TEST_F(SequenceTableTest, LayerBehindWritesIntoASharedBlockAndCopiesIt) {
  ASSERT_TRUE(table_.Create(1).ok());
  ASSERT_TRUE(table_.Append(1, 0, 16, &copies_).ok());  // layer 0: two full blocks
  ASSERT_TRUE(table_.Append(1, 1, 8, &copies_).ok());   // layer 1: block 0 only
  const std::vector<BlockId> parent = TableOf(table_, 1);
  ASSERT_EQ(parent.size(), 2u);
  ASSERT_TRUE(table_.Fork(1, 2).ok());
  auto pos = table_.Append(2, 1, 3, &copies_);  // layer 1 writes positions 8..10 of block 1
  ASSERT_TRUE(pos.ok());
  EXPECT_EQ(*pos, 8);
  ASSERT_EQ(copies_.size(), 1u);
  EXPECT_EQ(copies_[0].src, parent[1]);
  EXPECT_EQ(TableOf(table_, 2), (std::vector<BlockId>{parent[0], copies_[0].dst}));
  EXPECT_EQ(TableOf(table_, 2).size(), 2u);  // no new block: layer 0 already needed two
  EXPECT_EQ(LengthOf(table_, 2, 1), 11);
  EXPECT_EQ(LengthOf(table_, 1, 1), 8);
}

TEST_F(SequenceTableTest, MultiTokenAppendCopiesTheSharedTailAndAddsNewBlocks) {
  ASSERT_TRUE(table_.Create(1).ok());
  ASSERT_TRUE(table_.Append(1, kAll, 6, &copies_).ok());
  ASSERT_TRUE(table_.Fork(1, 2).ok());
  const int free_before = allocator_.num_free();
  ASSERT_TRUE(table_.Append(2, kAll, 20, &copies_).ok());  // 26 tokens: 4 blocks
  EXPECT_EQ(copies_.size(), 1u);
  EXPECT_EQ(TableOf(table_, 2).size(), 4u);
  EXPECT_EQ(allocator_.num_free(), free_before - 4);  // one copy + three new
  for (BlockId b : TableOf(table_, 2)) EXPECT_EQ(allocator_.ref_count(b), 1);
}

TEST_F(SequenceTableTest, FreeReleasesOnlyTheReferencesItHeld) {
  ASSERT_TRUE(table_.Create(1).ok());
  ASSERT_TRUE(table_.Append(1, kAll, 20, &copies_).ok());
  ASSERT_TRUE(table_.Fork(1, 2).ok());
  const std::vector<BlockId> blocks = TableOf(table_, 1);
  ASSERT_TRUE(table_.Free(1).ok());
  EXPECT_FALSE(table_.Contains(1));
  for (BlockId b : blocks) EXPECT_EQ(allocator_.ref_count(b), 1);
  EXPECT_EQ(TableOf(table_, 2), blocks);
  ASSERT_TRUE(table_.Free(2).ok());
  for (BlockId b : blocks) EXPECT_EQ(allocator_.ref_count(b), 0);
  EXPECT_EQ(allocator_.num_free(), 12);
  EXPECT_EQ(table_.num_sequences(), 0u);
  // The id can be used again.
  ASSERT_TRUE(table_.Create(1).ok());
  EXPECT_EQ(LengthOf(table_, 1, 0), 0);
}

TEST(SequenceTableLifetimeTest, DestructorReleasesEveryBlock) {
  BlockAllocator allocator(10);
  {
    SequenceTable table(SmallShape(), &allocator);
    std::vector<BlockCopy> copies;
    ASSERT_TRUE(table.Create(1).ok());
    ASSERT_TRUE(table.Append(1, kAll, 30, &copies).ok());
    ASSERT_TRUE(table.Fork(1, 2).ok());
    ASSERT_TRUE(table.Append(2, 0, 5, &copies).ok());
    EXPECT_LT(allocator.num_free(), 10);
  }
  EXPECT_EQ(allocator.num_free(), 10);
  for (BlockId b = 0; b < 10; ++b) EXPECT_EQ(allocator.ref_count(b), 0);
}

// ---- Errors: each one leaves the full snapshot unchanged. ----

class SequenceTableErrorTest : public SequenceTableTest {
 protected:
  void SetUp() override {
    // Sequence 1: 12 tokens on every layer, layer 2 at 20; sequence 2 a fork of it; sequence 3
    // empty. 3 of 12 blocks held.
    std::vector<BlockCopy> c;
    ASSERT_TRUE(table_.Create(1).ok());
    ASSERT_TRUE(table_.Append(1, kAll, 12, &c).ok());
    ASSERT_TRUE(table_.Append(1, 2, 8, &c).ok());
    ASSERT_TRUE(table_.Fork(1, 2).ok());
    ASSERT_TRUE(table_.Create(3).ok());
  }
};

TEST_F(SequenceTableErrorTest, DuplicateCreateIsAlreadyExists) {
  ExpectFailsUnchanged([&] { return table_.Create(2); }, StatusCode::kAlreadyExists,
                       {"sequence 2"});
}

TEST_F(SequenceTableErrorTest, ForkFromUnknownOrIntoExistingFails) {
  ExpectFailsUnchanged([&] { return table_.Fork(99, 4); }, StatusCode::kNotFound,
                       {"sequence 99"});
  ExpectFailsUnchanged([&] { return table_.Fork(1, 3); }, StatusCode::kAlreadyExists,
                       {"sequence 3"});
  ExpectFailsUnchanged([&] { return table_.Fork(1, 1); }, StatusCode::kAlreadyExists,
                       {"sequence 1"});
  EXPECT_FALSE(table_.Contains(4));
}

TEST_F(SequenceTableErrorTest, FreeOfUnknownIsNotFound) {
  ExpectFailsUnchanged([&] { return table_.Free(42); }, StatusCode::kNotFound, {"sequence 42"});
  ASSERT_TRUE(table_.Free(3).ok());
  ExpectFailsUnchanged([&] { return table_.Free(3); }, StatusCode::kNotFound, {"sequence 3"});
}

TEST_F(SequenceTableErrorTest, AppendToUnknownIsNotFound) {
  ExpectFailsUnchanged([&] { return table_.Append(77, 0, 1, &copies_).status(); },
                       StatusCode::kNotFound, {"sequence 77"});
  ExpectFailsUnchanged([&] { return table_.AppendToken(77, kAll, &copies_).status(); },
                       StatusCode::kNotFound, {"sequence 77"});
}

TEST_F(SequenceTableErrorTest, LayerOutOfRangeIsInvalidArgument) {
  for (int layer : {3, -2, 100}) {
    ExpectFailsUnchanged([&] { return table_.Append(2, layer, 1, &copies_).status(); },
                         StatusCode::kInvalidArgument,
                         {"layer = " + std::to_string(layer), "num_layers = 3"});
    ExpectFailsUnchanged([&] { return table_.AppendToken(2, layer, &copies_).status(); },
                         StatusCode::kInvalidArgument, {"layer = " + std::to_string(layer)});
    EXPECT_EQ(table_.Length(2, layer).status().code(), StatusCode::kInvalidArgument);
  }
}

TEST_F(SequenceTableErrorTest, NonPositiveCountAndNullCopiesAreInvalidArgument) {
  for (int n : {0, -1}) {
    ExpectFailsUnchanged([&] { return table_.Append(2, 0, n, &copies_).status(); },
                         StatusCode::kInvalidArgument, {"n = " + std::to_string(n)});
  }
  ExpectFailsUnchanged([&] { return table_.Append(2, 0, 1, nullptr).status(); },
                       StatusCode::kInvalidArgument, {"copies"});
}

TEST_F(SequenceTableErrorTest, AllLayersWithUnequalLengthsIsFailedPrecondition) {
  // Sequence 2 (the fork) has layers at 12, 12, 20; its next write would copy-on-write.
  ExpectFailsUnchanged([&] { return table_.Append(2, kAll, 1, &copies_).status(); },
                       StatusCode::kFailedPrecondition, {"layer 2 has 20"});
  EXPECT_EQ(table_.Length(2, kAll).status().code(), StatusCode::kFailedPrecondition);
}

TEST_F(SequenceTableErrorTest, AppendBeyondMaxContextIsInvalidArgument) {
  ExpectFailsUnchanged([&] { return table_.Append(2, 2, 45, &copies_).status(); },
                       StatusCode::kInvalidArgument,
                       {"sequence 2", "length would be 65", "max_context 64"});
  ExpectFailsUnchanged([&] { return table_.Append(3, kAll, 2'000'000'000, &copies_).status(); },
                       StatusCode::kInvalidArgument, {"length would be 2000000000"});
  ASSERT_TRUE(table_.Append(2, 2, 44, &copies_).ok());  // exactly max_context is fine
  ExpectFailsUnchanged([&] { return table_.AppendToken(2, 2, &copies_).status(); },
                       StatusCode::kInvalidArgument, {"length would be 65"});
}

TEST_F(SequenceTableErrorTest, OutOfBlocksIsResourceExhaustedAndAllocatesNothing) {
  // Fill the pool: sequence 3 takes 8 blocks, leaving 1 free. Sequence 2 shares blocks 0..2
  // with sequence 1; its layers are at 12, 12, 20.
  std::vector<BlockCopy> c;
  ASSERT_TRUE(table_.Append(3, kAll, 64, &c).ok());
  ASSERT_EQ(allocator_.num_free(), 1);
  // Layer 2 from 20 to 30: a copy of shared block 2 and one new block, 2 > 1 free.
  ExpectFailsUnchanged([&] { return table_.Append(2, 2, 10, &copies_).status(); },
                       StatusCode::kResourceExhausted,
                       {"needs 2 free KV blocks", "1 new", "1 copy-on-write", "only 1 of 12"});
  // Layer 0 from 12 to 24: copies of shared blocks 1 and 2, 2 > 1 free.
  ExpectFailsUnchanged([&] { return table_.Append(2, 0, 12, &copies_).status(); },
                       StatusCode::kResourceExhausted, {"needs 2 free KV blocks"});
  ASSERT_TRUE(table_.Append(2, 0, 1, &c).ok());  // one copy fits
  ExpectFailsUnchanged([&] { return table_.Append(1, 2, 5, &copies_).status(); },
                       StatusCode::kResourceExhausted, {"sequence 1", "only 0 of 12"});
  ExpectFailsUnchanged([&] { return table_.AppendToken(1, 2, &copies_).status(); },
                       StatusCode::kResourceExhausted, {"needs 1 free KV blocks"});
}

TEST_F(SequenceTableErrorTest, QueriesOfUnknownSequencesAreNotFound) {
  EXPECT_EQ(table_.Length(9, 0).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(table_.Blocks(9).status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(Mentions(table_.Blocks(9).status(), "sequence 9"));
  EXPECT_FALSE(table_.Contains(9));
}

// ---- Metadata overhead ----

struct OverheadCase {
  int sequences;
  int tokens;
  bool token_by_token;  // decode growth (capacity doubling) instead of one prefill append
};

class MetadataOverheadTest : public ::testing::TestWithParam<OverheadCase> {};

// Realistic shape: 32 layers, Hkv = 8, D = 128, block size 16 (2 MiB of K+V per block).
TEST_P(MetadataOverheadTest, BlockTablesAndCountsStayUnderOnePercentOfKvBytes) {
  const OverheadCase c = GetParam();
  ModelShape shape;
  shape.num_layers = 32;
  shape.num_q_heads = 32;
  shape.num_kv_heads = 8;
  shape.head_dim = 128;
  shape.block_size = 16;
  shape.max_context = 4096;
  ASSERT_TRUE(shape.Validate().ok());
  const int blocks_per_seq = (c.tokens + shape.block_size - 1) / shape.block_size;
  BlockAllocator allocator(c.sequences * blocks_per_seq);
  SequenceTable table(shape, &allocator);
  std::vector<BlockCopy> copies;
  for (int s = 0; s < c.sequences; ++s) {
    ASSERT_TRUE(table.Create(static_cast<SequenceId>(s)).ok());
    if (c.token_by_token) {
      for (int t = 0; t < c.tokens; ++t) ASSERT_TRUE(table.Append(s, kAll, 1, &copies).ok());
    } else {
      ASSERT_TRUE(table.Append(s, kAll, c.tokens, &copies).ok());
    }
  }
  ASSERT_EQ(allocator.num_free(), 0);  // every block holds K/V in use
  const double kv_bytes = static_cast<double>(allocator.num_blocks()) * BlockBytes(shape);
  const double meta = static_cast<double>(table.MetadataBytes() + allocator.MetadataBytes());
  const double ratio = meta / kv_bytes;
  std::printf("metadata %.0f B for %.0f B of K+V (%d sequences x %d tokens%s): ratio %.3g\n", meta,
              kv_bytes, c.sequences, c.tokens, c.token_by_token ? ", token by token" : "", ratio);
  RecordProperty("metadata_ratio", std::to_string(ratio));
  EXPECT_GT(meta, 0.0);
  EXPECT_LE(ratio, 0.01);
}

INSTANTIATE_TEST_SUITE_P(BlockSize16, MetadataOverheadTest,
                         ::testing::Values(OverheadCase{64, 4096, false},
                                           OverheadCase{16, 4096, true},
                                           OverheadCase{1024, 16, false},
                                           OverheadCase{1024, 1, true}),
                         [](const auto& info) {
                           return std::to_string(info.param.sequences) + "x" +
                                  std::to_string(info.param.tokens) +
                                  (info.param.token_by_token ? "_decode" : "_prefill");
                         });

}  // namespace
}  // namespace attnrt::kvcache
