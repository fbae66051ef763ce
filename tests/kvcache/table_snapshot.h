// A full snapshot of a SequenceTable and its BlockAllocator (every sequence's table and per-layer
// lengths, every block's reference count, the free count), for tests that check a failed call
// changed nothing. Header-only.
#pragma once

#include <gtest/gtest.h>

#include <map>
#include <ostream>
#include <vector>

#include "kvcache/kvcache.h"

namespace attnrt::kvcache::testing {

struct TableSnapshot {
  struct Entry {
    std::vector<BlockId> blocks;
    std::vector<int> lengths;
    friend bool operator==(const Entry&, const Entry&) = default;
  };
  std::map<SequenceId, Entry> sequences;
  std::vector<int> ref_counts;
  std::int32_t num_free = 0;
  friend bool operator==(const TableSnapshot&, const TableSnapshot&) = default;
};

inline TableSnapshot TakeSnapshot(const SequenceTable& table, const BlockAllocator& allocator) {
  TableSnapshot snap;
  for (SequenceId id : table.SequenceIds()) {
    TableSnapshot::Entry& e = snap.sequences[id];
    auto blocks = table.Blocks(id);
    EXPECT_TRUE(blocks.ok()) << blocks.status().ToString();
    if (blocks.ok()) e.blocks.assign(blocks->begin(), blocks->end());
    for (int l = 0; l < table.shape().num_layers; ++l) {
      auto len = table.Length(id, l);
      EXPECT_TRUE(len.ok()) << len.status().ToString();
      e.lengths.push_back(len.ok() ? *len : -1);
    }
  }
  EXPECT_EQ(snap.sequences.size(), table.num_sequences());
  for (BlockId b = 0; b < allocator.num_blocks(); ++b) snap.ref_counts.push_back(allocator.ref_count(b));
  snap.num_free = allocator.num_free();
  return snap;
}

inline void PrintTo(const TableSnapshot& s, std::ostream* os) {
  *os << "{free " << s.num_free << "; refs [";
  for (int r : s.ref_counts) *os << r << ' ';
  *os << "]";
  for (const auto& [id, e] : s.sequences) {
    *os << "; seq " << id << " blocks [";
    for (BlockId b : e.blocks) *os << b << ' ';
    *os << "] lengths [";
    for (int l : e.lengths) *os << l << ' ';
    *os << "]";
  }
  *os << "}";
}

}  // namespace attnrt::kvcache::testing
