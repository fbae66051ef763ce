// RecordPool (scheduler/request_record.h): the staged working set is allocated up front from
// the executor's staging memory, a backlog past it grows on the heap, and device-visible
// records are handed out first again once the backlog drains.
#include "scheduler/request_record.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <new>
#include <set>
#include <vector>

namespace attnrt::scheduler::internal {
namespace {

// Staging memory from the heap, remembering what it handed out.
class FakeStaging final : public runtime::StagingMemory {
 public:
  void* Allocate(std::size_t bytes) override {
    void* p = ::operator new(bytes, std::align_val_t{256});
    blocks.insert(p);
    return p;
  }
  void Free(void* p) override {
    blocks.erase(p);
    ::operator delete(p, std::align_val_t{256});
  }
  std::set<void*> blocks;
};

constexpr std::size_t kQ = 64, kKv = 32, kLse = 4;
constexpr int kSlab = 16;

TEST(RecordPoolTest, StagedRecordsComeFirstAfterABacklogDrains) {
  FakeStaging staging;
  constexpr std::size_t kStaged = 48;
  {
    RecordPool pool(kQ, kKv, kLse, kSlab, &staging, kStaged);
    ASSERT_GE(pool.capacity(), kStaged);
    const std::size_t staged_capacity = pool.capacity();
    // A backlog: every staged record and as many again from the heap.
    std::vector<RequestRecord*> held;
    for (std::size_t i = 0; i < 2 * staged_capacity; ++i) held.push_back(pool.Acquire());
    std::size_t visible = 0;
    for (RequestRecord* r : held) visible += r->device_visible ? 1 : 0;
    EXPECT_EQ(visible, staged_capacity) << "every staged record is used before the heap";
    EXPECT_GT(pool.capacity(), staged_capacity) << "the backlog grew on the heap";
    // Drained, in an order that mixes both kinds.
    for (std::size_t i = 0; i < held.size(); i += 2) pool.Release(held[i]);
    for (std::size_t i = 1; i < held.size(); i += 2) pool.Release(held[i]);
    // The working set again: device-visible only, through both ways of taking records. The
    // shard cache this thread refilled during the backlog may still hold heap records; past
    // them, every record taken is device-visible.
    std::vector<RequestRecord*> again(staged_capacity - ShardedFreeList<RequestRecord>::kRefill);
    pool.AcquireBulk(again.data(), again.size());
    for (RequestRecord* r : again) EXPECT_TRUE(r->device_visible);
    pool.ReleaseBulk(again.data(), again.size());
    std::size_t heap_first = 0;
    for (std::size_t i = 0; i < staged_capacity; ++i) {
      RequestRecord* r = pool.Acquire();
      if (!r->device_visible) ++heap_first;
      again.push_back(r);
    }
    EXPECT_LE(heap_first, ShardedFreeList<RequestRecord>::kRefill);
  }
  EXPECT_TRUE(staging.blocks.empty()) << "the pool gives its staging back";
}

TEST(RecordPoolTest, WithoutStagingEveryRecordIsOnTheHeap) {
  RecordPool pool(kQ, kKv, kLse, kSlab);
  std::vector<RequestRecord*> held(100);
  pool.AcquireBulk(held.data(), held.size());
  held.push_back(pool.Acquire());
  std::set<RequestRecord*> distinct(held.begin(), held.end());
  EXPECT_EQ(distinct.size(), held.size());
  for (RequestRecord* r : held) {
    EXPECT_FALSE(r->device_visible);
    ASSERT_NE(r->q, nullptr);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(r->q) % 64, 0u);
  }
  pool.ReleaseBulk(held.data(), held.size());
}

}  // namespace
}  // namespace attnrt::scheduler::internal
