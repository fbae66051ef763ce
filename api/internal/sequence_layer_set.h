// SequenceLayerSet: the (sequence, layer) pairs of one batch, so that a batch never holds two
// requests of one pair (the executor's planner refuses the second; the scheduler's batch
// selection leaves it for the next batch). Open addressing over a table of at least twice the
// batch, reused across batches: a slot is in use when its stamp is the batch's, so starting a
// batch clears nothing and a batch allocates nothing. Header-only.
// Thread safety: none; one thread uses a set.
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <vector>

#include <attnrt/config.h>

namespace attnrt::internal {

class SequenceLayerSet {
 public:
  // Empty, with room for n pairs.
  void Reset(std::size_t n) {
    const std::size_t want = std::bit_ceil(std::max<std::size_t>(8, 2 * n));
    if (want > slots_.size() || ++stamp_ == 0) {  // grown, or the stamps wrapped: clear for real
      slots_.assign(std::max(want, slots_.size()), Slot{});
      stamp_ = 1;
    }
  }

  // Adds the pair; false when it is already in.
  bool Insert(SequenceId sequence, int layer) {
    const std::size_t mask = slots_.size() - 1;
    std::uint64_t h = (sequence + 0x9e3779b97f4a7c15ull) * 0xbf58476d1ce4e5b9ull;
    h ^= static_cast<std::uint64_t>(layer) * 0x94d049bb133111ebull;
    h ^= h >> 31;
    for (std::size_t i = h & mask;; i = (i + 1) & mask) {
      Slot& slot = slots_[i];
      if (slot.stamp != stamp_) {
        slot = {sequence, layer, stamp_};
        return true;
      }
      if (slot.sequence == sequence && slot.layer == layer) return false;
    }
  }

 private:
  struct Slot {
    SequenceId sequence = 0;
    int layer = 0;
    std::uint32_t stamp = 0;
  };
  std::vector<Slot> slots_;
  std::uint32_t stamp_ = 0;
};

}  // namespace attnrt::internal
