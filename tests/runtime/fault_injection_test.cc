// Fault injection into the CPU executor (runtime/fault_injection.h): a failed block allocation,
// copy-on-write copy, launch or whole batch fails exactly the requests it touches, each once with
// a Status; the others run and match the dense reference; block accounting stays exact; the
// executor keeps serving.
#include "runtime/fault_injection.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "runtime/cpu_executor.h"
#include "tests/runtime/executor_harness.h"

namespace attnrt::runtime {
namespace {

using testing::MakeRequest;
using testing::MatchesExpected;
using testing::OwnedRequest;
using testing::RandomWorkload;
using testing::SubmitAndWait;

std::unique_ptr<CpuExecutor> MakeExecutor(int num_blocks = 256) {
  return testing::MakeCpuExecutor(num_blocks);
}

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

bool StillPoisoned(const OwnedRequest& r) {
  return std::all_of(r.out.begin(), r.out.end(),
                     [](Half h) { return attnrt::testing::IsNaN(h); });
}

// The accounting invariant, exact: every block a live sequence holds has a reference count equal
// to the number of sequences holding it, and in-use blocks are exactly those. Needs no batch
// running (call after Wait()).
void ExpectExactAccounting(CpuExecutor& ex) {
  const kvcache::KvCache& cache = ex.cache();
  std::map<kvcache::BlockId, int> holders;
  for (SequenceId id : cache.sequences().SequenceIds()) {
    auto blocks = cache.sequences().Blocks(id);
    ASSERT_TRUE(blocks.ok());
    for (kvcache::BlockId b : *blocks) ++holders[b];
  }
  for (const auto& [block, count] : holders) {
    EXPECT_EQ(cache.allocator().ref_count(block), count) << "block " << block;
  }
  EXPECT_EQ(cache.num_blocks() - cache.allocator().num_free(),
            static_cast<std::int32_t>(holders.size()));
  EXPECT_EQ(ex.stats().kv_blocks_in_use, static_cast<std::int64_t>(holders.size()));
  EXPECT_EQ(ex.stats().sequences, static_cast<std::int64_t>(cache.sequences().num_sequences()));
}

TEST(FaultPointTest, SkipsThenFailsCountThenDisarms) {
  FaultPoint p;
  EXPECT_FALSE(p.armed());
  EXPECT_FALSE(p.Hit());
  p.Arm(/*count=*/2, /*skip=*/3);
  std::vector<bool> hits;
  for (int i = 0; i < 7; ++i) hits.push_back(p.Hit());
  EXPECT_EQ(hits, (std::vector<bool>{false, false, false, true, true, false, false}));
  EXPECT_FALSE(p.armed());
  EXPECT_EQ(p.injected(), 2);
  p.Arm(5);
  p.Disarm();
  EXPECT_FALSE(p.Hit());
  EXPECT_EQ(p.injected(), 2);
}

TEST(FaultInjectionTest, ExecutorsShareAScopedInjectionOrUseTheirOwn) {
  auto own = MakeExecutor();
  {
    ScopedFaultInjectionForTesting scoped;
    auto a = MakeExecutor();
    auto b = MakeExecutor();
    EXPECT_EQ(&a->faults(), &scoped.faults());
    EXPECT_EQ(&b->faults(), &scoped.faults());
    EXPECT_NE(&own->faults(), &scoped.faults());
  }
  auto after = MakeExecutor();
  EXPECT_NE(&after->faults(), &own->faults());
  CpuExecutorOptions o;
  o.shape = testing::SmallExecutorShape();
  o.faults = std::make_shared<FaultInjection>();
  auto given = CpuExecutor::Create(o);
  ASSERT_TRUE(given.ok());
  EXPECT_EQ(&(*given)->faults(), o.faults.get());
}

// Three sequences, one batch: two need a new block (their length is a multiple of the block
// size), one does not. The first allocation fails: that request alone fails with
// ResourceExhausted and its sequence is untouched; the others run and match; a retry succeeds.
TEST(FaultInjectionTest, FailedBlockAllocationFailsOnlyThatRequest) {
  auto ex = MakeExecutor();
  RandomWorkload w(*ex, 1);
  testing::BlockAllocationFault fault;
  ASSERT_NO_FATAL_FAILURE(testing::RunBlockAllocationFault(*ex, ex->faults(), w, &fault));
  const testing::SyncResult& r = fault.result;
  EXPECT_EQ(r.calls, 1);
  EXPECT_TRUE(Contains(r.statuses[0].message(), "request 0")) << r.statuses[0].ToString();
  EXPECT_TRUE(StillPoisoned(fault.reqs[0]));
  const std::int64_t in_use = fault.blocks_in_use_before;
  ExpectExactAccounting(*ex);

  // Not lost: the retry runs.
  std::vector<OwnedRequest> retry = {MakeRequest(ex->shape(), 1, 0, w.rng())};
  w.shadow().Expect(retry[0]);
  testing::SyncResult r2 = SubmitAndWait(*ex, RandomWorkload::ToBatch(retry));
  ASSERT_TRUE(r2.statuses[0].ok()) << r2.statuses[0].ToString();
  EXPECT_TRUE(MatchesExpected(retry[0]));
  EXPECT_EQ(ex->stats().kv_blocks_in_use, in_use + 2);
  ExpectExactAccounting(*ex);
}

// A copy-on-write that fails to get its block leaves the shared block shared and the child's
// table as it was.
TEST(FaultInjectionTest, FailedCopyOnWriteAllocationLeavesTheForkShared) {
  auto ex = MakeExecutor();
  RandomWorkload w(*ex, 2);
  ASSERT_TRUE(ex->CreateSequence(1).ok());
  w.shadow().Create(1);
  for (int l = 0; l < 3; ++l) w.Prefill(1, l, 10);
  ASSERT_TRUE(ex->ForkSequence(1, 2).ok());
  w.shadow().Fork(1, 2);
  const kvcache::BlockId shared = (*ex->cache().sequences().Blocks(1))[0];
  ASSERT_EQ(ex->cache().allocator().ref_count(shared), 2);

  std::vector<OwnedRequest> reqs = {MakeRequest(ex->shape(), 2, 1, w.rng())};
  ex->faults().block_allocation.Arm(1);
  testing::SyncResult r = SubmitAndWait(*ex, RandomWorkload::ToBatch(reqs));
  EXPECT_EQ(r.statuses[0].code(), StatusCode::kResourceExhausted) << r.statuses[0].ToString();
  EXPECT_EQ(ex->cache().allocator().ref_count(shared), 2);
  EXPECT_EQ((*ex->cache().sequences().Blocks(2))[0], shared);
  EXPECT_EQ(*ex->SequenceLength(2, 1), 10);
  EXPECT_EQ(ex->stats().kv_blocks_in_use, 1);
  ExpectExactAccounting(*ex);

  // Parent and child then diverge correctly.
  std::vector<OwnedRequest> next = {MakeRequest(ex->shape(), 2, 1, w.rng()),
                                    MakeRequest(ex->shape(), 1, 1, w.rng())};
  w.shadow().Expect(next[0]);
  w.shadow().Expect(next[1]);
  testing::SyncResult r2 = SubmitAndWait(*ex, RandomWorkload::ToBatch(next));
  ASSERT_TRUE(r2.statuses[0].ok() && r2.statuses[1].ok());
  EXPECT_TRUE(MatchesExpected(next[0]));
  EXPECT_TRUE(MatchesExpected(next[1]));
  ExpectExactAccounting(*ex);
}

// A prefill needing three blocks (one copy-on-write, two new) whose third allocation fails gives
// the first two back: the free list, every count and the table end exactly as before.
TEST(FaultInjectionTest, PrefillWhoseThirdAllocationFailsRollsBackExactly) {
  auto ex = MakeExecutor(/*num_blocks=*/32);
  RandomWorkload w(*ex, 3);
  ASSERT_TRUE(ex->CreateSequence(1).ok());
  w.shadow().Create(1);
  w.Prefill(1, 0, 10);
  ASSERT_TRUE(ex->ForkSequence(1, 2).ok());
  w.shadow().Fork(1, 2);
  const std::int32_t free_before = ex->cache().allocator().num_free();
  // The block a new sequence would get now (given back at once: the allocator is as it was).
  const kvcache::BlockId fresh = *ex->cache().allocator().Allocate();
  ASSERT_TRUE(ex->cache().allocator().Release(fresh).ok());

  std::vector<Half> k(30 * ex->shape().kv_token_elems()), v(k.size());
  attnrt::testing::FillNormal(k, w.rng());
  attnrt::testing::FillNormal(v, w.rng());
  ex->faults().block_allocation.Arm(/*count=*/1, /*skip=*/2);
  const Status s = ex->Prefill(2, 0, 30, k.data(), v.data());
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted) << s.ToString();
  EXPECT_EQ(ex->cache().allocator().num_free(), free_before);
  EXPECT_EQ(*ex->SequenceLength(2, 0), 10);
  EXPECT_EQ(ex->cache().sequences().Blocks(2)->size(), 1u);
  ExpectExactAccounting(*ex);

  // The allocator hands out the same blocks it would have without the failed prefill.
  ASSERT_TRUE(ex->CreateSequence(3).ok());
  w.shadow().Create(3);
  w.Prefill(3, 0, 1);
  EXPECT_EQ((*ex->cache().sequences().Blocks(3))[0], fresh);

  // The retry succeeds and both sides of the fork decode right.
  w.Prefill(2, 0, 30);
  std::vector<OwnedRequest> reqs = {MakeRequest(ex->shape(), 2, 0, w.rng()),
                                    MakeRequest(ex->shape(), 1, 0, w.rng())};
  w.shadow().Expect(reqs[0]);
  w.shadow().Expect(reqs[1]);
  testing::SyncResult r = SubmitAndWait(*ex, RandomWorkload::ToBatch(reqs));
  ASSERT_TRUE(r.statuses[0].ok() && r.statuses[1].ok());
  EXPECT_TRUE(MatchesExpected(reqs[0]));
  EXPECT_TRUE(MatchesExpected(reqs[1]));
  ExpectExactAccounting(*ex);
}

// The failure before the batch's copies are applied (copy or launch fault) leaves the child's new
// block without the shared block's tokens, on every layer: every layer of the child that had
// tokens there fails with FailedPrecondition from then on (not only the request's own layer),
// the parent is intact, another sequence in the batch lost only its own token.
class CopyNotAppliedTest : public ::testing::TestWithParam<const char*> {};

TEST_P(CopyNotAppliedTest, LosesTheCopiedBlockOnEveryLayerOfTheChildOnly) {
  const std::string kind = GetParam();
  auto ex = MakeExecutor();
  RandomWorkload w(*ex, 4);
  for (SequenceId id : {1, 3}) {
    ASSERT_TRUE(ex->CreateSequence(id).ok());
    w.shadow().Create(id);
    for (int l = 0; l < 3; ++l) w.Prefill(id, l, 10);
  }
  ASSERT_TRUE(ex->ForkSequence(1, 2).ok());
  w.shadow().Fork(1, 2);
  const std::int64_t in_use = ex->stats().kv_blocks_in_use;  // 2

  std::vector<OwnedRequest> reqs = {MakeRequest(ex->shape(), 2, 0, w.rng()),   // copies
                                    MakeRequest(ex->shape(), 3, 0, w.rng())};  // bystander
  (kind == "copy" ? ex->faults().copy : ex->faults().launch).Arm(1);
  testing::SyncResult r = SubmitAndWait(*ex, RandomWorkload::ToBatch(reqs));
  ASSERT_EQ(r.calls, 1);
  for (const Status& s : r.statuses) {
    EXPECT_EQ(s.code(), StatusCode::kInternal) << s.ToString();
    EXPECT_TRUE(Contains(s.message(), "injected " + std::string(kind == "copy" ? "copy" : "launch")))
        << s.ToString();
  }
  EXPECT_EQ(ex->stats().failed_batches, 1);
  EXPECT_EQ(ex->stats().kv_blocks_in_use, in_use + 1);  // the copy's destination stays held
  ExpectExactAccounting(*ex);

  std::vector<OwnedRequest> after;
  for (int l = 0; l < 3; ++l) after.push_back(MakeRequest(ex->shape(), 2, l, w.rng()));
  for (int l = 0; l < 3; ++l) after.push_back(MakeRequest(ex->shape(), 1, l, w.rng()));
  after.push_back(MakeRequest(ex->shape(), 3, 0, w.rng()));
  after.push_back(MakeRequest(ex->shape(), 3, 1, w.rng()));
  for (int i = 3; i < 6; ++i) w.shadow().Expect(after[i]);
  w.shadow().Expect(after[7]);
  testing::SyncResult r2 = SubmitAndWait(*ex, RandomWorkload::ToBatch(after));
  for (int l = 0; l < 3; ++l) {
    EXPECT_EQ(r2.statuses[l].code(), StatusCode::kFailedPrecondition)
        << "child layer " << l << ": " << r2.statuses[l].ToString();
    EXPECT_TRUE(Contains(r2.statuses[l].message(), "lost its token at position 0"))
        << r2.statuses[l].ToString();
  }
  for (int i = 3; i < 6; ++i) {
    ASSERT_TRUE(r2.statuses[i].ok()) << "parent layer " << i - 3 << ": " << r2.statuses[i].ToString();
    EXPECT_TRUE(MatchesExpected(after[i]));
  }
  EXPECT_EQ(r2.statuses[6].code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Contains(r2.statuses[6].message(), "lost its token at position 10"));
  ASSERT_TRUE(r2.statuses[7].ok()) << r2.statuses[7].ToString();
  EXPECT_TRUE(MatchesExpected(after[7]));

  // Freeing the child returns its block; a new fork of the parent works.
  ASSERT_TRUE(ex->FreeSequence(2).ok());
  w.shadow().Free(2);
  ExpectExactAccounting(*ex);
  ASSERT_TRUE(ex->ForkSequence(1, 2).ok());
  w.shadow().Fork(1, 2);
  std::vector<OwnedRequest> fresh = {MakeRequest(ex->shape(), 2, 2, w.rng())};
  w.shadow().Expect(fresh[0]);
  testing::SyncResult r3 = SubmitAndWait(*ex, RandomWorkload::ToBatch(fresh));
  ASSERT_TRUE(r3.statuses[0].ok()) << r3.statuses[0].ToString();
  EXPECT_TRUE(MatchesExpected(fresh[0]));
  ExpectExactAccounting(*ex);
}

INSTANTIATE_TEST_SUITE_P(Kinds, CopyNotAppliedTest, ::testing::Values("copy", "launch"),
                         [](const auto& info) { return std::string(info.param); });

// A launch failure writes nothing: outputs stay poisoned, the tokens are lost (the lost-token
// contract, as for a whole-batch failure).
TEST(FaultInjectionTest, LaunchFailureWritesNothingAndKeepsTheLostTokenContract) {
  auto ex = MakeExecutor();
  RandomWorkload w(*ex, 5);
  w.AddSequences(2, 20);
  std::vector<OwnedRequest> reqs = {MakeRequest(ex->shape(), 1, 0, w.rng()),
                                    MakeRequest(ex->shape(), 2, 2, w.rng())};
  const int before = *ex->SequenceLength(1, 0);
  ex->faults().launch.Arm(1);
  testing::SyncResult r = SubmitAndWait(*ex, RandomWorkload::ToBatch(reqs));
  ASSERT_EQ(r.statuses.size(), 2u);
  EXPECT_EQ(r.statuses[0].code(), StatusCode::kInternal);
  EXPECT_EQ(r.statuses[1].code(), StatusCode::kInternal);
  EXPECT_TRUE(StillPoisoned(reqs[0]));
  EXPECT_TRUE(StillPoisoned(reqs[1]));
  EXPECT_EQ(*ex->SequenceLength(1, 0), before + 1);  // the token was taken
  ExpectExactAccounting(*ex);

  auto fresh = MakeExecutor();
  testing::ExpectLostTokenContract(*fresh, [&] { fresh->faults().launch.Arm(1); });
  EXPECT_EQ(fresh->stats().failed_batches, 1);
}

TEST(FaultInjectionTest, WholeBatchFailureThroughThePointAndTheOldHook) {
  auto a = MakeExecutor();
  testing::ExpectLostTokenContract(*a, [&] { a->faults().batch.Arm(1); });
  EXPECT_EQ(a->faults().batch.injected(), 1);
  auto b = MakeExecutor();
  testing::ExpectLostTokenContract(*b, [&] { b->InjectBatchFailuresForTesting(1); });
  EXPECT_EQ(b->faults().batch.injected(), 1);
}

// Random pipelined batches over many sequences with every kind of fault armed at random points,
// and fork/free churn between rounds. Each batch calls back once with one Status per request; an
// OK request matches the reference; a failed one has a code its fault explains; a (sequence,
// layer) that failed is not used again (its token may be lost) except to check that it now
// fails; accounting is exact after every round and zero after freeing everything.
TEST(FaultInjectionTest, RandomFaultsAcrossPipelinedBatchesKeepEveryInvariant) {
  auto ex = MakeExecutor(/*num_blocks=*/512);
  const ModelShape shape = ex->shape();
  RandomWorkload w(*ex, 6);
  attnrt::testing::NormalRng rng(7);
  w.AddSequences(12, 40);
  std::vector<SequenceId> live = w.ids();
  SequenceId next_id = 1000;
  std::set<std::pair<SequenceId, int>> retired;  // failed once: token possibly lost
  int ok = 0, failed = 0, refused_retired = 0;

  for (int round = 0; round < 30; ++round) {
    // Up to two batches in flight; keys disjoint across them so each expectation is exact.
    struct InFlight {
      std::vector<OwnedRequest> reqs;
      std::vector<bool> retired_key;
      std::promise<std::vector<Status>> done;
      int calls = 0;
    };
    std::vector<std::unique_ptr<InFlight>> batches;
    std::set<std::pair<SequenceId, int>> used;
    const int fault = rng.NextInt(0, 4);
    FaultPoint* points[] = {&ex->faults().block_allocation, &ex->faults().copy,
                            &ex->faults().launch, &ex->faults().batch};
    if (fault < 4) points[fault]->Arm(rng.NextInt(1, 2), rng.NextInt(0, 3));
    for (int b = 0; b < 4; ++b) {
      auto batch = std::make_unique<InFlight>();
      const int size = rng.NextInt(1, 10);
      for (int i = 0; i < size; ++i) {
        const SequenceId id = live[rng.NextInt(0, static_cast<int>(live.size()) - 1)];
        const int layer = rng.NextInt(0, shape.num_layers - 1);
        if (!used.insert({id, layer}).second) continue;
        if (*ex->SequenceLength(id, layer) >= shape.max_context - 1) continue;
        batch->reqs.push_back(MakeRequest(shape, id, layer, rng));
        const bool is_retired = retired.count({id, layer}) != 0;
        batch->retired_key.push_back(is_retired);
        if (!is_retired) w.shadow().Expect(batch->reqs.back());
      }
      if (batch->reqs.empty()) continue;
      InFlight* raw = batch.get();
      ASSERT_TRUE(ex->Submit(RandomWorkload::ToBatch(batch->reqs),
                             [raw](std::vector<Status> st) {
                               ++raw->calls;
                               raw->done.set_value(std::move(st));
                             })
                      .ok());
      batches.push_back(std::move(batch));
    }
    for (auto& batch : batches) {
      const std::vector<Status> st = batch->done.get_future().get();
      ASSERT_EQ(st.size(), batch->reqs.size());
      for (std::size_t i = 0; i < st.size(); ++i) {
        const OwnedRequest& r = batch->reqs[i];
        if (batch->retired_key[i]) {
          // Lost earlier: it must keep failing (never read undefined K/V); a key retired by a
          // refused allocation simply runs.
          if (!st[i].ok()) ++refused_retired;
          continue;
        }
        if (st[i].ok()) {
          EXPECT_TRUE(MatchesExpected(r)) << "round " << round;
          ++ok;
        } else {
          EXPECT_TRUE(st[i].code() == StatusCode::kResourceExhausted ||
                      st[i].code() == StatusCode::kInternal ||
                      st[i].code() == StatusCode::kFailedPrecondition)
              << st[i].ToString();
          retired.insert({r.id, r.layer});
          ++failed;
        }
      }
    }
    ex->Wait();
    for (auto& batch : batches) EXPECT_EQ(batch->calls, 1);
    ex->faults().DisarmAll();
    ExpectExactAccounting(*ex);

    // Churn: free one, fork one, create one.
    if (live.size() > 4) {
      const int victim = rng.NextInt(0, static_cast<int>(live.size()) - 1);
      ASSERT_TRUE(ex->FreeSequence(live[victim]).ok());
      w.shadow().Free(live[victim]);
      for (int l = 0; l < shape.num_layers; ++l) retired.erase({live[victim], l});
      live.erase(live.begin() + victim);
    }
    const SequenceId parent = live[rng.NextInt(0, static_cast<int>(live.size()) - 1)];
    ASSERT_TRUE(ex->ForkSequence(parent, next_id).ok());
    w.shadow().Fork(parent, next_id);
    for (int l = 0; l < shape.num_layers; ++l) {
      if (retired.count({parent, l})) retired.insert({next_id, l});
    }
    live.push_back(next_id++);
    ASSERT_TRUE(ex->CreateSequence(next_id).ok());
    w.shadow().Create(next_id);
    for (int l = 0; l < shape.num_layers; ++l) w.Prefill(next_id, l, rng.NextInt(1, 40));
    live.push_back(next_id++);
    ExpectExactAccounting(*ex);
  }
  EXPECT_GT(ok, 100);
  EXPECT_GT(failed, 0);
  for (SequenceId id : live) ASSERT_TRUE(ex->FreeSequence(id).ok());
  EXPECT_EQ(ex->stats().kv_blocks_in_use, 0);
  EXPECT_EQ(ex->stats().sequences, 0);
  EXPECT_EQ(ex->cache().allocator().num_free(), ex->cache().num_blocks());
  (void)refused_retired;
}

}  // namespace
}  // namespace attnrt::runtime
