// BatchPlanner::Plan on its own: a (sequence, layer) twice in one batch is refused from its
// second request on, whatever the ids (colliding hashes included) and however large the batch;
// the pairs of one batch never count against the next; block rows come from the planned entries.
// OpenBatch, the executors' batch formed in parts.
#include <gtest/gtest.h>

#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "kvcache/kvcache.h"
#include "runtime/batch_plan.h"

namespace attnrt::runtime {
namespace {

ModelShape PlanShape() {
  ModelShape s;
  s.num_layers = 64;
  s.num_q_heads = 4;
  s.num_kv_heads = 2;
  s.head_dim = 64;
  s.block_size = 4;
  s.max_context = 256;
  return s;
}

class BatchPlanTest : public ::testing::Test {
 protected:
  BatchPlanTest()
      : allocator_(4096), table_(PlanShape(), &allocator_), planner_(&table_, false, nullptr) {}

  void CreateAll(const std::vector<SequenceId>& ids) {
    for (SequenceId id : ids) ASSERT_TRUE(planner_.Create(id).ok());
  }

  Batch Requests(const std::vector<std::pair<SequenceId, int>>& pairs) {
    Batch b;
    for (const auto& [id, layer] : pairs) {
      BatchRequest r;
      r.sequence_id = id;
      r.layer = layer;
      r.q = r.k = r.v = dummy_.data();
      r.out = dummy_.data();
      b.requests.push_back(r);
    }
    return b;
  }

  std::vector<Half> dummy_ = std::vector<Half>(256);
  kvcache::BlockAllocator allocator_;
  kvcache::SequenceTable table_;
  BatchPlanner planner_;
};

// Ids that share their low 32 bits (a hash over the low bits alone puts them in one slot), each
// on many layers (pairs of one id meet in a probe chain), in batches of 1..256 with duplicates at random places, planned back to back.
TEST_F(BatchPlanTest, SecondRequestOfAPairIsRefusedAtAnyBatchSize) {
  std::vector<SequenceId> ids;
  for (SequenceId i = 0; i < 8; ++i) ids.push_back((i << 32) | 7);
  CreateAll(ids);
  std::mt19937_64 rng(11);
  for (int size : {1, 2, 3, 16, 64, 255, 256}) {
    std::vector<std::pair<SequenceId, int>> pairs;
    std::vector<bool> expect_dup;
    std::vector<std::pair<SequenceId, int>> seen;
    for (int i = 0; i < size; ++i) {
      std::pair<SequenceId, int> p{ids[rng() % ids.size()], static_cast<int>(rng() % 64)};
      if (i > 0 && rng() % 4 == 0) p = pairs[rng() % pairs.size()];  // a repeat on purpose
      bool dup = false;
      for (const auto& q : seen) dup = dup || q == p;
      if (!dup) seen.push_back(p);
      pairs.push_back(p);
      expect_dup.push_back(dup);
    }
    const Batch batch = Requests(pairs);
    BatchPlan plan;
    planner_.Plan(batch, &plan);
    std::size_t live = 0;
    for (int i = 0; i < size; ++i) {
      if (expect_dup[i]) {
        EXPECT_EQ(plan.statuses[i].code(), StatusCode::kInvalidArgument) << "size " << size << " i " << i;
        EXPECT_NE(plan.statuses[i].message().find("appears twice"), std::string::npos);
      } else {
        EXPECT_TRUE(plan.statuses[i].ok()) << "size " << size << " i " << i << ": "
                                           << plan.statuses[i].ToString();
        ++live;
      }
    }
    EXPECT_EQ(plan.live.size(), live);
    // The next batch plans the same pairs again: none of them is a duplicate of the last batch.
    BatchPlan again;
    planner_.Plan(Requests(seen), &again);
    for (const Status& s : again.statuses) EXPECT_TRUE(s.ok()) << s.ToString();
  }
}

// FillBlockRows reads each planned request's row from its entry: the blocks its length needs.
TEST_F(BatchPlanTest, BlockRowsAreTheTablesOfThePlannedSequences) {
  CreateAll({3, 9});
  std::vector<kvcache::BlockCopy> copies;
  ASSERT_TRUE(planner_.WithTable([&](kvcache::SequenceTable& t) {
    return t.Append(9, kvcache::SequenceTable::kAllLayers, 10, &copies).ok();
  }));
  const Batch batch = Requests({{9, 2}, {3, 0}});
  BatchPlan plan;
  planner_.Plan(batch, &plan);
  ASSERT_EQ(plan.live.size(), 2u);
  EXPECT_EQ(plan.live[0].kv_length, 11);
  EXPECT_EQ(plan.live[1].kv_length, 1);
  const std::size_t stride = 8;
  std::vector<std::int32_t> rows(2 * stride, -1);
  planner_.FillBlockRows(batch, plan.live, stride, rows.data(), &plan.statuses);
  for (const Status& s : plan.statuses) ASSERT_TRUE(s.ok()) << s.ToString();
  const auto blocks9 = *table_.Blocks(9);
  const auto blocks3 = *table_.Blocks(3);
  ASSERT_EQ(blocks9.size(), 3u);
  for (int j = 0; j < 3; ++j) EXPECT_EQ(rows[j], blocks9[j]);
  EXPECT_EQ(rows[3], -1);  // past ceil(11 / 4): untouched
  EXPECT_EQ(rows[stride], blocks3[0]);
  EXPECT_EQ(rows[stride + 1], -1);
}

// OpenBatch: the first part opens the batch (taking the lock once), later parts append, a
// malformed part changes nothing, Close hands the batch and the lock over with the closing
// requests appended (ready_event too), and with none open makes a fresh batch; Drop releases
// the lock.
TEST_F(BatchPlanTest, OpenBatchOpensOnceAppendsClosesAndDrops) {
  struct State {
    Batch batch;
    BatchPlan plan;
  };
  std::mutex submission;
  int opened = 0;
  auto open = [&](std::unique_lock<std::mutex>* hold) {
    *hold = std::unique_lock<std::mutex>(submission);
    ++opened;
    return std::make_unique<State>();
  };
  OpenBatch<std::unique_ptr<State>> open_batch;
  EXPECT_FALSE(open_batch.is_open());
  EXPECT_EQ(open_batch.parted(), 0);

  ASSERT_TRUE(open_batch.Add(Requests({{1, 0}, {2, 0}}), 8, open).ok());
  ASSERT_TRUE(open_batch.Add(Requests({{3, 0}}), 8, open).ok());
  EXPECT_EQ(opened, 1);
  EXPECT_EQ(open_batch.parted(), 3);
  EXPECT_FALSE(submission.try_lock());  // held by the open batch
  // Malformed parts: empty, past max_batch_size, with a ready_event. Nothing changes.
  EXPECT_EQ(open_batch.Add(Batch{}, 8, open).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(open_batch.Add(Requests({{4, 0}, {5, 0}}), 4, open).code(),
            StatusCode::kInvalidArgument);
  Batch with_event = Requests({{6, 0}});
  with_event.ready_event = reinterpret_cast<DeviceEvent>(0x10);
  EXPECT_EQ(open_batch.Add(with_event, 8, open).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(open_batch.parted(), 3);

  Batch closing = Requests({{7, 1}});
  closing.ready_event = reinterpret_cast<DeviceEvent>(0x20);
  std::unique_lock<std::mutex> hold;
  std::unique_ptr<State> state = open_batch.Close(std::move(closing), &hold, open);
  EXPECT_EQ(opened, 1);
  EXPECT_TRUE(hold.owns_lock());
  EXPECT_FALSE(open_batch.is_open());
  ASSERT_EQ(state->batch.requests.size(), 4u);
  const SequenceId order[] = {1, 2, 3, 7};
  for (int i = 0; i < 4; ++i) EXPECT_EQ(state->batch.requests[i].sequence_id, order[i]);
  EXPECT_EQ(state->batch.ready_event, reinterpret_cast<DeviceEvent>(0x20));
  hold.unlock();

  // None open: a fresh batch holding the closing requests, the lock taken.
  state = open_batch.Close(Requests({{8, 0}}), &hold, open);
  EXPECT_EQ(opened, 2);
  EXPECT_TRUE(hold.owns_lock());
  ASSERT_EQ(state->batch.requests.size(), 1u);
  EXPECT_EQ(state->batch.requests[0].sequence_id, 8u);
  hold.unlock();

  // Drop: the requests handed over so far, the lock released.
  ASSERT_TRUE(open_batch.Add(Requests({{9, 0}, {10, 0}}), 8, open).ok());
  EXPECT_EQ(open_batch.Drop(), 2);
  EXPECT_FALSE(open_batch.is_open());
  EXPECT_TRUE(submission.try_lock());
  submission.unlock();
}

}  // namespace
}  // namespace attnrt::runtime
