// Randomized property test of SequenceTable + BlockAllocator against a simple model: random
// create / append / append-token / fork / free (and invalid calls) on a small pool, checking
// after every operation that tables, lengths and reference counts match the model, that a block
// is held twice only through counted sharing, that none leaks, and that the free count is right.
// Block contents are tracked symbolically (one tag per (block, layer, offset)): copies the table
// asks for are applied to the symbolic store, every write checks its block is held once, and
// every sequence must read back exactly the tags it wrote or inherited, so a copy-on-write that
// mutated a shared block shows up as another sequence's wrong tag.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <iterator>
#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "kvcache/kvcache.h"

namespace attnrt::kvcache {
namespace {

constexpr int kAll = SequenceTable::kAllLayers;
constexpr int kNumBlocks = 48;
constexpr int kIdRange = 40;        // ids drawn from [0, kIdRange): duplicates and misses happen
constexpr int kOpsPerRun = 100'000;  // x 6 configurations = 600k operations
constexpr int kContentCheckEvery = 16;

struct ModelSeq {
  std::vector<BlockId> blocks;
  std::vector<int> lengths;                     // [layer]
  std::vector<std::vector<std::uint64_t>> tags;  // [layer][position]: what a read must see
};

// Seeded and the same with every standard library (std::mt19937_64 is fully specified; the
// standard distributions are not, so the range reduction is ours).
class Rng {
 public:
  explicit Rng(std::uint64_t seed) : engine_(seed) {}
  int NextInt(int lo, int hi) {  // uniform enough in [lo, hi] for a test
    return lo + static_cast<int>(engine_() % static_cast<std::uint64_t>(hi - lo + 1));
  }

 private:
  std::mt19937_64 engine_;
};

struct PropertyCase {
  std::uint64_t seed;
  int block_size;
};

class SequenceTablePropertyTest : public ::testing::TestWithParam<PropertyCase> {
 protected:
  void SetUp() override {
    shape_.num_layers = 3;
    shape_.num_q_heads = 2;
    shape_.num_kv_heads = 1;
    shape_.head_dim = 64;
    shape_.block_size = GetParam().block_size;
    shape_.max_context = 8 * GetParam().block_size + 5;  // not a whole number of blocks
    ASSERT_TRUE(shape_.Validate().ok());
    refs_.assign(kNumBlocks, 0);
    store_.assign(static_cast<std::size_t>(kNumBlocks) * shape_.num_layers * shape_.block_size, 0);
  }

  std::uint64_t& Cell(BlockId b, int layer, int offset) {
    return store_[(static_cast<std::size_t>(b) * shape_.num_layers + layer) * shape_.block_size +
                  offset];
  }

  int ModelFree() const { return static_cast<int>(std::count(refs_.begin(), refs_.end(), 0)); }

  // Full structural check: real tables, lengths and reference counts equal the model's; the
  // model's counts equal the number of tables holding each block; no table holds a block twice;
  // the free count is the number of blocks nobody holds.
  void CheckStructure(const SequenceTable& table, const BlockAllocator& allocator) {
    ASSERT_EQ(table.num_sequences(), model_.size());
    std::vector<int> holders(kNumBlocks, 0);
    for (const auto& [id, m] : model_) {
      auto blocks = table.Blocks(id);
      ASSERT_TRUE(blocks.ok()) << blocks.status().ToString();
      ASSERT_TRUE(std::equal(blocks->begin(), blocks->end(), m.blocks.begin(), m.blocks.end()))
          << "sequence " << id << " table differs from the model";
      for (int l = 0; l < shape_.num_layers; ++l) {
        auto len = table.Length(id, l);
        ASSERT_TRUE(len.ok());
        ASSERT_EQ(*len, m.lengths[l]) << "sequence " << id << " layer " << l;
      }
      const int max_len = *std::max_element(m.lengths.begin(), m.lengths.end());
      ASSERT_EQ(m.blocks.size(),
                static_cast<std::size_t>((max_len + shape_.block_size - 1) / shape_.block_size));
      std::vector<BlockId> sorted = m.blocks;
      std::sort(sorted.begin(), sorted.end());
      ASSERT_EQ(std::adjacent_find(sorted.begin(), sorted.end()), sorted.end())
          << "sequence " << id << " holds a block twice";
      for (BlockId b : m.blocks) {
        ASSERT_GE(b, 0);
        ASSERT_LT(b, kNumBlocks);
        ++holders[b];
      }
    }
    for (BlockId b = 0; b < kNumBlocks; ++b) {
      ASSERT_EQ(refs_[b], holders[b]) << "model ref count of block " << b;
      ASSERT_EQ(allocator.ref_count(b), holders[b]) << "ref count of block " << b;
    }
    ASSERT_EQ(allocator.num_free(), ModelFree()) << "free count (a leak or a double release)";
    const Status runs = allocator.CheckInvariantsForTesting();  // the free runs behind it
    ASSERT_TRUE(runs.ok()) << runs.ToString();
  }

  // Every sequence reads back (through its table) the tags it wrote or inherited.
  void CheckContents() {
    for (const auto& [id, m] : model_) {
      for (int l = 0; l < shape_.num_layers; ++l) {
        for (int p = 0; p < m.lengths[l]; ++p) {
          const BlockId b = m.blocks[static_cast<std::size_t>(p / shape_.block_size)];
          ASSERT_EQ(Cell(b, l, p % shape_.block_size), m.tags[l][p])
              << "sequence " << id << " layer " << l << " position " << p << " (block " << b
              << ") lost its data";
        }
      }
    }
  }

  // Predicts and checks one Append (or AppendToken when `token`), then mirrors it in the model.
  void DoAppend(SequenceTable& table, const BlockAllocator& allocator, SequenceId id, int layer,
                int n, bool token) {
    std::vector<BlockCopy> copies;
    const auto it = model_.find(id);
    StatusCode expect = StatusCode::kOk;
    int old_len = 0;
    std::int64_t needed = 0;
    if (layer != kAll && (layer < 0 || layer >= shape_.num_layers)) {
      expect = StatusCode::kInvalidArgument;
    } else if (n < 1) {
      expect = StatusCode::kInvalidArgument;
    } else if (it == model_.end()) {
      expect = StatusCode::kNotFound;
    } else {
      const ModelSeq& m = it->second;
      if (layer == kAll &&
          std::adjacent_find(m.lengths.begin(), m.lengths.end(), std::not_equal_to<>()) !=
              m.lengths.end()) {
        expect = StatusCode::kFailedPrecondition;
      } else {
        old_len = m.lengths[layer == kAll ? 0 : layer];
        const int new_len = old_len + n;
        if (new_len > shape_.max_context) {
          expect = StatusCode::kInvalidArgument;
        } else {
          const std::size_t first = old_len / shape_.block_size;
          const std::size_t end = (new_len + shape_.block_size - 1) / shape_.block_size;
          for (std::size_t j = first; j < std::min(end, m.blocks.size()); ++j) {
            if (refs_[m.blocks[j]] > 1) ++needed;
          }
          if (end > m.blocks.size()) needed += end - m.blocks.size();
          if (needed > ModelFree()) expect = StatusCode::kResourceExhausted;
        }
      }
    }

    int first_pos = -1;
    StatusCode got;
    if (token) {
      auto token = table.AppendToken(id, layer, &copies);
      got = token.status().code();
      if (token.ok()) {
        first_pos = token->position;
        auto blocks = table.Blocks(id);
        ASSERT_EQ(token->block, (*blocks)[token->position / shape_.block_size]);
        ASSERT_EQ(token->offset, token->position % shape_.block_size);
      }
    } else {
      auto pos = table.Append(id, layer, n, &copies);
      got = pos.status().code();
      if (pos.ok()) first_pos = *pos;
    }
    ASSERT_EQ(got, expect) << "append(" << id << ", layer " << layer << ", n " << n << ")";
    ++outcomes_[std::string(StatusCodeName(got))];
    if (expect != StatusCode::kOk) {
      ASSERT_TRUE(copies.empty());
      return;  // the structural check after the operation proves nothing changed
    }
    ASSERT_EQ(first_pos, old_len);

    // Copy-on-write: one copy per shared block written, in table order, into a block nobody held.
    ModelSeq& m = it->second;
    const int new_len = old_len + n;
    const std::size_t first = old_len / shape_.block_size;
    const std::size_t end = (new_len + shape_.block_size - 1) / shape_.block_size;
    std::size_t next_copy = 0;
    for (std::size_t j = first; j < std::min(end, m.blocks.size()); ++j) {
      if (refs_[m.blocks[j]] <= 1) continue;
      ASSERT_LT(next_copy, copies.size()) << "a shared block was not copied before the write";
      const BlockCopy c = copies[next_copy++];
      ASSERT_EQ(c.src, m.blocks[j]);
      ++outcomes_["copy-on-write"];
      ASSERT_EQ(refs_[c.dst], 0) << "copy-on-write target " << c.dst << " was already held";
      // ApplyCopies, symbolically: the whole block, every layer.
      for (int l = 0; l < shape_.num_layers; ++l) {
        for (int o = 0; o < shape_.block_size; ++o) Cell(c.dst, l, o) = Cell(c.src, l, o);
      }
      --refs_[c.src];
      refs_[c.dst] = 1;
      m.blocks[j] = c.dst;
    }
    ASSERT_EQ(next_copy, copies.size()) << "a block was copied that did not need it";
    auto real = table.Blocks(id);
    ASSERT_TRUE(real.ok());
    ASSERT_EQ(real->size(), std::max(end, m.blocks.size()));
    for (std::size_t j = m.blocks.size(); j < end; ++j) {
      const BlockId b = (*real)[j];
      ASSERT_EQ(refs_[b], 0) << "new block " << b << " was already held";
      refs_[b] = 1;
      m.blocks.push_back(b);
    }

    // The writes: each lands in a block this sequence holds alone, in the model and for real.
    for (int l = 0; l < shape_.num_layers; ++l) {
      if (layer != kAll && layer != l) continue;
      for (int p = old_len; p < new_len; ++p) {
        const BlockId b = m.blocks[static_cast<std::size_t>(p / shape_.block_size)];
        ASSERT_EQ(refs_[b], 1) << "write into shared block " << b;
        ASSERT_EQ(allocator.ref_count(b), 1) << "write into shared block " << b;
        const std::uint64_t tag = ++next_tag_;
        Cell(b, l, p % shape_.block_size) = tag;
        m.tags[l].push_back(tag);
      }
      m.lengths[l] = new_len;
    }
  }

  ModelShape shape_;
  std::map<SequenceId, ModelSeq> model_;
  std::vector<int> refs_;
  std::vector<std::uint64_t> store_;  // [block][layer][offset] symbolic contents
  std::uint64_t next_tag_ = 0;
  std::map<std::string, int> outcomes_;  // what happened how often, to show coverage
};

TEST_P(SequenceTablePropertyTest, RandomOperationsMatchTheModel) {
  BlockAllocator allocator(kNumBlocks);
  SequenceTable table(shape_, &allocator);
  Rng rng(GetParam().seed);
  std::map<std::string, int>& outcomes = outcomes_;

  // Mostly a live sequence (so most calls do something), sometimes any id (misses, duplicates).
  auto pick_id = [&]() -> SequenceId {
    if (model_.empty() || rng.NextInt(0, 9) < 2) {
      return static_cast<SequenceId>(rng.NextInt(0, kIdRange - 1));
    }
    auto it = model_.begin();
    std::advance(it, rng.NextInt(0, static_cast<int>(model_.size()) - 1));
    return it->first;
  };
  for (int op = 0; op < kOpsPerRun; ++op) {
    const SequenceId id = pick_id();
    const int roll = rng.NextInt(0, 99);
    if (roll < 12) {  // create
      const bool exists = model_.contains(id);
      Status s = table.Create(id);
      ASSERT_EQ(s.code(), exists ? StatusCode::kAlreadyExists : StatusCode::kOk) << s.ToString();
      if (!exists) {
        ModelSeq m;
        m.lengths.assign(shape_.num_layers, 0);
        m.tags.assign(shape_.num_layers, {});
        model_.emplace(id, std::move(m));
      }
      ++outcomes[exists ? "create dup" : "create"];
    } else if (roll < 22) {  // free
      auto it = model_.find(id);
      Status s = table.Free(id);
      ASSERT_EQ(s.code(), it == model_.end() ? StatusCode::kNotFound : StatusCode::kOk);
      if (it != model_.end()) {
        for (BlockId b : it->second.blocks) --refs_[b];
        model_.erase(it);
      }
      ++outcomes[it == model_.end() ? "free missing" : "free"];
    } else if (roll < 34) {  // fork
      const SequenceId child = static_cast<SequenceId>(rng.NextInt(0, kIdRange - 1));
      auto parent = model_.find(id);
      const StatusCode expect = parent == model_.end()   ? StatusCode::kNotFound
                                : model_.contains(child) ? StatusCode::kAlreadyExists
                                                         : StatusCode::kOk;
      Status s = table.Fork(id, child);
      ASSERT_EQ(s.code(), expect) << s.ToString();
      if (expect == StatusCode::kOk) {
        ModelSeq copy = parent->second;
        for (BlockId b : copy.blocks) ++refs_[b];
        model_.emplace(child, std::move(copy));
      }
      ++outcomes[expect == StatusCode::kOk ? "fork" : "fork error"];
    } else if (roll < 62) {  // decode: one token of one layer (sometimes all layers)
      const int layer = rng.NextInt(0, 9) == 0 ? kAll : rng.NextInt(0, shape_.num_layers - 1);
      ASSERT_NO_FATAL_FAILURE(DoAppend(table, allocator, id, layer, 1, /*token=*/true));
      ++outcomes["append token"];
    } else if (roll < 96) {  // append of several tokens, all layers or one
      int layer = rng.NextInt(0, 2) == 0 ? rng.NextInt(0, shape_.num_layers - 1) : kAll;
      int n = rng.NextInt(1, 2 * shape_.block_size + 3);
      if (auto it = model_.find(id); it != model_.end() && rng.NextInt(0, 1) == 0) {
        // Bring the shortest layer level with the longest, so that kAllLayers works again.
        const auto& len = it->second.lengths;
        const auto [lo, hi] = std::minmax_element(len.begin(), len.end());
        if (*lo < *hi) {
          layer = static_cast<int>(lo - len.begin());
          n = *hi - *lo;
        }
      }
      ASSERT_NO_FATAL_FAILURE(DoAppend(table, allocator, id, layer, n, /*token=*/false));
      ++outcomes["append"];
    } else {  // invalid arguments
      const int layer = rng.NextInt(0, 1) ? shape_.num_layers + rng.NextInt(0, 3) : -2;
      const int n = rng.NextInt(0, 1) ? rng.NextInt(-3, 0) : 1;
      ASSERT_NO_FATAL_FAILURE(DoAppend(table, allocator, id, layer, n, /*token=*/false));
      ++outcomes["invalid"];
    }
    ASSERT_NO_FATAL_FAILURE(CheckStructure(table, allocator)) << "after operation " << op;
    if (op % kContentCheckEvery == 0) {
      ASSERT_NO_FATAL_FAILURE(CheckContents()) << "after operation " << op;
    }
  }
  ASSERT_NO_FATAL_FAILURE(CheckContents());

  // Free everything: nothing may leak.
  std::vector<SequenceId> ids;
  for (const auto& [id, m] : model_) ids.push_back(id);
  for (SequenceId id : ids) {
    ASSERT_TRUE(table.Free(id).ok());
    for (BlockId b : model_[id].blocks) --refs_[b];
    model_.erase(id);
  }
  ASSERT_NO_FATAL_FAILURE(CheckStructure(table, allocator));
  EXPECT_EQ(allocator.num_free(), kNumBlocks);

  std::string summary;
  for (const auto& [what, count] : outcomes) summary += what + " " + std::to_string(count) + "; ";
  RecordProperty("outcomes", summary);
  std::printf("%s\n", summary.c_str());
  // The run must have exercised sharing, copies and every error, not only the easy paths.
  EXPECT_GT(outcomes["fork"], 1000) << summary;
  EXPECT_GT(outcomes["copy-on-write"], 1000) << summary;
  EXPECT_GT(outcomes["OK"], 15000) << summary;
  EXPECT_GT(outcomes["ResourceExhausted"], 500) << summary;
  EXPECT_GT(outcomes["InvalidArgument"], 500) << summary;  // beyond max_context, bad layer, n
  EXPECT_GT(outcomes["FailedPrecondition"], 100) << summary;  // kAllLayers, unequal lengths
  EXPECT_GT(outcomes["NotFound"], 100) << summary;
}

INSTANTIATE_TEST_SUITE_P(Seeds, SequenceTablePropertyTest,
                         ::testing::Values(PropertyCase{1, 8}, PropertyCase{2, 8},
                                           PropertyCase{3, 8}, PropertyCase{11, 16},
                                           PropertyCase{12, 16}, PropertyCase{13, 16}),
                         [](const auto& info) {
                           return "seed" + std::to_string(info.param.seed) + "_block" +
                                  std::to_string(info.param.block_size);
                         });

}  // namespace
}  // namespace attnrt::kvcache
