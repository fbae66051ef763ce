// BlockLayout: how many adjacent block-table entries are consecutive ascending in the pool.
#include "kvcache/kvcache.h"

namespace attnrt::kvcache {

void BlockLayout::Add(std::span<const BlockId> table) {
  if (table.empty()) return;
  ++tables;
  blocks += static_cast<std::int64_t>(table.size());
  adjacent_pairs += static_cast<std::int64_t>(table.size()) - 1;
  for (std::size_t i = 1; i < table.size(); ++i) {
    if (table[i] == table[i - 1] + 1) ++consecutive_pairs;
  }
}

void BlockLayout::Add(const BlockLayout& other) {
  tables += other.tables;
  blocks += other.blocks;
  adjacent_pairs += other.adjacent_pairs;
  consecutive_pairs += other.consecutive_pairs;
}

double BlockLayout::consecutive_fraction() const {
  if (adjacent_pairs == 0) return 1.0;
  return static_cast<double>(consecutive_pairs) / static_cast<double>(adjacent_pairs);
}

double BlockLayout::mean_run_blocks() const {
  // Each table is one run plus one more per break (an adjacent pair that is not consecutive).
  const std::int64_t runs = tables + (adjacent_pairs - consecutive_pairs);
  return runs > 0 ? static_cast<double>(blocks) / static_cast<double>(runs) : 0.0;
}

BlockLayout MeasureBlockLayout(const SequenceTable& table) {
  BlockLayout layout;
  for (SequenceId id : table.SequenceIds()) {
    StatusOr<std::span<const BlockId>> blocks = table.Blocks(id);
    if (blocks.ok()) layout.Add(*blocks);
  }
  return layout;
}

}  // namespace attnrt::kvcache
