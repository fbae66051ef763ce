// The CPU executor (runtime/cpu_executor.cc) against a dense FP64 shadow of every sequence:
// random batches, growing sequences, fork/copy-on-write, per-request errors, callback contract.
#include "runtime/cpu_executor.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "tests/runtime/executor_harness.h"

namespace attnrt::runtime {
namespace {

using testing::MakeRequest;
using testing::MatchesExpected;
using testing::OwnedRequest;
using testing::RandomWorkload;
using testing::SubmitAndWait;

std::unique_ptr<CpuExecutor> MakeExecutor(int num_blocks = 512, int max_batch_size = 64) {
  return testing::MakeCpuExecutor(num_blocks, max_batch_size);
}

TEST(CpuExecutorTest, RandomBatchesMatchDenseReference) {
  auto ex = MakeExecutor();
  RandomWorkload w(*ex, 11);
  w.AddSequences(6, 40);
  for (int step = 0; step < 25; ++step) {
    const int size = w.rng().NextInt(1, 12);
    std::vector<OwnedRequest> reqs = w.MakeBatch(size);
    testing::SyncResult r = SubmitAndWait(*ex, RandomWorkload::ToBatch(reqs));
    ASSERT_TRUE(r.submit.ok()) << r.submit.ToString();
    ASSERT_EQ(r.statuses.size(), reqs.size());
    for (std::size_t i = 0; i < reqs.size(); ++i) {
      ASSERT_TRUE(r.statuses[i].ok()) << "step " << step << ": " << r.statuses[i].ToString();
      EXPECT_TRUE(MatchesExpected(reqs[i])) << "step " << step << " request " << i;
      EXPECT_EQ(*ex->SequenceLength(reqs[i].id, reqs[i].layer),
                w.shadow().Length(reqs[i].id, reqs[i].layer));
    }
  }
  EXPECT_EQ(ex->stats().batches, 25);
  EXPECT_EQ(ex->stats().failed_batches, 0);
}

// Executor::Run (on the calling thread): the statuses of the batch, outputs in place; a
// malformed batch returns Submit's error.
TEST(CpuExecutorTest, RunReturnsEachRequestsStatusWithItsOutput) {
  auto ex = MakeExecutor(/*num_blocks=*/512, /*max_batch_size=*/8);
  RandomWorkload w(*ex, 13);
  w.AddSequences(6, 40);
  for (int step = 0; step < 6; ++step) {
    std::vector<OwnedRequest> reqs = w.MakeBatch(w.rng().NextInt(1, 8));
    StatusOr<std::vector<Status>> st = ex->Run(RandomWorkload::ToBatch(reqs));
    ASSERT_TRUE(st.ok()) << st.status().ToString();
    ASSERT_EQ(st->size(), reqs.size());
    for (std::size_t i = 0; i < reqs.size(); ++i) {
      ASSERT_TRUE((*st)[i].ok()) << (*st)[i].ToString();
      EXPECT_TRUE(MatchesExpected(reqs[i])) << "step " << step << " request " << i;
    }
  }
  StatusOr<std::vector<Status>> empty = ex->Run(Batch{});
  ASSERT_FALSE(empty.ok());
  EXPECT_NE(empty.status().message().find("0 requests"), std::string::npos);
  EXPECT_EQ(ex->stats().batches, 6);  // counted before Run returns
}

// Run after batches submitted without waiting, on the same sequences: it runs after all of them
// (its outputs attend over their tokens); an injected batch failure inside Run fails its
// requests alone and is counted; Submit works again after it.
TEST(CpuExecutorTest, RunFollowsEarlierBatchesAndReportsItsFailure) {
  auto ex = MakeExecutor(/*num_blocks=*/512, /*max_batch_size=*/8);
  RandomWorkload w(*ex, 17);
  w.AddSequences(3, 30);
  std::vector<std::vector<OwnedRequest>> pipelined;
  std::atomic<int> done{0};
  for (int step = 0; step < 4; ++step) {
    pipelined.push_back(w.MakeBatch(3));  // every sequence, layer 0 .. : all in each batch
    ASSERT_TRUE(ex->Submit(RandomWorkload::ToBatch(pipelined.back()),
                           [&](std::vector<Status> st) {
                             for (const Status& x : st) EXPECT_TRUE(x.ok()) << x.ToString();
                             ++done;
                           })
                    .ok());
  }
  std::vector<OwnedRequest> reqs = w.MakeBatch(3);
  StatusOr<std::vector<Status>> st = ex->Run(RandomWorkload::ToBatch(reqs));
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  EXPECT_EQ(done.load(), 4);  // every earlier batch completed before Run returned
  for (std::size_t i = 0; i < reqs.size(); ++i) {
    ASSERT_TRUE((*st)[i].ok()) << (*st)[i].ToString();
    EXPECT_TRUE(MatchesExpected(reqs[i])) << "request " << i;
  }
  for (const auto& batch : pipelined) {
    for (const OwnedRequest& r : batch) EXPECT_TRUE(MatchesExpected(r));
  }

  ex->faults().batch.Arm(1);
  std::vector<OwnedRequest> failing = w.MakeBatch(2);
  st = ex->Run(RandomWorkload::ToBatch(failing));
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  ASSERT_EQ(st->size(), 2u);
  for (const Status& x : *st) EXPECT_EQ(x.code(), StatusCode::kInternal) << x.ToString();
  EXPECT_EQ(ex->stats().failed_batches, 1);
  EXPECT_EQ(ex->stats().batches, 6);
}

TEST(CpuExecutorTest, BatchesInPartsMatchTheReference) {
  auto ex = MakeExecutor(/*num_blocks=*/512, /*max_batch_size=*/16);
  testing::ExpectPartsMatchTheReference(*ex, 16);
}

TEST(CpuExecutorTest, SequenceCallsWaitForAnOpenBatch) {
  auto ex = MakeExecutor();
  testing::ExpectSequenceCallsWaitForAnOpenBatch(*ex);
}

TEST(CpuExecutorTest, FailedBatchLosesItsTokensUntilTheSequenceIsFreed) {
  auto ex = MakeExecutor();
  testing::ExpectLostTokenContract(*ex, [&] { ex->InjectBatchFailuresForTesting(1); });
  EXPECT_EQ(ex->stats().failed_batches, 1);
}

TEST(CpuExecutorTest, CallbackRunsExactlyOnceOffTheSubmittingThread) {
  auto ex = MakeExecutor();
  RandomWorkload w(*ex, 12);
  w.AddSequences(2, 5);
  std::vector<OwnedRequest> reqs = w.MakeBatch(3);
  testing::SyncResult r = SubmitAndWait(*ex, RandomWorkload::ToBatch(reqs));
  ASSERT_TRUE(r.submit.ok());
  EXPECT_EQ(r.calls, 1);
  EXPECT_NE(r.callback_thread, std::this_thread::get_id());
}

// Many batches in flight without waiting: each (sequence, layer) sees its tokens in submission
// order, so the shadow (advanced at submit) still predicts every output.
TEST(CpuExecutorTest, PipelinedBatchesKeepPerSequenceOrder) {
  auto ex = MakeExecutor();
  RandomWorkload w(*ex, 13);
  w.AddSequences(3, 20);
  std::vector<std::vector<OwnedRequest>> batches;
  std::atomic<int> calls{0};
  for (int step = 0; step < 20; ++step) batches.push_back(w.MakeBatch(w.rng().NextInt(1, 9)));
  std::vector<std::vector<Status>> statuses(batches.size());
  for (std::size_t b = 0; b < batches.size(); ++b) {
    ASSERT_TRUE(ex->Submit(RandomWorkload::ToBatch(batches[b]),
                           [&, b](std::vector<Status> st) {
                             statuses[b] = std::move(st);
                             ++calls;
                           })
                    .ok());
  }
  ex->Wait();
  EXPECT_EQ(calls.load(), 20);
  for (std::size_t b = 0; b < batches.size(); ++b) {
    for (std::size_t i = 0; i < batches[b].size(); ++i) {
      ASSERT_TRUE(statuses[b][i].ok()) << statuses[b][i].ToString();
      EXPECT_TRUE(MatchesExpected(batches[b][i])) << "batch " << b << " request " << i;
    }
  }
}

// One sequence grows across block boundaries (block size 16) one token per batch, per layer.
TEST(CpuExecutorTest, SequenceGrowsAcrossBatchesAndBlocks) {
  auto ex = MakeExecutor();
  RandomWorkload w(*ex, 14);
  ASSERT_TRUE(ex->CreateSequence(100).ok());
  w.shadow().Create(100);
  w.Prefill(100, 0, 14);
  w.Prefill(100, 1, 1);
  w.Prefill(100, 2, 31);
  for (int step = 0; step < 40; ++step) {
    std::vector<OwnedRequest> reqs;
    for (int l = 0; l < 3; ++l) {
      reqs.push_back(MakeRequest(ex->shape(), 100, l, w.rng()));
      w.shadow().Expect(reqs.back());
    }
    testing::SyncResult r = SubmitAndWait(*ex, RandomWorkload::ToBatch(reqs));
    for (std::size_t i = 0; i < reqs.size(); ++i) {
      ASSERT_TRUE(r.statuses[i].ok()) << r.statuses[i].ToString();
      EXPECT_TRUE(MatchesExpected(reqs[i])) << "step " << step << " layer " << i;
    }
  }
  EXPECT_EQ(*ex->SequenceLength(100, 2), 71);
}

// A fork shares the parent's blocks (the last one partly filled); the first appends of parent
// and child in one batch copy that block on write, and neither sees the other's new token.
TEST(CpuExecutorTest, ForkCopiesOnWriteThroughTheExecutor) {
  auto ex = MakeExecutor();
  RandomWorkload w(*ex, 15);
  ASSERT_TRUE(ex->CreateSequence(1).ok());
  w.shadow().Create(1);
  for (int l = 0; l < 3; ++l) w.Prefill(1, l, 20);
  ASSERT_TRUE(ex->ForkSequence(1, 2).ok());
  w.shadow().Fork(1, 2);
  for (int step = 0; step < 6; ++step) {
    std::vector<OwnedRequest> reqs;
    for (SequenceId id : {SequenceId{1}, SequenceId{2}}) {
      for (int l = 0; l < 3; ++l) {
        reqs.push_back(MakeRequest(ex->shape(), id, l, w.rng()));
        w.shadow().Expect(reqs.back());
      }
    }
    testing::SyncResult r = SubmitAndWait(*ex, RandomWorkload::ToBatch(reqs));
    for (std::size_t i = 0; i < reqs.size(); ++i) {
      ASSERT_TRUE(r.statuses[i].ok()) << r.statuses[i].ToString();
      EXPECT_TRUE(MatchesExpected(reqs[i])) << "step " << step << " request " << i;
    }
  }
  // A second fork from the child mid-block, then only the grandchild writes.
  ASSERT_TRUE(ex->ForkSequence(2, 3).ok());
  w.shadow().Fork(2, 3);
  std::vector<OwnedRequest> reqs = {MakeRequest(ex->shape(), 3, 0, w.rng())};
  w.shadow().Expect(reqs[0]);
  reqs.push_back(MakeRequest(ex->shape(), 2, 0, w.rng()));
  w.shadow().Expect(reqs[1]);
  testing::SyncResult r = SubmitAndWait(*ex, RandomWorkload::ToBatch(reqs));
  EXPECT_TRUE(r.statuses[0].ok() && r.statuses[1].ok());
  EXPECT_TRUE(MatchesExpected(reqs[0]));
  EXPECT_TRUE(MatchesExpected(reqs[1]));
}

// Freed blocks go to new sequences; results stay right.
TEST(CpuExecutorTest, FreedSequencesBlocksAreReused) {
  auto ex = MakeExecutor(/*num_blocks=*/64);
  RandomWorkload w(*ex, 16);
  w.AddSequences(4, 30);
  for (SequenceId id : w.ids()) {
    ASSERT_TRUE(ex->FreeSequence(id).ok());
    w.shadow().Free(id);
  }
  RandomWorkload w2(*ex, 17);
  // Ids continue past the freed ones' in a new workload: start at 1000.
  for (SequenceId id = 1000; id < 1004; ++id) {
    ASSERT_TRUE(ex->CreateSequence(id).ok());
    w2.shadow().Create(id);
    for (int l = 0; l < 3; ++l) w2.Prefill(id, l, 25);
  }
  std::vector<OwnedRequest> reqs;
  for (SequenceId id = 1000; id < 1004; ++id) {
    reqs.push_back(MakeRequest(ex->shape(), id, 1, w2.rng()));
    w2.shadow().Expect(reqs.back());
  }
  testing::SyncResult r = SubmitAndWait(*ex, RandomWorkload::ToBatch(reqs));
  for (std::size_t i = 0; i < reqs.size(); ++i) {
    ASSERT_TRUE(r.statuses[i].ok()) << r.statuses[i].ToString();
    EXPECT_TRUE(MatchesExpected(reqs[i]));
  }
}

// Bad requests fail alone with a Status naming the field; the good ones run and the failed
// ones leave their sequence's length as it was.
TEST(CpuExecutorTest, BadRequestsFailAloneNamingTheField) {
  auto ex = MakeExecutor();
  RandomWorkload w(*ex, 18);
  w.AddSequences(2, 10);
  const SequenceId a = w.ids()[0], b = w.ids()[1];
  const int len_b0 = *ex->SequenceLength(b, 0);

  std::vector<OwnedRequest> good = {MakeRequest(ex->shape(), a, 0, w.rng()),
                                    MakeRequest(ex->shape(), a, 2, w.rng())};
  w.shadow().Expect(good[0]);
  w.shadow().Expect(good[1]);
  OwnedRequest scratch = MakeRequest(ex->shape(), b, 0, w.rng());

  Batch batch;
  batch.requests.push_back(good[0].Request());               // 0 ok
  BatchRequest unknown = scratch.Request();
  unknown.sequence_id = 999;
  batch.requests.push_back(unknown);                         // 1 NotFound
  BatchRequest bad_layer = scratch.Request();
  bad_layer.layer = 3;
  batch.requests.push_back(bad_layer);                       // 2 layer out of range
  BatchRequest null_q = scratch.Request();
  null_q.q = nullptr;
  batch.requests.push_back(null_q);                          // 3 q null
  BatchRequest null_out = scratch.Request();
  null_out.out = nullptr;
  batch.requests.push_back(null_out);                        // 4 out null
  BatchRequest dup = scratch.Request();
  dup.sequence_id = a;
  dup.layer = 0;
  batch.requests.push_back(dup);                             // 5 duplicate of 0
  BatchRequest device = scratch.Request();
  device.memory = MemoryKind::kDevice;
  batch.requests.push_back(device);                          // 6 device memory on CPU
  batch.requests.push_back(good[1].Request());               // 7 ok

  testing::SyncResult r = SubmitAndWait(*ex, batch);
  ASSERT_TRUE(r.submit.ok());
  ASSERT_EQ(r.statuses.size(), 8u);
  EXPECT_TRUE(r.statuses[0].ok());
  EXPECT_EQ(r.statuses[1].code(), StatusCode::kNotFound);
  EXPECT_NE(r.statuses[1].message().find("sequence_id 999"), std::string::npos);
  EXPECT_EQ(r.statuses[2].code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.statuses[2].message().find("layer 3"), std::string::npos);
  EXPECT_NE(r.statuses[3].message().find("q is null"), std::string::npos);
  EXPECT_NE(r.statuses[4].message().find("out is null"), std::string::npos);
  EXPECT_EQ(r.statuses[5].code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.statuses[5].message().find("appears twice"), std::string::npos);
  EXPECT_EQ(r.statuses[6].code(), StatusCode::kUnimplemented);
  EXPECT_NE(r.statuses[6].message().find("kDevice"), std::string::npos);
  EXPECT_NE(r.statuses[6].message().find("request 6"), std::string::npos);
  EXPECT_TRUE(r.statuses[7].ok());
  EXPECT_TRUE(MatchesExpected(good[0]));
  EXPECT_TRUE(MatchesExpected(good[1]));
  EXPECT_EQ(*ex->SequenceLength(b, 0), len_b0);
  // Outputs of failed requests are untouched.
  EXPECT_TRUE(testing::IsNaN(scratch.out[0]));
}

TEST(CpuExecutorTest, MalformedBatchesAreRejectedWithoutCallback) {
  auto ex = MakeExecutor(/*num_blocks=*/64, /*max_batch_size=*/4);
  RandomWorkload w(*ex, 19);
  w.AddSequences(3, 4);
  int calls = 0;
  auto count = [&](std::vector<Status>) { ++calls; };
  Status empty = ex->Submit(Batch{}, count);
  EXPECT_EQ(empty.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(empty.message().find("0 requests"), std::string::npos);
  std::vector<int> lengths;
  for (SequenceId id : w.ids()) {
    for (int l = 0; l < 3; ++l) lengths.push_back(*ex->SequenceLength(id, l));
  }
  std::vector<OwnedRequest> reqs = w.MakeBatch(5);
  Status big = ex->Submit(RandomWorkload::ToBatch(reqs), count);
  EXPECT_EQ(big.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(big.message().find("max_batch_size 4"), std::string::npos);
  Batch with_event = RandomWorkload::ToBatch(reqs);
  with_event.requests.resize(1);
  with_event.ready_event = reinterpret_cast<DeviceEvent>(std::uintptr_t{64});  // never read
  EXPECT_EQ(ex->Submit(with_event, count).code(), StatusCode::kInvalidArgument);
  ex->Wait();
  EXPECT_EQ(calls, 0);
  std::size_t i = 0;
  for (SequenceId id : w.ids()) {
    for (int l = 0; l < 3; ++l) EXPECT_EQ(*ex->SequenceLength(id, l), lengths[i++]);
  }
}

// A batch whose every request fails still calls back (on the worker) with every Status.
TEST(CpuExecutorTest, AllFailedBatchStillCallsBack) {
  auto ex = MakeExecutor();
  RandomWorkload w(*ex, 20);
  OwnedRequest r = MakeRequest(ex->shape(), 42, 0, w.rng());
  Batch b;
  b.requests = {r.Request(), r.Request()};
  testing::SyncResult res = SubmitAndWait(*ex, b);
  ASSERT_TRUE(res.submit.ok());
  EXPECT_EQ(res.calls, 1);
  EXPECT_NE(res.callback_thread, std::this_thread::get_id());
  ASSERT_EQ(res.statuses.size(), 2u);
  EXPECT_EQ(res.statuses[0].code(), StatusCode::kNotFound);
  EXPECT_EQ(res.statuses[1].code(), StatusCode::kNotFound);
}

// The cache running out of blocks fails the request that needed a new block, alone.
TEST(CpuExecutorTest, OutOfBlocksFailsOnlyTheRequestThatNeedsOne) {
  auto ex = MakeExecutor(/*num_blocks=*/2);
  RandomWorkload w(*ex, 21);
  ASSERT_TRUE(ex->CreateSequence(1).ok());
  ASSERT_TRUE(ex->CreateSequence(2).ok());
  w.shadow().Create(1);
  w.shadow().Create(2);
  w.Prefill(1, 0, 16);  // block 0 full
  w.Prefill(2, 0, 3);   // block 1 has room
  std::vector<OwnedRequest> reqs = {MakeRequest(ex->shape(), 1, 0, w.rng()),
                                    MakeRequest(ex->shape(), 2, 0, w.rng())};
  w.shadow().Expect(reqs[1]);
  testing::SyncResult r = SubmitAndWait(*ex, RandomWorkload::ToBatch(reqs));
  EXPECT_EQ(r.statuses[0].code(), StatusCode::kResourceExhausted) << r.statuses[0].ToString();
  EXPECT_NE(r.statuses[0].message().find("request 0"), std::string::npos);
  ASSERT_TRUE(r.statuses[1].ok()) << r.statuses[1].ToString();
  EXPECT_TRUE(MatchesExpected(reqs[1]));
  EXPECT_EQ(*ex->SequenceLength(1, 0), 16);
}

TEST(CpuExecutorTest, BadOptionsAndPrefillArgumentsNameTheField) {
  CpuExecutorOptions o;
  o.shape = testing::SmallExecutorShape();
  o.num_blocks = 0;
  auto bad = CpuExecutor::Create(o);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("num_blocks"), std::string::npos);
  o.num_blocks = 8;
  o.buckets = {4, 2};
  bad = CpuExecutor::Create(o);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("buckets[1]"), std::string::npos);

  auto ex = MakeExecutor();
  ASSERT_TRUE(ex->CreateSequence(1).ok());
  std::vector<Half> kv(ex->shape().kv_token_elems() * 2);
  EXPECT_NE(ex->Prefill(1, 0, 0, kv.data(), kv.data()).message().find("num_tokens"),
            std::string::npos);
  EXPECT_NE(ex->Prefill(1, 0, 2, nullptr, kv.data()).message().find("k is null"),
            std::string::npos);
  EXPECT_NE(ex->Prefill(1, 7, 2, kv.data(), kv.data()).message().find("layer 7"),
            std::string::npos);
  EXPECT_EQ(ex->Prefill(5, 0, 2, kv.data(), kv.data()).code(), StatusCode::kNotFound);
  EXPECT_EQ(*ex->SequenceLength(1, 0), 0);
}

}  // namespace
}  // namespace attnrt::runtime
