// BlockAllocator placement: the block after a hint, new runs placed with room to grow, released
// tables reused as whole runs, tables kept consecutive through round-robin decode, fork and
// copy-on-write, and churn; and that placement never costs an allocation: every free block is
// still handed out, once, with counts matching a simple model under random operations.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "kvcache/kvcache.h"
#include "tools/kv_churn.h"

namespace attnrt::kvcache {
namespace {

constexpr int kAll = SequenceTable::kAllLayers;

void ExpectInvariants(const BlockAllocator& a) {
  const Status s = a.CheckInvariantsForTesting();
  EXPECT_TRUE(s.ok()) << s.ToString();
}

// `n` blocks for one table: the first placed for a run of n, each next one after the last.
std::vector<BlockId> AllocateTable(BlockAllocator& a, int n) {
  std::vector<BlockId> table;
  for (int i = 0; i < n; ++i) {
    const BlockHint hint{table.empty() ? kNoBlock : table.back(), n - i};
    StatusOr<BlockId> b = a.Allocate(hint);
    EXPECT_TRUE(b.ok()) << b.status().ToString();
    if (!b.ok()) break;
    table.push_back(*b);
  }
  return table;
}

// One more block after the table's last.
void Grow(BlockAllocator& a, std::vector<BlockId>& table) {
  StatusOr<BlockId> b = a.Allocate({.after = table.back()});
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  table.push_back(*b);
}

bool Consecutive(const std::vector<BlockId>& table) {
  for (std::size_t i = 1; i < table.size(); ++i) {
    if (table[i] != table[i - 1] + 1) return false;
  }
  return true;
}

TEST(BlockAllocatorPlacementTest, HintTakesTheBlockAfterWhenItIsFree) {
  BlockAllocator a(16);
  EXPECT_EQ(*a.Allocate(), 0);  // a fresh pool starts at its first block
  EXPECT_EQ(*a.Allocate({.after = 0}), 1);
  EXPECT_EQ(*a.Allocate({.after = 1}), 2);
  // Any held block is a hint, not only the last one handed out.
  const BlockId far = *a.Allocate();
  ASSERT_GT(far, 3);
  EXPECT_EQ(*a.Allocate({.after = far}), far + 1);
  ExpectInvariants(a);
}

TEST(BlockAllocatorPlacementTest, HintFallsBackToAnotherBlockWhenTheNextIsHeld) {
  BlockAllocator a(8);
  const std::vector<BlockId> t = AllocateTable(a, 3);  // 0, 1, 2
  ASSERT_EQ(t, (std::vector<BlockId>{0, 1, 2}));
  StatusOr<BlockId> b = a.Allocate({.after = 0});  // 1 is held
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_GE(*b, 3);
  EXPECT_EQ(a.ref_count(*b), 1);
  // The last block: after it is the pool's end.
  BlockAllocator last(2);
  (void)*last.Allocate();
  const BlockId one = *last.Allocate();
  ASSERT_EQ(one, 1);
  ASSERT_TRUE(last.Release(0).ok());
  EXPECT_EQ(*last.Allocate({.after = 1}), 0);
  ExpectInvariants(a);
  ExpectInvariants(last);
}

// A hint naming a free block or an id out of range is no hint: the same block as without one.
TEST(BlockAllocatorPlacementTest, HintOfAFreeOrOutOfRangeBlockIsIgnored) {
  for (BlockId bad : {kNoBlock, -7, 5, 40, 41, 1000}) {
    BlockAllocator hinted(41), plain(41);
    for (BlockAllocator* a : {&hinted, &plain}) {
      (void)AllocateTable(*a, 4);
      (void)AllocateTable(*a, 3);
    }
    ASSERT_EQ(hinted.ref_count(5), 0);
    EXPECT_EQ(*hinted.Allocate({.after = bad}), *plain.Allocate()) << "after = " << bad;
  }
}

// A second table does not start right after the first one's end (no room to grow there): it
// is centred in the free run, and both then grow consecutively; so does a third.
TEST(BlockAllocatorPlacementTest, NewTablesLeaveRoomToGrow) {
  BlockAllocator a(100);
  std::vector<BlockId> t1 = AllocateTable(a, 10);
  EXPECT_EQ(t1.front(), 0);
  std::vector<BlockId> t2 = AllocateTable(a, 10);
  EXPECT_EQ(t2.front(), 10 + (90 - 10) / 2);  // centred in [10, 100)
  std::vector<BlockId> t3 = AllocateTable(a, 4);
  for (int step = 0; step < 10; ++step) {
    for (std::vector<BlockId>* t : {&t1, &t2, &t3}) Grow(a, *t);
  }
  EXPECT_TRUE(Consecutive(t1));
  EXPECT_TRUE(Consecutive(t2));
  EXPECT_TRUE(Consecutive(t3));
  ExpectInvariants(a);
}

// A freed table's blocks merge with the free blocks around them into one run; a new table that
// fits is placed there whole.
TEST(BlockAllocatorPlacementTest, AFreedTableIsReusedAsOneRun) {
  BlockAllocator a(64);
  std::vector<BlockId> t1 = AllocateTable(a, 16);
  std::vector<BlockId> t2 = AllocateTable(a, 16);
  ASSERT_TRUE(Consecutive(t1) && Consecutive(t2));
  for (BlockId b : t1) ASSERT_TRUE(a.Release(b).ok());
  ExpectInvariants(a);
  // [0, t2.front()) is free and follows no table: a new table begins at 0.
  std::vector<BlockId> t3 = AllocateTable(a, 16);
  EXPECT_EQ(t3, t1);
  ExpectInvariants(a);
}

TEST(BlockAllocatorPlacementTest, ReleasingInAnyOrderRestoresOneRun) {
  BlockAllocator a(32);
  std::vector<BlockId> all = AllocateTable(a, 32);
  std::mt19937_64 rng(7);
  std::shuffle(all.begin(), all.end(), rng);
  for (BlockId b : all) {
    ASSERT_TRUE(a.Release(b).ok());
    ExpectInvariants(a);
  }
  EXPECT_EQ(AllocateTable(a, 32), AllocateTable(*std::make_unique<BlockAllocator>(32), 32));
}

// Placement never costs an allocation: in a fragmented pool every free block is handed out,
// once, whatever the hints, and only then does Allocate answer ResourceExhausted.
TEST(BlockAllocatorPlacementTest, ExhaustionStillAllocatesEveryFreeBlock) {
  constexpr int kBlocks = 200;
  for (std::uint64_t seed : {1u, 2u, 3u}) {
    BlockAllocator a(kBlocks);
    std::vector<BlockId> held;
    for (int i = 0; i < kBlocks; ++i) held.push_back(*a.Allocate());
    std::mt19937_64 rng(seed);
    std::shuffle(held.begin(), held.end(), rng);
    const std::set<BlockId> released(held.begin(), held.begin() + 77);
    for (BlockId b : released) ASSERT_TRUE(a.Release(b).ok());
    ExpectInvariants(a);
    std::set<BlockId> got;
    for (int i = 0; i < 77; ++i) {
      const BlockHint hint{static_cast<BlockId>(rng() % (kBlocks + 2)) - 1,
                           static_cast<std::int32_t>(rng() % 50)};
      StatusOr<BlockId> b = a.Allocate(hint);
      ASSERT_TRUE(b.ok()) << "seed " << seed << ": " << a.num_free() << " free, "
                          << b.status().ToString();
      EXPECT_TRUE(got.insert(*b).second) << "block " << *b << " handed out twice";
    }
    EXPECT_EQ(got, released);
    EXPECT_EQ(a.num_free(), 0);
    EXPECT_EQ(a.Allocate({.after = 3}).status().code(), StatusCode::kResourceExhausted);
    ExpectInvariants(a);
  }
}

// The same calls give the same blocks; a call refused by the failure hook changes nothing the
// later calls can see.
TEST(BlockAllocatorPlacementTest, DeterministicAndAFailedCallChangesNothing) {
  BlockAllocator a(300), b(300);
  std::mt19937_64 rng(11);
  std::vector<BlockId> held;
  for (int op = 0; op < 5000; ++op) {
    if (held.empty() || rng() % 3 != 0) {
      const BlockHint hint{held.empty() ? kNoBlock : held[rng() % held.size()],
                           static_cast<std::int32_t>(1 + rng() % 8)};
      if (op % 7 == 0) {  // a refused call on `a` only
        a.SetFailureHookForTesting([] { return true; });
        ASSERT_EQ(a.Allocate(hint).status().code(), StatusCode::kResourceExhausted);
        a.SetFailureHookForTesting({});
      }
      StatusOr<BlockId> x = a.Allocate(hint);
      StatusOr<BlockId> y = b.Allocate(hint);
      ASSERT_EQ(x.ok(), y.ok());
      if (!x.ok()) continue;
      ASSERT_EQ(*x, *y) << "op " << op;
      held.push_back(*x);
    } else {
      const std::size_t i = rng() % held.size();
      ASSERT_TRUE(a.Release(held[i]).ok());
      ASSERT_TRUE(b.Release(held[i]).ok());
      held[i] = held.back();
      held.pop_back();
    }
  }
}

// Random allocate (random hints, held or not), AddRef and Release (valid and not) against a
// model of reference counts: every answer as the model predicts, a hint honoured whenever the
// block after it is free, no block handed out while held, and the free runs consistent.
TEST(BlockAllocatorPlacementTest, RandomOperationsMatchAModel) {
  constexpr int kBlocks = 64;
  constexpr int kOps = 200'000;
  for (std::uint64_t seed : {1u, 2u}) {
    BlockAllocator a(kBlocks);
    std::vector<int> model(kBlocks, 0);
    std::mt19937_64 rng(seed);
    auto random_id = [&] { return static_cast<BlockId>(rng() % (kBlocks + 4)) - 2; };
    auto held_id = [&] {
      for (int tries = 0; tries < 8; ++tries) {
        const BlockId b = static_cast<BlockId>(rng() % kBlocks);
        if (model[b] > 0) return b;
      }
      return random_id();
    };
    std::map<std::string, int> outcomes;
    for (int op = 0; op < kOps; ++op) {
      const int free = static_cast<int>(std::count(model.begin(), model.end(), 0));
      const int kind = static_cast<int>(rng() % 10);
      if (kind < 5) {
        const BlockId after = rng() % 4 == 0 ? random_id() : held_id();
        StatusOr<BlockId> b = a.Allocate({after, static_cast<std::int32_t>(rng() % 20)});
        ASSERT_EQ(b.ok(), free > 0) << "op " << op << ": " << b.status().ToString();
        if (!b.ok()) {
          ++outcomes["exhausted"];
          continue;
        }
        ASSERT_GE(*b, 0);
        ASSERT_LT(*b, kBlocks);
        ASSERT_EQ(model[*b], 0) << "op " << op << ": block " << *b << " handed out while held";
        const bool after_held = after >= 0 && after < kBlocks && model[after] > 0;
        if (after_held && after + 1 < kBlocks && model[after + 1] == 0) {
          ASSERT_EQ(*b, after + 1) << "op " << op << ": hint not taken";
          ++outcomes["hint taken"];
        }
        model[*b] = 1;
      } else if (kind < 7) {
        const BlockId b = rng() % 3 == 0 ? random_id() : held_id();
        const bool ok = b >= 0 && b < kBlocks && model[b] > 0;
        ASSERT_EQ(a.AddRef(b).ok(), ok) << "op " << op << ": AddRef(" << b << ")";
        if (ok) ++model[b];
      } else {
        const BlockId b = rng() % 3 == 0 ? random_id() : held_id();
        const bool ok = b >= 0 && b < kBlocks && model[b] > 0;
        const Status s = a.Release(b);
        ASSERT_EQ(s.ok(), ok) << "op " << op << ": Release(" << b << "): " << s.ToString();
        if (ok) {
          --model[b];
          ++outcomes[model[b] == 0 ? "freed" : "unref"];
        }
      }
      if (op % 64 == 0) {
        for (BlockId b = 0; b < kBlocks; ++b) ASSERT_EQ(a.ref_count(b), model[b]) << "block " << b;
        ASSERT_EQ(a.num_free(), std::count(model.begin(), model.end(), 0));
        const Status inv = a.CheckInvariantsForTesting();
        ASSERT_TRUE(inv.ok()) << "op " << op << ": " << inv.ToString();
      }
    }
    // Every kind of outcome happened.
    for (const char* o : {"exhausted", "hint taken", "freed", "unref"}) {
      EXPECT_GT(outcomes[o], 100) << o;
    }
  }
}

ModelShape LayoutShape(int block_size, int max_context) {
  ModelShape s;
  s.num_layers = 2;
  s.num_q_heads = 2;
  s.num_kv_heads = 1;
  s.head_dim = 64;
  s.block_size = block_size;
  s.max_context = max_context;
  return s;
}

std::vector<BlockId> TableOf(const SequenceTable& t, SequenceId id) {
  auto b = t.Blocks(id);
  EXPECT_TRUE(b.ok()) << b.status().ToString();
  return b.ok() ? std::vector<BlockId>(b->begin(), b->end()) : std::vector<BlockId>{};
}

// Eight sequences prefilled one after another, then decoding round-robin (every layer, one
// token at a time): every table stays consecutive. A LIFO free list interleaves them.
TEST(SequenceTablePlacementTest, RoundRobinDecodeKeepsEveryTableConsecutive) {
  const ModelShape shape = LayoutShape(4, 256);
  BlockAllocator allocator(8 * 32);
  SequenceTable table(shape, &allocator);
  std::vector<BlockCopy> copies;
  for (SequenceId id = 0; id < 8; ++id) {
    ASSERT_TRUE(table.Create(id).ok());
    ASSERT_TRUE(table.Append(id, kAll, 8, &copies).ok());  // two blocks
  }
  for (int token = 0; token < 56; ++token) {
    for (SequenceId id = 0; id < 8; ++id) {
      for (int layer = 0; layer < shape.num_layers; ++layer) {
        ASSERT_TRUE(table.AppendToken(id, layer, &copies).ok());
      }
    }
  }
  EXPECT_TRUE(copies.empty());
  const BlockLayout layout = MeasureBlockLayout(table);
  EXPECT_EQ(layout.tables, 8);
  EXPECT_EQ(layout.blocks, 8 * 16);
  EXPECT_EQ(layout.consecutive_fraction(), 1.0);
  EXPECT_EQ(layout.mean_run_blocks(), 16.0);
  ExpectInvariants(allocator);
}

// Fork, then the child writes into the shared partial block: it is copied (counts as before)
// into a block placed with room to grow, and both tables then grow consecutively.
TEST(SequenceTablePlacementTest, ForkAndCopyOnWriteStayRightAndGrowConsecutively) {
  const ModelShape shape = LayoutShape(8, 256);
  BlockAllocator allocator(64);
  SequenceTable table(shape, &allocator);
  std::vector<BlockCopy> copies;
  ASSERT_TRUE(table.Create(1).ok());
  ASSERT_TRUE(table.Append(1, kAll, 20, &copies).ok());  // blocks 0, 1, 2 (2 is partial)
  ASSERT_EQ(TableOf(table, 1), (std::vector<BlockId>{0, 1, 2}));
  ASSERT_TRUE(table.Fork(1, 2).ok());
  for (BlockId b : {0, 1, 2}) EXPECT_EQ(allocator.ref_count(b), 2);

  ASSERT_TRUE(table.Append(2, kAll, 1, &copies).ok());
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_EQ(copies[0].src, 2);
  const BlockId cow = copies[0].dst;
  EXPECT_GT(cow, 4) << "the copy took the parent's room to grow";
  EXPECT_EQ(TableOf(table, 2), (std::vector<BlockId>{0, 1, cow}));
  EXPECT_EQ(allocator.ref_count(0), 2);
  EXPECT_EQ(allocator.ref_count(1), 2);
  EXPECT_EQ(allocator.ref_count(2), 1);
  EXPECT_EQ(allocator.ref_count(cow), 1);

  copies.clear();
  ASSERT_TRUE(table.Append(1, kAll, 20, &copies).ok());  // 40 tokens: 2 in place, then 3, 4
  ASSERT_TRUE(table.Append(2, kAll, 20, &copies).ok());  // 41 tokens
  EXPECT_TRUE(copies.empty());
  EXPECT_EQ(TableOf(table, 1), (std::vector<BlockId>{0, 1, 2, 3, 4}));
  EXPECT_EQ(TableOf(table, 2), (std::vector<BlockId>{0, 1, cow, cow + 1, cow + 2, cow + 3}));
  ASSERT_TRUE(table.Free(1).ok());
  EXPECT_EQ(allocator.ref_count(0), 1);
  EXPECT_EQ(allocator.ref_count(2), 0);
  ASSERT_TRUE(table.Free(2).ok());
  EXPECT_EQ(allocator.num_free(), 64);
  ExpectInvariants(allocator);
}

// A failed append (the failure hook refusing its second block) leaves tables, counts and the
// free blocks as they were; the retry places the table as if the failure never happened.
TEST(SequenceTablePlacementTest, FailedAppendLeavesPlacementAsItWas) {
  const ModelShape shape = LayoutShape(4, 256);
  BlockAllocator allocator(64), twin(64);
  SequenceTable table(shape, &allocator), twin_table(shape, &twin);
  std::vector<BlockCopy> copies;
  for (SequenceTable* t : {&table, &twin_table}) {
    ASSERT_TRUE(t->Create(1).ok());
    ASSERT_TRUE(t->Append(1, kAll, 10, &copies).ok());
    ASSERT_TRUE(t->Create(2).ok());
  }
  int calls = 0;
  allocator.SetFailureHookForTesting([&] { return ++calls == 2; });
  EXPECT_EQ(table.Append(2, kAll, 12, &copies).status().code(), StatusCode::kResourceExhausted);
  allocator.SetFailureHookForTesting({});
  EXPECT_EQ(allocator.num_free(), twin.num_free());
  ASSERT_TRUE(table.Append(2, kAll, 12, &copies).ok());
  ASSERT_TRUE(twin_table.Append(2, kAll, 12, &copies).ok());
  EXPECT_EQ(TableOf(table, 2), TableOf(twin_table, 2));
  ExpectInvariants(allocator);
}

// Serving-like churn (tools/kv_churn.h) with a third of the pool free: nearly every adjacent
// table entry is consecutive (a LIFO free list: under 1%; bench/kvcache_layout_bench.cc).
TEST(SequenceTablePlacementTest, ChurnKeepsAdjacentEntriesConsecutive) {
  tools::ChurnConfig c;
  c.sequences = 32;
  c.max_context = 2048;
  c.min_prompt = 16;
  c.max_prompt = 512;
  c.min_output = 16;
  c.max_output = 512;
  c.pool_blocks = tools::PoolBlocksFor(c, 1.5);
  auto churn = tools::KvChurn::Create(c);
  ASSERT_TRUE(churn.ok()) << churn.status().ToString();
  BlockLayout layout;
  for (int round = 0; round < 6000; ++round) {
    ASSERT_TRUE((*churn)->Step().ok());
    if (round >= 1000 && round % 50 == 0) layout.Add((*churn)->Layout());
  }
  EXPECT_GT((*churn)->counts().finished, 200);  // churned: many tables freed and replaced
  EXPECT_EQ((*churn)->counts().preempted, 0);
  std::printf("consecutive %.4f, %.1f blocks per run\n", layout.consecutive_fraction(),
              layout.mean_run_blocks());
  EXPECT_GE(layout.consecutive_fraction(), 0.97);
  ExpectInvariants((*churn)->allocator());
}

TEST(BlockLayoutTest, CountsConsecutiveAscendingPairsAndRuns) {
  BlockLayout layout;
  layout.Add(std::vector<BlockId>{4, 5, 6, 2, 3, 9});  // runs 4-6, 2-3, 9
  layout.Add(std::vector<BlockId>{7});
  layout.Add(std::vector<BlockId>{});
  layout.Add(std::vector<BlockId>{3, 2, 1});  // descending: no pair counts
  EXPECT_EQ(layout.tables, 3);
  EXPECT_EQ(layout.blocks, 10);
  EXPECT_EQ(layout.adjacent_pairs, 7);
  EXPECT_EQ(layout.consecutive_pairs, 3);
  EXPECT_DOUBLE_EQ(layout.consecutive_fraction(), 3.0 / 7.0);
  EXPECT_DOUBLE_EQ(layout.mean_run_blocks(), 10.0 / 7.0);  // 3 + 1 + 3 runs
  EXPECT_EQ(BlockLayout{}.consecutive_fraction(), 1.0);
  EXPECT_EQ(BlockLayout{}.mean_run_blocks(), 0.0);
}

}  // namespace
}  // namespace attnrt::kvcache
