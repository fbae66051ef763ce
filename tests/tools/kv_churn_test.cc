// tools/kv_churn.h: the churn workload is deterministic and keeps its counts straight, and
// AllocatorBlockTables (BlockOrder::kAllocator's tables) gives each row a table of its length
// with ids in the pool, no block in two rows, the same tables for the same seed.
#include <gtest/gtest.h>

#include <set>
#include <vector>

#include "tools/kv_churn.h"

namespace attnrt::tools {
namespace {

TEST(KvChurnTest, SameSeedSameLayoutAndCountsAddUp) {
  ChurnConfig c;
  c.sequences = 16;
  c.max_prompt = 512;
  c.max_output = 256;
  c.pool_blocks = PoolBlocksFor(c, 1.1);  // tight: preemptions happen
  auto a = KvChurn::Create(c);
  auto b = KvChurn::Create(c);
  ASSERT_TRUE(a.ok() && b.ok()) << a.status().ToString();
  for (int r = 0; r < 3000; ++r) {
    ASSERT_TRUE((*a)->Step().ok());
    ASSERT_TRUE((*b)->Step().ok());
  }
  const ChurnCounts& n = (*a)->counts();
  EXPECT_EQ(n.rounds, 3000);
  EXPECT_GT(n.finished, 50);
  EXPECT_GT(n.preempted, 0);
  EXPECT_EQ((*a)->table().num_sequences(),
            static_cast<std::size_t>(n.prefills - n.finished - n.preempted));
  EXPECT_EQ(n.blocks_allocated - n.blocks_released,
            (*a)->allocator().num_blocks() - (*a)->allocator().num_free());
  const kvcache::BlockLayout la = (*a)->Layout(), lb = (*b)->Layout();
  EXPECT_EQ(la.blocks, lb.blocks);
  EXPECT_EQ(la.consecutive_pairs, lb.consecutive_pairs);
}

TEST(KvChurnTest, BadConfigIsInvalidArgumentNamingTheField) {
  ChurnConfig c;
  c.max_prompt = c.max_context;
  auto made = KvChurn::Create(c);
  ASSERT_EQ(made.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(made.status().message().find("prompt"), std::string::npos) << made.status().message();
}

TEST(AllocatorBlockTablesTest, EachRowGetsItsBlocksOnceWithinThePool) {
  const std::vector<int> lengths = {4096, 1, 0, 513, 4096, 2048, 16, 3000};
  auto t = AllocatorBlockTables(16, 4096, lengths, 3);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  ASSERT_EQ(t->tables.size(), lengths.size());
  std::set<kvcache::BlockId> seen;
  for (std::size_t i = 0; i < lengths.size(); ++i) {
    EXPECT_EQ(t->tables[i].size(), static_cast<std::size_t>((lengths[i] + 15) / 16)) << "row " << i;
    for (kvcache::BlockId b : t->tables[i]) {
      EXPECT_GE(b, 0);
      EXPECT_LT(b, t->pool_blocks);
      EXPECT_TRUE(seen.insert(b).second) << "block " << b << " in two rows";
    }
  }
  // Mostly consecutive, but not a fresh pool's perfect order.
  EXPECT_GT(t->layout.consecutive_fraction(), 0.5);
  auto again = AllocatorBlockTables(16, 4096, lengths, 3);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->tables, t->tables);
  EXPECT_EQ(again->pool_blocks, t->pool_blocks);
}

// The launch sweep's and the decode benchmark's batches: one row or many, short or long rows,
// a max_context far past them, many seeds. Every one gets its tables (a pinned row's decode
// once found the churning sequences holding every block: 1 row of 256, seed 127).
TEST(AllocatorBlockTablesTest, EveryBenchmarkBatchGetsItsTables) {
  for (int rows : {1, 4, 32}) {
    for (int length : {1, 17, 256, 4096}) {
      for (std::uint64_t seed = 100; seed < 132; ++seed) {  // 127: a row once starved
        const std::vector<int> lengths(rows, length);
        auto t = AllocatorBlockTables(16, 65536, lengths, seed);
        ASSERT_TRUE(t.ok()) << rows << " rows of " << length << ", seed " << seed << ": "
                            << t.status().ToString();
        for (std::size_t i = 0; i < lengths.size(); ++i) {
          EXPECT_EQ(t->tables[i].size(), static_cast<std::size_t>((length + 15) / 16));
        }
      }
    }
  }
}

TEST(AllocatorBlockTablesTest, LengthOutOfRangeIsInvalidArgument) {
  auto t = AllocatorBlockTables(16, 4096, {100, 4097});
  ASSERT_EQ(t.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(t.status().message().find("lengths[1] = 4097"), std::string::npos)
      << t.status().message();
}

}  // namespace
}  // namespace attnrt::tools
