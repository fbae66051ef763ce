// Test harness shared by the executor tests: a dense shadow of every (sequence, layer)'s K/V
// history that computes the expected decode output independently of the paged layout (plain
// dense attention in FP64), owned request buffers with poisoned outputs, and a synchronous
// submit that records which thread ran the callback; the small model and CPU executor the tests
// share, and fault scenarios every executor must pass. Header-only, no CUDA.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <attnrt/config.h>
#include <attnrt/half.h>
#include "runtime/cpu_executor.h"
#include "runtime/executor.h"
#include "runtime/fault_injection.h"
#include "tests/support/dense_attention.h"
#include "tests/support/random_fp16.h"

namespace attnrt::runtime::testing {

using attnrt::testing::FillNormal;
using attnrt::testing::IsNaN;
using attnrt::testing::NormalRng;
using attnrt::testing::Poison;

// The small model of the executor tests: 3 layers, H 4, Hkv 2, D 64, block 16, context 256.
inline ModelShape SmallExecutorShape() {
  ModelShape s;
  s.num_layers = 3;
  s.num_q_heads = 4;
  s.num_kv_heads = 2;
  s.head_dim = 64;
  s.block_size = 16;
  s.max_context = 256;
  return s;
}

// A CPU executor of the small model (nullptr, with a test failure, if it cannot be made).
inline std::unique_ptr<CpuExecutor> MakeCpuExecutor(int num_blocks, int max_batch_size = 64) {
  CpuExecutorOptions o;
  o.shape = SmallExecutorShape();
  o.num_blocks = num_blocks;
  o.max_batch_size = max_batch_size;
  auto ex = CpuExecutor::Create(o);
  EXPECT_TRUE(ex.ok()) << ex.status().ToString();
  return std::move(ex).value();
}

// Host buffers of one request; out/lse poisoned (NaN) until the executor writes them.
struct OwnedRequest {
  SequenceId id = 0;
  int layer = 0;
  std::vector<Half> q, k, v, out;
  std::vector<float> lse;
  // Expected (dense FP64 shadow), filled when the request is added to the shadow.
  std::vector<double> expected_out, expected_lse;

  BatchRequest Request() {
    BatchRequest r;
    r.sequence_id = id;
    r.layer = layer;
    r.q = q.data();
    r.k = k.data();
    r.v = v.data();
    r.out = out.data();
    r.lse = lse.data();
    return r;
  }
};

inline OwnedRequest MakeRequest(const ModelShape& shape, SequenceId id, int layer,
                                NormalRng& rng) {
  OwnedRequest r;
  r.id = id;
  r.layer = layer;
  r.q.resize(static_cast<std::size_t>(shape.num_q_heads) * shape.head_dim);
  r.k.resize(static_cast<std::size_t>(shape.kv_token_elems()));
  r.v.resize(r.k.size());
  FillNormal(r.q, rng);
  FillNormal(r.k, rng);
  FillNormal(r.v, rng);
  r.out.resize(r.q.size());
  Poison(r.out);
  r.lse.resize(shape.num_q_heads);
  Poison(r.lse);
  return r;
}

// The dense history of every (sequence, layer): what the paged cache should hold.
class ShadowCache {
 public:
  explicit ShadowCache(const ModelShape& shape) : shape_(shape) {}

  void Create(SequenceId id) {
    for (int l = 0; l < shape_.num_layers; ++l) hist_[{id, l}] = {};
  }
  void Fork(SequenceId parent, SequenceId child) {
    for (int l = 0; l < shape_.num_layers; ++l) hist_[{child, l}] = hist_[{parent, l}];
  }
  void Free(SequenceId id) {
    for (int l = 0; l < shape_.num_layers; ++l) hist_.erase({id, l});
  }
  void Append(SequenceId id, int layer, const std::vector<Half>& k, const std::vector<Half>& v) {
    hist_[{id, layer}].Append(k, v);
  }
  int Length(SequenceId id, int layer) const {
    return static_cast<int>(hist_.at({id, layer}).k.size() / shape_.kv_token_elems());
  }

  // Appends the request's token and computes its expected output and LSE (dense FP64).
  void Expect(OwnedRequest& r) {
    Append(r.id, r.layer, r.k, r.v);
    r.expected_out = ::attnrt::testing::DenseDecode(shape_, hist_.at({r.id, r.layer}), r.q, &r.expected_lse);
  }

 private:
  ModelShape shape_;
  std::map<std::pair<SequenceId, int>, ::attnrt::testing::DenseKv> hist_;  // [t][Hkv][D] per (seq, layer)
};

// max |out - expected| <= 2e-3 and relative L2 <= 1e-3 (the kernel tolerance); LSE within 2e-3.
inline ::testing::AssertionResult MatchesExpected(const OwnedRequest& r) {
  double diff2 = 0, ref2 = 0, max_abs = 0;
  for (std::size_t i = 0; i < r.out.size(); ++i) {
    const double got = HalfToFloat(r.out[i]);
    if (!std::isfinite(got)) {
      return ::testing::AssertionFailure() << "out[" << i << "] is not finite (seq " << r.id
                                           << " layer " << r.layer << ")";
    }
    const double d = got - r.expected_out[i];
    max_abs = std::max(max_abs, std::abs(d));
    diff2 += d * d;
    ref2 += r.expected_out[i] * r.expected_out[i];
  }
  const double rel = std::sqrt(diff2 / std::max(ref2, 1e-30));
  double lse_err = 0;
  for (std::size_t i = 0; i < r.lse.size(); ++i) {
    if (!std::isfinite(r.lse[i])) return ::testing::AssertionFailure() << "lse not finite";
    lse_err = std::max(lse_err, std::abs(r.lse[i] - r.expected_lse[i]));
  }
  if (max_abs > 2e-3 || rel > 1e-3 || lse_err > 2e-3) {
    return ::testing::AssertionFailure()
           << "seq " << r.id << " layer " << r.layer << ": max abs " << max_abs << ", rel L2 "
           << rel << ", lse err " << lse_err;
  }
  return ::testing::AssertionSuccess();
}

// Submits and waits for the callback; records the callback count and thread.
struct SyncResult {
  Status submit;
  std::vector<Status> statuses;
  int calls = 0;
  std::thread::id callback_thread;
};

inline SyncResult SubmitAndWait(Executor& ex, Batch batch) {
  SyncResult res;
  std::promise<void> fired;
  res.submit = ex.Submit(std::move(batch), [&](std::vector<Status> st) {
    res.statuses = std::move(st);
    res.callback_thread = std::this_thread::get_id();
    ++res.calls;
    fired.set_value();
  });
  if (res.submit.ok()) fired.get_future().wait();
  ex.Wait();
  return res;
}

// Sequences with random prompts in an executor and its shadow; random batches over them.
class RandomWorkload {
 public:
  // Sequence ids start at `first_id` (two workloads on one executor need disjoint ranges).
  RandomWorkload(Executor& ex, std::uint64_t seed, SequenceId first_id = 1)
      : ex_(ex), shape_(ex.shape()), shadow_(shape_), rng_(seed), next_id_(first_id) {}

  // `count` new sequences, each layer prefilled with 1..max_prompt random tokens.
  void AddSequences(int count, int max_prompt) {
    for (int i = 0; i < count; ++i) {
      const SequenceId id = next_id_++;
      ASSERT_TRUE(ex_.CreateSequence(id).ok());
      shadow_.Create(id);
      for (int l = 0; l < shape_.num_layers; ++l) Prefill(id, l, rng_.NextInt(1, max_prompt));
      ids_.push_back(id);
    }
  }
  void Prefill(SequenceId id, int layer, int n) {
    std::vector<Half> k(static_cast<std::size_t>(n) * shape_.kv_token_elems()), v(k.size());
    FillNormal(k, rng_);
    FillNormal(v, rng_);
    const Status s = ex_.Prefill(id, layer, n, k.data(), v.data());
    ASSERT_TRUE(s.ok()) << s.ToString();
    shadow_.Append(id, layer, k, v);
  }

  // `size` requests on distinct random (sequence, layer) pairs, expected outputs computed.
  std::vector<OwnedRequest> MakeBatch(int size) {
    std::vector<std::pair<SequenceId, int>> keys;
    for (SequenceId id : ids_) {
      for (int l = 0; l < shape_.num_layers; ++l) keys.push_back({id, l});
    }
    for (int i = static_cast<int>(keys.size()) - 1; i > 0; --i) {
      std::swap(keys[i], keys[rng_.NextInt(0, i)]);
    }
    size = std::min<int>(size, static_cast<int>(keys.size()));
    std::vector<OwnedRequest> reqs;
    for (int i = 0; i < size; ++i) {
      reqs.push_back(MakeRequest(shape_, keys[i].first, keys[i].second, rng_));
      shadow_.Expect(reqs.back());
    }
    return reqs;
  }

  static Batch ToBatch(std::vector<OwnedRequest>& reqs) {
    Batch b;
    for (OwnedRequest& r : reqs) b.requests.push_back(r.Request());
    return b;
  }

  ShadowCache& shadow() { return shadow_; }
  NormalRng& rng() { return rng_; }
  const std::vector<SequenceId>& ids() const { return ids_; }

 private:
  Executor& ex_;
  ModelShape shape_;
  ShadowCache shadow_;
  NormalRng rng_;
  std::vector<SequenceId> ids_;
  SequenceId next_id_;
};

// A failed block allocation fails only the request that needed it. Sequences 1, 2, 3 hold a
// full block, 5 tokens and two full blocks of layer 0 (four blocks); one batch decodes each;
// `faults`' block allocation fails once, on sequence 1's new block. Then: sequence 1's request
// alone fails (ResourceExhausted) and its length is untouched, 2 and 3 match the reference, only
// sequence 3 took a block, no batch failed. The caller checks more of `result` and retries.
struct BlockAllocationFault {
  std::vector<OwnedRequest> reqs;
  SyncResult result;
  std::int64_t blocks_in_use_before = 0;
};

inline void RunBlockAllocationFault(Executor& ex, FaultInjection& faults, RandomWorkload& w,
                                    BlockAllocationFault* fault) {
  const int block_size = ex.shape().block_size;
  for (SequenceId id : {1, 2, 3}) {
    ASSERT_TRUE(ex.CreateSequence(id).ok());
    w.shadow().Create(id);
  }
  w.Prefill(1, 0, block_size);      // full block: the next token needs a new one
  w.Prefill(2, 0, 5);               // room left
  w.Prefill(3, 0, 2 * block_size);  // full
  const std::int64_t in_use = fault->blocks_in_use_before = ex.stats().kv_blocks_in_use;
  ASSERT_EQ(in_use, 4);

  std::vector<OwnedRequest>& reqs = fault->reqs;
  reqs = {MakeRequest(ex.shape(), 1, 0, w.rng()), MakeRequest(ex.shape(), 2, 0, w.rng()),
          MakeRequest(ex.shape(), 3, 0, w.rng())};
  w.shadow().Expect(reqs[1]);
  w.shadow().Expect(reqs[2]);
  faults.block_allocation.Arm(1);
  const SyncResult& r = fault->result = SubmitAndWait(ex, RandomWorkload::ToBatch(reqs));
  ASSERT_TRUE(r.submit.ok());
  ASSERT_EQ(r.statuses.size(), 3u);
  EXPECT_EQ(r.statuses[0].code(), StatusCode::kResourceExhausted) << r.statuses[0].ToString();
  ASSERT_TRUE(r.statuses[1].ok()) << r.statuses[1].ToString();
  ASSERT_TRUE(r.statuses[2].ok()) << r.statuses[2].ToString();
  EXPECT_TRUE(MatchesExpected(reqs[1]));
  EXPECT_TRUE(MatchesExpected(reqs[2]));
  EXPECT_EQ(faults.block_allocation.injected(), 1);
  EXPECT_EQ(*ex.SequenceLength(1, 0), block_size);      // untouched
  EXPECT_EQ(ex.stats().kv_blocks_in_use, in_use + 1);  // only sequence 3 grew
  EXPECT_EQ(ex.stats().failed_batches, 0);  // a planning failure is the request's alone
}

// The lost-token contract (runtime/executor.h), for any executor. `inject_one_failure` makes the
// next batch fail as a whole after planning (a device error). Then: that batch's request fails;
// the next request of the same (sequence, layer) fails with FailedPrecondition naming the lost
// position, whether it was planned before the failure was settled (pipelined) or after; a
// prefill of it too; another layer of the same sequence and another sequence run on and match
// the reference; after FreeSequence the id is clean again.
inline void ExpectLostTokenContract(Executor& ex, const std::function<void()>& inject_one_failure) {
  const ModelShape& shape = ex.shape();
  ASSERT_GE(shape.num_layers, 2) << "the contract test needs two layers";
  RandomWorkload w(ex, 909, /*first_id=*/50000);
  w.AddSequences(2, 20);
  const SequenceId doomed = w.ids()[0], bystander = w.ids()[1];
  const int lost_position = *ex.SequenceLength(doomed, 0);
  NormalRng rng(910);

  // Batch 1 fails; batch 2 (same key, next position) is submitted before batch 1 settles when
  // the executor is still busy with it, else it is refused at planning: both must fail.
  std::vector<OwnedRequest> first, second;
  first.push_back(MakeRequest(shape, doomed, 0, rng));
  second.push_back(MakeRequest(shape, doomed, 0, rng));
  inject_one_failure();
  std::promise<std::vector<Status>> first_done, second_done;
  ASSERT_TRUE(ex.Submit(RandomWorkload::ToBatch(first),
                        [&](std::vector<Status> st) { first_done.set_value(std::move(st)); })
                  .ok());
  ASSERT_TRUE(ex.Submit(RandomWorkload::ToBatch(second),
                        [&](std::vector<Status> st) { second_done.set_value(std::move(st)); })
                  .ok());
  const std::vector<Status> s1 = first_done.get_future().get();
  const std::vector<Status> s2 = second_done.get_future().get();
  ex.Wait();
  ASSERT_EQ(s1.size(), 1u);
  EXPECT_FALSE(s1[0].ok());
  ASSERT_EQ(s2.size(), 1u);
  const std::string lost = "lost its token at position " + std::to_string(lost_position);
  EXPECT_EQ(s2[0].code(), StatusCode::kFailedPrecondition) << s2[0].ToString();
  EXPECT_NE(s2[0].message().find(lost), std::string::npos) << s2[0].ToString();

  // Later: the same key fails at planning; layer 1 and the bystander run and match.
  std::vector<OwnedRequest> third;
  third.push_back(MakeRequest(shape, doomed, 0, rng));
  third.push_back(MakeRequest(shape, doomed, 1, rng));
  third.push_back(MakeRequest(shape, bystander, 0, rng));
  w.shadow().Expect(third[1]);
  w.shadow().Expect(third[2]);
  SyncResult r3 = SubmitAndWait(ex, RandomWorkload::ToBatch(third));
  ASSERT_TRUE(r3.submit.ok());
  ASSERT_EQ(r3.statuses.size(), 3u);
  EXPECT_EQ(r3.statuses[0].code(), StatusCode::kFailedPrecondition) << r3.statuses[0].ToString();
  EXPECT_NE(r3.statuses[0].message().find(lost), std::string::npos);
  EXPECT_TRUE(r3.statuses[1].ok()) << r3.statuses[1].ToString();
  EXPECT_TRUE(r3.statuses[2].ok()) << r3.statuses[2].ToString();
  EXPECT_TRUE(MatchesExpected(third[1]));
  EXPECT_TRUE(MatchesExpected(third[2]));

  std::vector<Half> k(shape.kv_token_elems()), v(k.size());
  FillNormal(k, rng);
  FillNormal(v, rng);
  const Status prefill = ex.Prefill(doomed, 0, 1, k.data(), v.data());
  EXPECT_EQ(prefill.code(), StatusCode::kFailedPrecondition) << prefill.ToString();
  EXPECT_NE(prefill.message().find(lost), std::string::npos) << prefill.ToString();

  ASSERT_TRUE(ex.FreeSequence(doomed).ok());
  ASSERT_TRUE(ex.CreateSequence(doomed).ok());
  EXPECT_TRUE(ex.Prefill(doomed, 0, 1, k.data(), v.data()).ok());
  EXPECT_EQ(*ex.SequenceLength(doomed, 0), 1);
}

// A batch handed over in parts (Executor::SubmitPart) and closed by Submit: its requests
// complete in the order handed over and match the reference over several rounds (each round's
// tokens join the next round's context); parts of random sizes, the closing Submit sometimes
// empty. Misuse: an empty part and a part past max_batch_size are refused and change nothing,
// Run while a batch is open fails, and a (sequence, layer) of an earlier part fails alone in a
// later one (its sequence untouched).
inline void ExpectPartsMatchTheReference(Executor& ex, int max_batch_size) {
  ASSERT_TRUE(ex.accepts_parts());
  RandomWorkload w(ex, 29);
  w.AddSequences(8, 40);
  for (int round = 0; round < 6; ++round) {
    const int size = w.rng().NextInt(2, std::min(max_batch_size, 16));
    std::vector<OwnedRequest> reqs = w.MakeBatch(size);
    Batch all = RandomWorkload::ToBatch(reqs);
    int at = 0;
    const bool empty_close = round % 2 == 1;
    while (at < size) {
      const int left = size - at;
      const int n = empty_close ? std::min(left, w.rng().NextInt(1, left))
                                : std::min(left - 1, w.rng().NextInt(1, left));
      if (n <= 0) break;  // the rest goes with the closing Submit
      Batch part;
      part.requests.assign(all.requests.begin() + at, all.requests.begin() + at + n);
      const Status s = ex.SubmitPart(std::move(part));
      ASSERT_TRUE(s.ok()) << "round " << round << ": " << s.ToString();
      at += n;
    }
    Batch rest;
    rest.requests.assign(all.requests.begin() + at, all.requests.end());
    if (round == 0) {
      StatusOr<std::vector<Status>> run = ex.Run(Batch{});
      ASSERT_FALSE(run.ok());
      EXPECT_EQ(run.status().code(), StatusCode::kFailedPrecondition) << run.status().ToString();
      EXPECT_EQ(ex.SubmitPart(Batch{}).code(), StatusCode::kInvalidArgument);
      Batch too_many;
      too_many.requests.assign(static_cast<std::size_t>(max_batch_size), all.requests[0]);
      const Status over = ex.SubmitPart(std::move(too_many));
      EXPECT_EQ(over.code(), StatusCode::kInvalidArgument) << over.ToString();
      EXPECT_NE(over.message().find("max_batch_size"), std::string::npos) << over.ToString();
    }
    SyncResult r = SubmitAndWait(ex, std::move(rest));
    ASSERT_TRUE(r.submit.ok()) << r.submit.ToString();
    ASSERT_EQ(r.statuses.size(), reqs.size()) << "round " << round;
    for (std::size_t i = 0; i < reqs.size(); ++i) {
      ASSERT_TRUE(r.statuses[i].ok()) << "round " << round << ": " << r.statuses[i].ToString();
      EXPECT_TRUE(MatchesExpected(reqs[i])) << "round " << round << " request " << i;
      EXPECT_EQ(*ex.SequenceLength(reqs[i].id, reqs[i].layer),
                w.shadow().Length(reqs[i].id, reqs[i].layer));
    }
  }
  // The same (sequence, layer) in two parts of one batch: the later request fails alone.
  std::vector<OwnedRequest> first = w.MakeBatch(2);
  OwnedRequest again = MakeRequest(ex.shape(), first[0].id, first[0].layer, w.rng());
  const int length_before = w.shadow().Length(first[0].id, first[0].layer);
  Batch part = RandomWorkload::ToBatch(first);
  ASSERT_TRUE(ex.SubmitPart(std::move(part)).ok());
  Batch close;
  close.requests.push_back(again.Request());
  SyncResult r = SubmitAndWait(ex, std::move(close));
  ASSERT_TRUE(r.submit.ok()) << r.submit.ToString();
  ASSERT_EQ(r.statuses.size(), 3u);
  EXPECT_TRUE(r.statuses[0].ok() && r.statuses[1].ok());
  EXPECT_TRUE(MatchesExpected(first[0]));
  EXPECT_TRUE(MatchesExpected(first[1]));
  EXPECT_EQ(r.statuses[2].code(), StatusCode::kInvalidArgument) << r.statuses[2].ToString();
  EXPECT_NE(r.statuses[2].message().find("request 2"), std::string::npos)
      << r.statuses[2].ToString();
  EXPECT_EQ(*ex.SequenceLength(first[0].id, first[0].layer), length_before);
}

// A sequence call made while a batch is open (SubmitPart) waits for the Submit that closes it:
// it never lands between the parts' plans and their run. The batch then matches the reference.
inline void ExpectSequenceCallsWaitForAnOpenBatch(Executor& ex) {
  RandomWorkload w(ex, 31);
  w.AddSequences(4, 20);
  std::vector<OwnedRequest> reqs = w.MakeBatch(3);
  ASSERT_TRUE(ex.SubmitPart(RandomWorkload::ToBatch(reqs)).ok());
  std::atomic<bool> created{false};
  std::thread caller([&] {
    EXPECT_TRUE(ex.CreateSequence(999).ok());
    created.store(true);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(created.load()) << "a sequence call landed inside an open batch";
  SyncResult r = SubmitAndWait(ex, Batch{});
  caller.join();
  EXPECT_TRUE(created.load());
  ASSERT_TRUE(r.submit.ok()) << r.submit.ToString();
  ASSERT_EQ(r.statuses.size(), reqs.size());
  for (std::size_t i = 0; i < reqs.size(); ++i) {
    EXPECT_TRUE(r.statuses[i].ok()) << r.statuses[i].ToString();
    EXPECT_TRUE(MatchesExpected(reqs[i])) << "request " << i;
  }
}

}  // namespace attnrt::runtime::testing
