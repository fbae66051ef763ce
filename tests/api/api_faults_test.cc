// Faults through the public Runtime on the CPU executor (the executor's fault points reached with
// runtime::ScopedFaultInjectionForTesting): a failed block allocation, copy-on-write copy, launch
// or whole batch, and user callbacks that throw or block. Every accepted request completes
// exactly once with a Status, unaffected ones succeed and match the dense reference, block
// accounting (kv_cache_usage) stays exact, and the runtime keeps serving.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <attnrt/runtime.h>
#include "runtime/fault_injection.h"
#include "tests/support/dense_attention.h"
#include "tests/support/moodycamel_tsan.h"  // the scheduler's queue under TSan
#include "tests/support/random_fp16.h"
#include "tests/support/runtime_test_support.h"

namespace attnrt {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using testing::DenseKv;
using testing::Normal;
using testing::NormalRng;

constexpr int kBlockSize = 16;
constexpr double kMaxAbs = 2e-3, kRelL2 = 1e-3;
// Generous bounds for waits that normally take milliseconds: a loaded 2-core machine never
// comes near them, so they only fire on a real hang.
constexpr auto kHangBound = seconds(20);

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// One accepted request's delivery: how many times its callback ran and what it got.
struct Delivery {
  std::atomic<int> calls{0};
  DecodeResult result;
  std::promise<void> done;
  std::vector<double> expected;  // dense reference, empty when the key was already suspect

  DoneCallback Callback() {
    return [this](DecodeResult r) {
      if (calls.fetch_add(1) == 0) {
        result = std::move(r);
        done.set_value();
      }
    };
  }
  bool Wait(std::chrono::milliseconds bound) {
    return done.get_future().wait_for(bound) == std::future_status::ready;
  }
};

class RuntimeFaultsTest : public ::testing::Test {
 protected:
  RuntimeFaultsTest() {
    options_.shape.num_layers = 2;
    options_.shape.num_q_heads = 4;
    options_.shape.num_kv_heads = 2;
    options_.shape.head_dim = 64;
    options_.shape.block_size = kBlockSize;
    options_.shape.max_context = 256;
    options_.device = DeviceKind::kCpu;
    options_.kv_cache_bytes = std::size_t{4} << 20;
    options_.max_batch_size = 16;
    options_.max_queue_delay = std::chrono::microseconds(200);
    options_.completion_threads = 2;
  }

  void Start() {
    auto rt = Runtime::Create(options_);
    ASSERT_TRUE(rt.ok()) << rt.status().ToString();
    rt_ = std::move(*rt);
    q_elems_ = static_cast<std::size_t>(options_.shape.num_q_heads) * options_.shape.head_dim;
    kv_elems_ = static_cast<std::size_t>(options_.shape.kv_token_elems());
  }

  void CreateWithPrompt(SequenceId id, int tokens) {
    ASSERT_TRUE(rt_->CreateSequence(id).ok());
    for (int l = 0; l < options_.shape.num_layers; ++l) {
      auto k = Normal(rng_, kv_elems_ * tokens), v = Normal(rng_, kv_elems_ * tokens);
      ASSERT_TRUE(rt_->Prefill(id, l, tokens, k, v).ok());
      mirror_[{id, l}].Append(k, v);
    }
  }

  // Submits one decode step of (id, layer) with a callback; the mirror gets the token (and the
  // delivery its expected output) only when `track` (the key is still healthy).
  StatusOr<RequestHandle> SubmitStep(SequenceId id, int layer, Delivery* d, bool track = true,
                                     DoneCallback callback = nullptr) {
    auto q = Normal(rng_, q_elems_), k = Normal(rng_, kv_elems_), v = Normal(rng_, kv_elems_);
    DecodeRequest req = testing::MakeDecodeRequest(id, layer, q, k, v);
    if (track) {
      DenseKv& m = mirror_[{id, layer}];
      m.Append(k, v);
      d->expected = testing::DenseDecode(options_.shape, m, q);
    }
    return rt_->Submit(req, callback ? std::move(callback) : d->Callback());
  }

  void ExpectMatches(const Delivery& d, const std::string& what) {
    ASSERT_TRUE(d.result.status.ok()) << what << ": " << d.result.status.ToString();
    ASSERT_EQ(d.result.output.size(), q_elems_) << what;
    auto err = testing::CompareToReference(d.result.output, d.expected);
    EXPECT_LE(err.max_abs, kMaxAbs) << what;
    EXPECT_LE(err.rel_l2, kRelL2) << what;
  }

  std::int64_t BlocksInUse() const { return rt_->kv_cache_usage().blocks_in_use; }

  // A counter from MetricsText, by its full name (with labels).
  std::uint64_t Metric(const std::string& name) const {
    const std::string text = rt_->MetricsText();
    const std::size_t at = text.find("\n" + name + " ");
    EXPECT_NE(at, std::string::npos) << name;
    return at == std::string::npos ? 0 : std::stoull(text.substr(at + name.size() + 2));
  }

  runtime::ScopedFaultInjectionForTesting faults_;  // before rt_: the executor picks it up
  RuntimeOptions options_;
  std::unique_ptr<Runtime> rt_;
  std::size_t q_elems_ = 0, kv_elems_ = 0;
  NormalRng rng_{77};
  std::map<std::pair<SequenceId, int>, DenseKv> mirror_;
};

// Three requests in one batch (a full bucket of 3 dispatches at once, in submission order):
// the first needs a new block and its allocation fails; it alone completes with
// ResourceExhausted and its sequence is untouched; the third allocates and runs.
TEST_F(RuntimeFaultsTest, FailedBlockAllocationFailsOnlyTheRequestThatNeededIt) {
  options_.max_batch_size = 3;
  options_.buckets = {3};
  options_.max_queue_delay = seconds(5);
  Start();
  CreateWithPrompt(1, kBlockSize);      // full: the next token needs a block
  CreateWithPrompt(2, 5);
  CreateWithPrompt(3, 2 * kBlockSize);  // full
  ASSERT_EQ(BlocksInUse(), 4);

  Delivery d1, d2, d3;
  faults_->block_allocation.Arm(1);
  ASSERT_TRUE(SubmitStep(1, 0, &d1, /*track=*/false).ok());
  ASSERT_TRUE(SubmitStep(2, 0, &d2).ok());
  ASSERT_TRUE(SubmitStep(3, 0, &d3).ok());
  ASSERT_TRUE(d1.Wait(kHangBound) && d2.Wait(kHangBound) && d3.Wait(kHangBound));
  rt_->Drain();
  EXPECT_EQ(d1.result.status.code(), StatusCode::kResourceExhausted)
      << d1.result.status.ToString();
  EXPECT_TRUE(Contains(d1.result.status.message(), "injection"));
  ExpectMatches(d2, "sequence 2");
  ExpectMatches(d3, "sequence 3");
  EXPECT_EQ(d1.calls + d2.calls + d3.calls, 3);
  EXPECT_EQ(*rt_->SequenceLength(1, 0), kBlockSize);
  EXPECT_EQ(BlocksInUse(), 5);  // sequence 3's new block only
  EXPECT_EQ(faults_->block_allocation.injected(), 1);

  for (SequenceId id : {1, 2, 3}) ASSERT_TRUE(rt_->FreeSequence(id).ok());
  EXPECT_EQ(BlocksInUse(), 0);
  EXPECT_EQ(rt_->kv_cache_usage().sequences, 0);
}

// Prefill through the Runtime under a failed allocation: ResourceExhausted, nothing changed.
TEST_F(RuntimeFaultsTest, FailedAllocationInPrefillChangesNothing) {
  Start();
  CreateWithPrompt(1, 10);
  const std::int64_t before = BlocksInUse();
  auto k = Normal(rng_, kv_elems_ * 40), v = Normal(rng_, kv_elems_ * 40);
  faults_->block_allocation.Arm(1, /*skip=*/1);
  const Status s = rt_->Prefill(1, 1, 40, k, v);
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted) << s.ToString();
  EXPECT_EQ(*rt_->SequenceLength(1, 1), 10);
  EXPECT_EQ(BlocksInUse(), before);
  ASSERT_TRUE(rt_->Prefill(1, 1, 40, k, v).ok());
  mirror_[{1, 1}].Append(k, v);
  Delivery d;
  ASSERT_TRUE(SubmitStep(1, 1, &d).ok());
  ASSERT_TRUE(d.Wait(kHangBound));
  ExpectMatches(d, "after the retried prefill");
  EXPECT_EQ(BlocksInUse(), 4);  // ceil(51 / 16)
}

// Four client threads decode their own parents and forked children (each fork shares a partly
// filled block, so first appends copy on write) while a fault of the parameter's kind fails
// batches. Every request completes exactly once; an OK one matches the reference; a failed one
// says why (the injected Internal error, or FailedPrecondition for a token lost earlier) and its
// key is not trusted again; healthy keys keep decoding; blocks in use are exactly what the
// lengths and the remaining sharing say; freeing everything returns every block.
class RuntimeBatchFaultsTest : public RuntimeFaultsTest,
                               public ::testing::WithParamInterface<const char*> {};

TEST_P(RuntimeBatchFaultsTest, EveryRequestCompletesOnceAndHealthyKeysRunOn) {
  const std::string kind = GetParam();
  Start();
  constexpr int kThreads = 4, kParentsPerThread = 2, kSteps = 12, kForkAt = 10;
  constexpr SequenceId kChildOffset = 100;
  for (SequenceId p = 1; p <= kThreads * kParentsPerThread; ++p) {
    CreateWithPrompt(p, kForkAt);
    ASSERT_TRUE(rt_->ForkSequence(p, p + kChildOffset).ok());
    for (int l = 0; l < 2; ++l) mirror_[{p + kChildOffset, l}] = mirror_[{p, l}];
  }
  ASSERT_EQ(BlocksInUse(), kThreads * kParentsPerThread);  // one shared block per pair

  runtime::FaultPoint& point = kind == "copy"     ? faults_->copy
                               : kind == "launch" ? faults_->launch
                                                  : faults_->batch;
  // A copy happens only in the first batches (first appends); launch and batch faults land a few
  // batches in. Every copy may land in the first batch, so only one copy fault is sure to hit.
  const int count = kind == "copy" ? 1 : 2;
  point.Arm(count, /*skip=*/kind == "copy" ? 0 : 3);

  std::mutex mu;  // guards rng_ and mirror_ (SubmitStep) across the client threads
  std::atomic<int> ok{0}, failed{0}, lost_after{0};
  std::vector<std::vector<std::unique_ptr<Delivery>>> kept(kThreads);  // checked after Drain
  std::vector<std::thread> clients;
  for (int t = 0; t < kThreads; ++t) {
    clients.emplace_back([&, t] {
      std::vector<std::pair<SequenceId, int>> keys;
      for (int i = 0; i < kParentsPerThread; ++i) {
        const SequenceId p = 1 + t * kParentsPerThread + i;
        for (int l = 0; l < 2; ++l) {
          keys.push_back({p, l});
          keys.push_back({p + kChildOffset, l});
        }
      }
      std::map<std::pair<SequenceId, int>, bool> suspect;
      for (int step = 0; step < kSteps; ++step) {
        std::vector<std::unique_ptr<Delivery>> ds;
        std::vector<std::pair<SequenceId, int>> sent;
        for (const auto& key : keys) {
          auto d = std::make_unique<Delivery>();
          std::unique_lock<std::mutex> lock(mu);
          StatusOr<RequestHandle> h =
              SubmitStep(key.first, key.second, d.get(), /*track=*/!suspect[key]);
          lock.unlock();
          ASSERT_TRUE(h.ok()) << h.status().ToString();
          ds.push_back(std::move(d));
          sent.push_back(key);
        }
        for (std::size_t i = 0; i < ds.size(); ++i) {
          ASSERT_TRUE(ds[i]->Wait(kHangBound)) << "request never completed";
          const Status& s = ds[i]->result.status;
          if (suspect[sent[i]]) {
            // Its token was lost earlier: it must fail, never read undefined K/V.
            EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.ToString();
            ++lost_after;
            continue;
          }
          if (s.ok()) {
            std::lock_guard<std::mutex> lock(mu);
            ExpectMatches(*ds[i], "key (" + std::to_string(sent[i].first) + ", " +
                                      std::to_string(sent[i].second) + ")");
            ++ok;
          } else {
            EXPECT_TRUE((s.code() == StatusCode::kInternal && Contains(s.message(), "injected")) ||
                        s.code() == StatusCode::kFailedPrecondition)
                << s.ToString();
            suspect[sent[i]] = true;
            ++failed;
          }
        }
        for (auto& d : ds) kept[t].push_back(std::move(d));
      }
    });
  }
  for (auto& c : clients) c.join();
  EXPECT_EQ(point.injected(), count);
  EXPECT_GT(failed.load(), 0);
  EXPECT_GT(ok.load(), 0);
  EXPECT_EQ(ok + failed + lost_after, kThreads * kParentsPerThread * 4 * kSteps);
  EXPECT_EQ(Metric("attnrt_scheduler_requests_completed_total"),
            static_cast<std::uint64_t>(kThreads * kParentsPerThread * 4 * kSteps));
  EXPECT_EQ(Metric("attnrt_scheduler_requests_failed_total"),
            static_cast<std::uint64_t>(failed + lost_after));

  // Exact accounting: every sequence holds ceil(longest layer / block) blocks; a pair still
  // shares its first block only if neither ever appended (not the case after kSteps steps).
  std::int64_t expected = 0;
  for (SequenceId p = 1; p <= kThreads * kParentsPerThread; ++p) {
    for (SequenceId id : {p, p + kChildOffset}) {
      int longest = 0;
      for (int l = 0; l < 2; ++l) longest = std::max(longest, *rt_->SequenceLength(id, l));
      expected += (longest + kBlockSize - 1) / kBlockSize;
    }
  }
  EXPECT_EQ(BlocksInUse(), expected);

  // The runtime keeps serving: fresh sequences decode right, then everything frees to zero.
  for (SequenceId id = 500; id < 504; ++id) {
    CreateWithPrompt(id, 3);
    Delivery d;
    ASSERT_TRUE(SubmitStep(id, 1, &d).ok());
    ASSERT_TRUE(d.Wait(kHangBound));
    ExpectMatches(d, "fresh sequence");
    ASSERT_TRUE(rt_->FreeSequence(id).ok());
  }
  // Exactly once, checked after Drain (every completion task done): no late second delivery.
  rt_->Drain();
  for (const auto& per_thread : kept) {
    for (const auto& d : per_thread) EXPECT_EQ(d->calls.load(), 1);
  }
  for (SequenceId p = 1; p <= kThreads * kParentsPerThread; ++p) {
    ASSERT_TRUE(rt_->FreeSequence(p).ok());
    ASSERT_TRUE(rt_->FreeSequence(p + kChildOffset).ok());
  }
  EXPECT_EQ(BlocksInUse(), 0);
  EXPECT_EQ(rt_->kv_cache_usage().sequences, 0);
}

INSTANTIATE_TEST_SUITE_P(Kinds, RuntimeBatchFaultsTest,
                         ::testing::Values("copy", "launch", "batch"),
                         [](const auto& info) { return std::string(info.param); });

// Callbacks that throw (a std::exception, and something else) are caught by the scheduler: each
// request is delivered once and counted completed, its sequence is idle again (FreeSequence
// works), the other requests of the same batches are delivered and right, and later rounds run.
TEST_F(RuntimeFaultsTest, ThrowingCallbacksAreDeliveredOnceAndOthersUnaffected) {
  Start();
  constexpr int kSequences = 6, kRounds = 4;
  for (SequenceId id = 1; id <= kSequences; ++id) CreateWithPrompt(id, 7);
  int submitted = 0, thrown = 0;
  std::vector<std::unique_ptr<Delivery>> all;
  for (int round = 0; round < kRounds; ++round) {
    std::vector<std::unique_ptr<Delivery>> ds;
    for (SequenceId id = 1; id <= kSequences; ++id) {
      for (int l = 0; l < 2; ++l) {
        ds.push_back(std::make_unique<Delivery>());
        Delivery* d = ds.back().get();
        const int kind = submitted % 3;  // 0: returns; 1: throws std::runtime_error; 2: throws int
        DoneCallback cb = [d, kind](DecodeResult r) {
          d->Callback()(std::move(r));
          if (kind == 1) throw std::runtime_error("callback failure on purpose");
          if (kind == 2) throw 42;
        };
        thrown += kind != 0;
        ASSERT_TRUE(SubmitStep(id, l, d, true, std::move(cb)).ok());
        ++submitted;
      }
    }
    for (std::size_t i = 0; i < ds.size(); ++i) {
      ASSERT_TRUE(ds[i]->Wait(kHangBound));
      ExpectMatches(*ds[i], "round " + std::to_string(round) + " request " + std::to_string(i));
    }
    for (auto& d : ds) all.push_back(std::move(d));
  }
  rt_->Drain();  // waits for every completion task, the throwing ones included
  for (const auto& d : all) EXPECT_EQ(d->calls.load(), 1);
  EXPECT_GT(thrown, 0);
  EXPECT_EQ(Metric("attnrt_scheduler_requests_completed_total"),
            static_cast<std::uint64_t>(submitted));
  EXPECT_EQ(Metric("attnrt_scheduler_requests_failed_total"), 0u);
  for (SequenceId id = 1; id <= kSequences; ++id) {
    EXPECT_EQ(*rt_->SequenceLength(id, 0), 7 + kRounds);
    const Status s = rt_->FreeSequence(id);  // refused if a thrown-from delivery left it busy
    EXPECT_TRUE(s.ok()) << s.ToString();
  }
  EXPECT_EQ(BlocksInUse(), 0);
}

// A callback that blocks holds its completion thread only: requests completing meanwhile (on the
// other completion thread, or inline for futures) are delivered while it is still blocked; once
// it returns nothing is missing.
TEST_F(RuntimeFaultsTest, BlockingCallbackHoldsOnlyItsOwnCompletionThread) {
  options_.completion_threads = 2;
  Start();
  for (SequenceId id = 1; id <= 9; ++id) CreateWithPrompt(id, 5);

  std::promise<void> entered, release;
  std::shared_future<void> released = release.get_future().share();
  std::atomic<bool> returned{false};
  Delivery blocker;
  DoneCallback blocking = [&](DecodeResult r) {
    blocker.Callback()(std::move(r));
    entered.set_value();
    // Bounded: a broken test must not hang ctest.
    released.wait_for(kHangBound);
    returned = true;
  };
  ASSERT_TRUE(SubmitStep(1, 0, &blocker, true, blocking).ok());
  ASSERT_EQ(entered.get_future().wait_for(kHangBound), std::future_status::ready);

  // Meanwhile: two threads, callbacks and futures, on the other sequences.
  std::vector<std::unique_ptr<Delivery>> ds(16);
  std::vector<ResultFuture> futures;
  std::mutex mu;
  std::vector<std::thread> submitters;
  for (int t = 0; t < 2; ++t) {
    submitters.emplace_back([&, t] {
      for (int i = 0; i < 8; ++i) {
        const SequenceId id = 2 + (t * 8 + i) % 8;
        const int layer = t;
        std::lock_guard<std::mutex> lock(mu);
        if (i % 2 == 0) {
          ds[t * 8 + i] = std::make_unique<Delivery>();
          ASSERT_TRUE(SubmitStep(id, layer, ds[t * 8 + i].get()).ok());
          // Each key once in flight at a time: wait before the next step of the same key.
          ASSERT_TRUE(ds[t * 8 + i]->Wait(kHangBound));
        } else {
          auto q = Normal(rng_, q_elems_), k = Normal(rng_, kv_elems_), v = Normal(rng_, kv_elems_);
          DecodeRequest req = testing::MakeDecodeRequest(id, layer, q, k, v);
          DenseKv& m = mirror_[{id, layer}];
          m.Append(k, v);
          ds[t * 8 + i] = std::make_unique<Delivery>();
          ds[t * 8 + i]->expected = testing::DenseDecode(options_.shape, m, q);
          auto sub = rt_->Submit(req);
          ASSERT_TRUE(sub.ok());
          ASSERT_EQ(sub->result.wait_for(kHangBound), std::future_status::ready);
          ds[t * 8 + i]->result = sub->result.get();
          ds[t * 8 + i]->calls = 1;
        }
      }
    });
  }
  for (auto& s : submitters) s.join();
  EXPECT_FALSE(returned.load()) << "the others should not have waited for the blocked callback";
  for (std::size_t i = 0; i < ds.size(); ++i) {
    ASSERT_NE(ds[i], nullptr);
    ExpectMatches(*ds[i], "request " + std::to_string(i) + " while a callback blocks");
    EXPECT_EQ(ds[i]->calls.load(), 1);
  }
  release.set_value();
  rt_->Drain();
  EXPECT_TRUE(returned.load());
  EXPECT_EQ(blocker.calls.load(), 1);
  ExpectMatches(blocker, "the blocking callback's own result");
  EXPECT_EQ(Metric("attnrt_scheduler_requests_completed_total"), 17u);
  for (SequenceId id = 1; id <= 9; ++id) ASSERT_TRUE(rt_->FreeSequence(id).ok());
  EXPECT_EQ(BlocksInUse(), 0);
}

}  // namespace
}  // namespace attnrt
