// The public Runtime's wiring of sequence management (fork, free), Cancel, priority, timeouts and
// the check_finite / min_batch_size options: each call goes through attnrt/runtime.h and is checked
// for its documented effect. Runs on the CPU executor everywhere, on the CUDA executor with a GPU.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <future>
#include <limits>
#include <string>
#include <vector>

#include <attnrt/runtime.h>
#include "api/internal/cuda_device.h"
#include "tests/support/dense_attention.h"
#include "tests/support/random_fp16.h"
#include "tests/support/runtime_test_support.h"

namespace attnrt {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using testing::DenseKv;
using testing::FillNormal;
using testing::NormalRng;
using testing::Normal;

// A window no test waits out: every request held by it is cancelled, drained or completed by an
// early dispatch well before it expires (the timing assertions leave a margin of seconds).
constexpr auto kLongWindow = seconds(5);
constexpr auto kWellBeforeWindow = seconds(2);
constexpr auto kStillQueuedProbe = milliseconds(300);
constexpr double kMaxAbs = 2e-3, kRelL2 = 1e-3;

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

bool AnyNonFinite(const std::vector<Half>& out) {
  for (Half h : out) {
    if (!std::isfinite(HalfToFloat(h))) return true;
  }
  return false;
}

bool IsReady(ResultFuture& f, std::chrono::milliseconds wait = milliseconds(0)) {
  return f.wait_for(wait) == std::future_status::ready;
}

// One decode step's inputs, kept alive for the reference.
struct Step {
  std::vector<Half> q, k, v;
};

class RuntimeWiringTest : public testing::RuntimeDeviceTest {
 protected:
  // Options under which a lone request (or several of one (sequence, layer)) stays queued: the
  // full bucket is 2, a batch never holds two requests of one (sequence, layer), and the window
  // outlasts the test (scheduler/scheduler.h, "Batching window").
  void HoldingWindow() {
    options_.max_batch_size = 2;
    options_.buckets = {1, 2};
    options_.max_queue_delay = kLongWindow;
  }

  void Start() {
    auto rt = Runtime::Create(options_);
    ASSERT_TRUE(rt.ok()) << rt.status().ToString();
    rt_ = std::move(*rt);
    shape_ = rt_->shape();
    q_elems_ = static_cast<std::size_t>(shape_.num_q_heads) * shape_.head_dim;
    kv_elems_ = static_cast<std::size_t>(shape_.kv_token_elems());
  }

  Step NewStep() {
    return Step{Normal(rng_, q_elems_), Normal(rng_, kv_elems_), Normal(rng_, kv_elems_)};
  }

  DecodeRequest Request(std::uint64_t id, int layer, const Step& s) const {
    DecodeRequest req = testing::MakeDecodeRequest(id, layer, s.q, s.k, s.v);
    return req;
  }

  // Writes a prompt of `tokens` random tokens to (id, layer) and its mirror.
  void PrefillRandom(std::uint64_t id, int layer, int tokens, DenseKv* mirror) {
    auto k = Normal(rng_, kv_elems_ * tokens), v = Normal(rng_, kv_elems_ * tokens);
    Status s = rt_->Prefill(id, layer, tokens, k, v);
    ASSERT_TRUE(s.ok()) << s.ToString();
    if (mirror != nullptr) mirror->Append(k, v);
  }

  // Submits one step, waits for it, and checks it against the dense reference over `mirror`
  // (which gets the step's token first, as the cache does).
  void DecodeAndCheck(std::uint64_t id, int layer, DenseKv* mirror, const std::string& what) {
    Step s = NewStep();
    auto sub = rt_->Submit(Request(id, layer, s));
    ASSERT_TRUE(sub.ok()) << what << ": " << sub.status().ToString();
    mirror->Append(s.k, s.v);
    DecodeResult r = sub->result.get();
    ASSERT_TRUE(r.status.ok()) << what << ": " << r.status.ToString();
    ASSERT_EQ(r.output.size(), q_elems_) << what;
    auto err = testing::CompareToReference(r.output, testing::DenseDecode(shape_, *mirror, s.q));
    EXPECT_LE(err.max_abs, kMaxAbs) << what;
    EXPECT_LE(err.rel_l2, kRelL2) << what;
  }

  int Length(std::uint64_t id, int layer) {
    auto len = rt_->SequenceLength(id, layer);
    EXPECT_TRUE(len.ok()) << len.status().ToString();
    return len.ok() ? *len : -1;
  }

  std::unique_ptr<Runtime> rt_;
  ModelShape shape_;
  std::size_t q_elems_ = 0, kv_elems_ = 0;
  NormalRng rng_{2024};
};

// ---- ForkSequence ---------------------------------------------------------------------------

TEST_P(RuntimeWiringTest, ForkedChildDecodesAgainstParentPrefixThenBothDiverge) {
  Start();
  constexpr int kPrompt = 37;  // not a block multiple: the shared last block is partial
  DenseKv parent[2], child[2];
  const std::int64_t blocks_before = rt_->kv_cache_usage().blocks_in_use;
  ASSERT_TRUE(rt_->CreateSequence(10).ok());
  for (int layer = 0; layer < 2; ++layer) PrefillRandom(10, layer, kPrompt, &parent[layer]);
  const KvCacheUsage after_prefill = rt_->kv_cache_usage();
  ASSERT_GT(after_prefill.blocks_in_use, blocks_before);

  Status fork = rt_->ForkSequence(10, 11);
  ASSERT_TRUE(fork.ok()) << fork.ToString();
  // The child shares the parent's blocks (counted once) and its length.
  EXPECT_EQ(rt_->kv_cache_usage().blocks_in_use, after_prefill.blocks_in_use);
  EXPECT_EQ(rt_->kv_cache_usage().sequences, after_prefill.sequences + 1);
  for (int layer = 0; layer < 2; ++layer) {
    EXPECT_EQ(Length(11, layer), kPrompt);
    child[layer] = parent[layer];
  }

  // Child first, then parent, then both again: each sees the prefix plus only its own tokens.
  for (int round = 0; round < 3; ++round) {
    for (int layer = 0; layer < 2; ++layer) {
      const std::string at = " round " + std::to_string(round) + " layer " + std::to_string(layer);
      DecodeAndCheck(11, layer, &child[layer], "child" + at);
      DecodeAndCheck(10, layer, &parent[layer], "parent" + at);
    }
  }
  for (int layer = 0; layer < 2; ++layer) {
    EXPECT_EQ(Length(10, layer), kPrompt + 3);
    EXPECT_EQ(Length(11, layer), kPrompt + 3);
  }
  // Copy-on-write gave the child its own last block.
  EXPECT_GT(rt_->kv_cache_usage().blocks_in_use, after_prefill.blocks_in_use);

  // Freeing the parent leaves the shared prefix intact for the child.
  ASSERT_TRUE(rt_->FreeSequence(10).ok());
  for (int layer = 0; layer < 2; ++layer) {
    DecodeAndCheck(11, layer, &child[layer],
                   "child after parent freed, layer " + std::to_string(layer));
  }
  ASSERT_TRUE(rt_->FreeSequence(11).ok());
  EXPECT_EQ(rt_->kv_cache_usage().blocks_in_use, blocks_before);
}

TEST_P(RuntimeWiringTest, ForkRejectsUnknownParentAndExistingChild) {
  Start();
  Status unknown = rt_->ForkSequence(4242, 1);
  EXPECT_EQ(unknown.code(), StatusCode::kNotFound) << unknown.ToString();
  EXPECT_TRUE(Contains(unknown.message(), "4242")) << unknown.ToString();
  // Nothing was created under the child id.
  EXPECT_EQ(rt_->SequenceLength(1, 0).status().code(), StatusCode::kNotFound);

  ASSERT_TRUE(rt_->CreateSequence(1).ok());
  ASSERT_TRUE(rt_->CreateSequence(2).ok());
  PrefillRandom(2, 0, 3, nullptr);
  Status exists = rt_->ForkSequence(1, 2);
  EXPECT_EQ(exists.code(), StatusCode::kAlreadyExists) << exists.ToString();
  EXPECT_TRUE(Contains(exists.message(), "sequence 2")) << exists.ToString();
  EXPECT_EQ(Length(2, 0), 3);  // the existing child is untouched
  Status self = rt_->ForkSequence(1, 1);
  EXPECT_EQ(self.code(), StatusCode::kAlreadyExists) << self.ToString();
}

// ---- FreeSequence ---------------------------------------------------------------------------

TEST_P(RuntimeWiringTest, FreedSequenceIsNotFoundItsBlocksReturnAndItsIdCanBeReused) {
  Start();
  const KvCacheUsage before = rt_->kv_cache_usage();
  ASSERT_TRUE(rt_->CreateSequence(77).ok());
  for (int layer = 0; layer < 2; ++layer) PrefillRandom(77, layer, 40, nullptr);
  DenseKv mirror77;
  const KvCacheUsage held = rt_->kv_cache_usage();
  EXPECT_GT(held.blocks_in_use, before.blocks_in_use);
  EXPECT_EQ(held.sequences, before.sequences + 1);
  EXPECT_TRUE(Contains(rt_->MetricsText(), "attnrt_kv_blocks{state=\"in_use\"} " +
                                               std::to_string(held.blocks_in_use) + "\n"))
      << rt_->MetricsText();

  Status freed = rt_->FreeSequence(77);
  ASSERT_TRUE(freed.ok()) << freed.ToString();
  const KvCacheUsage after = rt_->kv_cache_usage();
  EXPECT_EQ(after.blocks_in_use, before.blocks_in_use);
  EXPECT_EQ(after.sequences, before.sequences);
  EXPECT_TRUE(Contains(rt_->MetricsText(), "attnrt_kv_blocks{state=\"in_use\"} " +
                                               std::to_string(before.blocks_in_use) + "\n"))
      << rt_->MetricsText();

  Step s = NewStep();
  auto submit = rt_->Submit(Request(77, 0, s));
  ASSERT_FALSE(submit.ok());
  EXPECT_EQ(submit.status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(Contains(submit.status().message(), "77")) << submit.status().ToString();
  Status prefill = rt_->Prefill(77, 0, 1, s.k, s.v);
  EXPECT_EQ(prefill.code(), StatusCode::kNotFound) << prefill.ToString();
  EXPECT_TRUE(Contains(prefill.message(), "77")) << prefill.ToString();
  auto length = rt_->SequenceLength(77, 1);
  EXPECT_EQ(length.status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(Contains(length.status().message(), "77")) << length.status().ToString();
  Status again = rt_->FreeSequence(77);
  EXPECT_EQ(again.code(), StatusCode::kNotFound) << again.ToString();
  EXPECT_TRUE(Contains(again.message(), "77")) << again.ToString();

  // Re-created, the id starts empty: its decodes see none of the freed tokens.
  ASSERT_TRUE(rt_->CreateSequence(77).ok());
  EXPECT_EQ(Length(77, 0), 0);
  EXPECT_EQ(Length(77, 1), 0);
  PrefillRandom(77, 1, 5, &mirror77);
  DecodeAndCheck(77, 1, &mirror77, "re-created sequence");
  EXPECT_EQ(Length(77, 1), 6);
}

TEST_P(RuntimeWiringTest, SequenceCallsRefusedWhileADecodeIsOutstanding) {
  HoldingWindow();
  Start();
  ASSERT_TRUE(rt_->CreateSequence(5).ok());
  DenseKv mirror;
  PrefillRandom(5, 0, 9, &mirror);
  Step held = NewStep();
  auto sub = rt_->Submit(Request(5, 0, held));
  ASSERT_TRUE(sub.ok()) << sub.status().ToString();
  ASSERT_FALSE(IsReady(sub->result, milliseconds(50))) << "the request should be held queued";

  auto expect_refused = [](const Status& s, const std::string& call) {
    EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << call << ": " << s.ToString();
    EXPECT_TRUE(Contains(s.message(), call)) << s.ToString();
    EXPECT_TRUE(Contains(s.message(), "not yet completed")) << s.ToString();
    EXPECT_TRUE(Contains(s.message(), "sequence_id 5")) << s.ToString();
  };
  Step more = NewStep();
  expect_refused(rt_->FreeSequence(5), "FreeSequence");
  expect_refused(rt_->ForkSequence(5, 6), "ForkSequence");
  expect_refused(rt_->Prefill(5, 1, 1, more.k, more.v), "Prefill");
  // Refused calls changed nothing.
  EXPECT_EQ(rt_->SequenceLength(6, 0).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(Length(5, 0), 9);
  EXPECT_EQ(Length(5, 1), 0);

  ASSERT_TRUE(rt_->Cancel(sub->handle));
  DecodeResult r = sub->result.get();
  EXPECT_EQ(r.status.code(), StatusCode::kCancelled) << r.status.ToString();

  // Once the result is visible the same calls succeed.
  Status prefill = rt_->Prefill(5, 1, 1, more.k, more.v);
  EXPECT_TRUE(prefill.ok()) << prefill.ToString();
  Status fork = rt_->ForkSequence(5, 6);
  EXPECT_TRUE(fork.ok()) << fork.ToString();
  EXPECT_EQ(Length(6, 0), 9);  // the cancelled token was never stored
  Status free = rt_->FreeSequence(5);
  EXPECT_TRUE(free.ok()) << free.ToString();
}

// ---- Cancel ---------------------------------------------------------------------------------

TEST_P(RuntimeWiringTest, CancelOfAQueuedRequestCompletesItWithCancelled) {
  HoldingWindow();
  Start();
  ASSERT_TRUE(rt_->CreateSequence(3).ok());
  Step s = NewStep();
  const auto start = std::chrono::steady_clock::now();
  auto sub = rt_->Submit(Request(3, 1, s));
  ASSERT_TRUE(sub.ok()) << sub.status().ToString();
  EXPECT_TRUE(rt_->Cancel(sub->handle));
  ASSERT_TRUE(IsReady(sub->result, kWellBeforeWindow)) << "Cancel did not complete the request";
  EXPECT_LT(std::chrono::steady_clock::now() - start, kWellBeforeWindow);
  DecodeResult r = sub->result.get();
  EXPECT_EQ(r.status.code(), StatusCode::kCancelled) << r.status.ToString();
  EXPECT_TRUE(r.output.empty());
  EXPECT_EQ(Length(3, 1), 0);  // never ran
  EXPECT_FALSE(rt_->Cancel(sub->handle)) << "Cancel after completion";
  EXPECT_FALSE(rt_->Cancel(RequestHandle{})) << "Cancel of an empty handle";

  // A request that ran cannot be cancelled afterwards; callback form too.
  std::promise<DecodeResult> done;
  Step ran_step = NewStep();
  auto handle = rt_->Submit(Request(3, 1, ran_step),
                            [&](DecodeResult result) { done.set_value(std::move(result)); });
  ASSERT_TRUE(handle.ok()) << handle.status().ToString();
  rt_->Drain();  // dispatches the lone request without waiting for the window
  DecodeResult ran = done.get_future().get();
  EXPECT_TRUE(ran.status.ok()) << ran.status.ToString();
  EXPECT_FALSE(rt_->Cancel(*handle));
  EXPECT_EQ(Length(3, 1), 1);
}

// ---- priority -------------------------------------------------------------------------------

// Two requests of one (sequence, layer) never share a batch, so under the holding window both
// stay queued; Drain then dispatches one batch at a time, taking priority 0 first. Which ran
// first shows in the outputs: the first attends the prefix plus its own token, the second also
// the first's token. A runtime that ignored priority (FIFO) would run the low request first.
// (Requests of different sequences cannot be held this way: with distinct (sequence, layer)s a
// full bucket forms and dispatches at once, so their order would depend on intake timing.)
TEST_P(RuntimeWiringTest, HigherPriorityRequestOvertakesQueuedLowerPriority) {
  HoldingWindow();
  Start();
  ASSERT_TRUE(rt_->CreateSequence(8).ok());
  DenseKv prefix;
  PrefillRandom(8, 0, 20, &prefix);
  Step low = NewStep(), high = NewStep();
  DecodeRequest low_req = Request(8, 0, low);
  low_req.priority = 1;
  DecodeRequest high_req = Request(8, 0, high);
  high_req.priority = 0;
  auto low_sub = rt_->Submit(low_req);
  ASSERT_TRUE(low_sub.ok()) << low_sub.status().ToString();
  auto high_sub = rt_->Submit(high_req);
  ASSERT_TRUE(high_sub.ok()) << high_sub.status().ToString();
  EXPECT_FALSE(IsReady(low_sub->result, milliseconds(50)));
  EXPECT_FALSE(IsReady(high_sub->result));

  rt_->Drain();
  DenseKv high_first = prefix;
  high_first.Append(high.k, high.v);
  DenseKv then_low = high_first;
  then_low.Append(low.k, low.v);
  DecodeResult h = high_sub->result.get(), l = low_sub->result.get();
  ASSERT_TRUE(h.status.ok()) << h.status.ToString();
  ASSERT_TRUE(l.status.ok()) << l.status.ToString();
  auto h_err =
      testing::CompareToReference(h.output, testing::DenseDecode(shape_, high_first, high.q));
  auto l_err =
      testing::CompareToReference(l.output, testing::DenseDecode(shape_, then_low, low.q));
  EXPECT_LE(h_err.max_abs, kMaxAbs) << "priority 0 did not run first";
  EXPECT_LE(h_err.rel_l2, kRelL2) << "priority 0 did not run first";
  EXPECT_LE(l_err.max_abs, kMaxAbs) << "priority 1 did not run after priority 0";
  EXPECT_LE(l_err.rel_l2, kRelL2) << "priority 1 did not run after priority 0";
  EXPECT_EQ(Length(8, 0), 22);
}

TEST_P(RuntimeWiringTest, RejectsPriorityOutOfRangeNamingIt) {
  options_.num_priority_levels = 3;
  Start();
  ASSERT_TRUE(rt_->CreateSequence(1).ok());
  Step s = NewStep();
  for (int priority : {3, -1}) {
    DecodeRequest req = Request(1, 0, s);
    req.priority = priority;
    auto sub = rt_->Submit(req);
    ASSERT_FALSE(sub.ok()) << "priority " << priority;
    EXPECT_EQ(sub.status().code(), StatusCode::kInvalidArgument);
    EXPECT_TRUE(Contains(sub.status().message(), "priority " + std::to_string(priority)))
        << sub.status().ToString();
  }
  // The last level is in range (num_priority_levels reached the scheduler).
  DecodeRequest req = Request(1, 0, s);
  req.priority = 2;
  auto sub = rt_->Submit(req);
  ASSERT_TRUE(sub.ok()) << sub.status().ToString();
  EXPECT_TRUE(sub->result.get().status.ok());
  EXPECT_EQ(Length(1, 0), 1);
}

// ---- timeout --------------------------------------------------------------------------------

TEST_P(RuntimeWiringTest, QueuedRequestPastItsTimeoutCompletesWithDeadlineExceeded) {
  HoldingWindow();
  Start();
  ASSERT_TRUE(rt_->CreateSequence(9).ok());
  Step s = NewStep();
  DecodeRequest req = Request(9, 1, s);
  req.timeout = milliseconds(50);
  const auto start = std::chrono::steady_clock::now();
  auto sub = rt_->Submit(req);
  ASSERT_TRUE(sub.ok()) << sub.status().ToString();
  ASSERT_TRUE(IsReady(sub->result, kWellBeforeWindow)) << "the deadline did not end the wait";
  EXPECT_LT(std::chrono::steady_clock::now() - start, kWellBeforeWindow);
  DecodeResult r = sub->result.get();
  EXPECT_EQ(r.status.code(), StatusCode::kDeadlineExceeded) << r.status.ToString();
  EXPECT_TRUE(Contains(r.status.message(), "sequence_id 9")) << r.status.ToString();
  EXPECT_EQ(Length(9, 1), 0);
  EXPECT_FALSE(rt_->Cancel(sub->handle));
}

TEST_P(RuntimeWiringTest, RejectsTimeoutNotPositiveOrLongerThanDefault) {
  options_.default_timeout = seconds(1);
  Start();
  ASSERT_TRUE(rt_->CreateSequence(1).ok());
  Step s = NewStep();
  DecodeRequest req = Request(1, 0, s);
  req.timeout = milliseconds(1500);
  auto longer = rt_->Submit(req);
  ASSERT_FALSE(longer.ok());
  EXPECT_EQ(longer.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(longer.status().message(), "timeout")) << longer.status().ToString();
  EXPECT_TRUE(Contains(longer.status().message(), "default_timeout")) << longer.status().ToString();
  for (auto bad : {std::chrono::microseconds(0), std::chrono::microseconds(-5)}) {
    req.timeout = bad;
    auto sub = rt_->Submit(req);
    ASSERT_FALSE(sub.ok()) << bad.count() << "us";
    EXPECT_EQ(sub.status().code(), StatusCode::kInvalidArgument);
    EXPECT_TRUE(Contains(sub.status().message(), "timeout")) << sub.status().ToString();
  }
  EXPECT_EQ(Length(1, 0), 0);  // nothing was enqueued
  req.timeout = seconds(1);  // equal to the default: allowed
  auto ok = rt_->Submit(req);
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_TRUE(ok->result.get().status.ok());
}

// ---- check_finite ---------------------------------------------------------------------------

TEST_P(RuntimeWiringTest, RejectsNonFiniteInputsByDefaultNamingTensorAndElement) {
  Start();
  ASSERT_TRUE(rt_->CreateSequence(2).ok());
  const Half kInf{0x7c00}, kNegInf{0xfc00};
  struct Case {
    const char* tensor;
    std::size_t element;
    Half value;
  };
  for (const Case& c : {Case{"q", 5, testing::kHalfNaN}, Case{"k", 70, kInf},
                        Case{"v", 127, kNegInf}}) {
    Step s = NewStep();
    std::vector<Half>& t = c.tensor[0] == 'q' ? s.q : c.tensor[0] == 'k' ? s.k : s.v;
    t[c.element] = c.value;
    auto sub = rt_->Submit(Request(2, 0, s));
    ASSERT_FALSE(sub.ok()) << c.tensor;
    EXPECT_EQ(sub.status().code(), StatusCode::kInvalidArgument);
    EXPECT_TRUE(Contains(sub.status().message(), std::string(c.tensor) + " holds a non-finite"))
        << sub.status().ToString();
    EXPECT_TRUE(Contains(sub.status().message(), "element " + std::to_string(c.element)))
        << sub.status().ToString();
  }
  EXPECT_EQ(Length(2, 0), 0);  // none was stored
  // None is outstanding either (the check runs after admission, in Submit's copy): the sequence
  // is idle, and a good request of it still decodes.
  const Step ok_step = NewStep();
  auto good = rt_->Submit(Request(2, 0, ok_step));
  ASSERT_TRUE(good.ok()) << good.status().ToString();
  EXPECT_TRUE(good->result.get().status.ok());
  EXPECT_TRUE(rt_->FreeSequence(2).ok());
}

// With check_finite off a NaN in k is accepted and stored: as RuntimeOptions documents, every
// later output of that sequence (heads reading that KV head) is then non-finite, since the
// token's score is NaN and softmax spreads it. Other sequences keep their exact outputs.
TEST_P(RuntimeWiringTest, WithoutCheckFiniteNanInKPoisonsOnlyItsOwnSequence) {
  options_.check_finite = false;
  Start();
  ASSERT_TRUE(rt_->CreateSequence(1).ok());
  ASSERT_TRUE(rt_->CreateSequence(2).ok());
  DenseKv clean;
  PrefillRandom(1, 0, 12, nullptr);
  PrefillRandom(2, 0, 12, &clean);

  Step poisoned = NewStep();
  poisoned.k[3] = testing::kHalfNaN;  // KV head 0
  auto sub = rt_->Submit(Request(1, 0, poisoned));
  ASSERT_TRUE(sub.ok()) << "check_finite=false must accept NaN: " << sub.status().ToString();
  DecodeResult first = sub->result.get();
  ASSERT_TRUE(first.status.ok()) << first.status.ToString();
  EXPECT_EQ(Length(1, 0), 13);

  Step later = NewStep();
  auto next = rt_->Submit(Request(1, 0, later));
  ASSERT_TRUE(next.ok()) << next.status().ToString();
  DecodeResult r = next->result.get();
  ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  ASSERT_EQ(r.output.size(), q_elems_);
  EXPECT_TRUE(AnyNonFinite(r.output)) << "a stored NaN key left a later output finite";
  // Heads of group 0 read KV head 0, which holds the NaN key.
  const std::vector<Half> head0(r.output.begin(), r.output.begin() + shape_.head_dim);
  EXPECT_TRUE(AnyNonFinite(head0));

  DecodeAndCheck(2, 0, &clean, "unpoisoned sequence");
}

// ---- min_batch_size -------------------------------------------------------------------------

TEST_P(RuntimeWiringTest, MinBatchSizeDispatchesWithoutWaitingForTheWindow) {
  options_.max_batch_size = 8;
  options_.buckets = {1, 2, 4, 8};
  options_.min_batch_size = 4;  // preferred sizes {4, 8}
  options_.max_queue_delay = kLongWindow;
  Start();
  std::vector<DenseKv> mirrors(4);
  std::vector<Step> steps;
  std::vector<ResultFuture> results;
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(rt_->CreateSequence(100 + i).ok());
    PrefillRandom(100 + i, 1, 3, &mirrors[i]);
  }
  for (int i = 0; i < 3; ++i) {
    steps.push_back(NewStep());
    auto sub = rt_->Submit(Request(100 + i, 1, steps.back()));
    ASSERT_TRUE(sub.ok()) << sub.status().ToString();
    mirrors[i].Append(steps.back().k, steps.back().v);
    results.push_back(std::move(sub->result));
  }
  // Three of four wait for the window.
  EXPECT_FALSE(IsReady(results[0], kStillQueuedProbe)) << "dispatched below min_batch_size";
  for (auto& f : results) EXPECT_FALSE(IsReady(f));

  // The fourth fills min_batch_size: all four dispatch at once.
  const auto start = std::chrono::steady_clock::now();
  steps.push_back(NewStep());
  auto sub = rt_->Submit(Request(103, 1, steps.back()));
  ASSERT_TRUE(sub.ok()) << sub.status().ToString();
  mirrors[3].Append(steps.back().k, steps.back().v);
  results.push_back(std::move(sub->result));
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(IsReady(results[i], kWellBeforeWindow)) << "request " << i << " waited";
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, kWellBeforeWindow);
  for (int i = 0; i < 4; ++i) {
    DecodeResult r = results[i].get();
    ASSERT_TRUE(r.status.ok()) << r.status.ToString();
    auto err = testing::CompareToReference(r.output,
                                           testing::DenseDecode(shape_, mirrors[i], steps[i].q));
    EXPECT_LE(err.max_abs, kMaxAbs) << "request " << i;
    EXPECT_LE(err.rel_l2, kRelL2) << "request " << i;
  }
}

// RuntimeOptions::part_size reaches the scheduler (a part size the executor cannot take is
// refused naming it); with parts of 2, seven requests wait in parts for the long window, the
// eighth fills the bucket and all eight dispatch at once, each matching the reference. (Cancel
// and the window's rules with parts: the scheduler's tests, on a manual clock.)
TEST_P(RuntimeWiringTest, BatchesInPartsDispatchWholeAndMatchTheReference) {
  options_.max_batch_size = 8;
  options_.buckets = {1, 2, 4, 8};
  options_.part_size = 9;  // past max_batch_size
  EXPECT_EQ(Runtime::Create(options_).status().code(), StatusCode::kInvalidArgument);
  options_.part_size = 2;
  options_.max_queue_delay = kLongWindow;
  Start();
  std::vector<DenseKv> mirrors(8);
  std::vector<Step> steps;
  std::vector<Submission> subs;
  for (int i = 0; i < 8; ++i) {
    ASSERT_TRUE(rt_->CreateSequence(200 + i).ok());
    PrefillRandom(200 + i, 1, 5 + i, &mirrors[i]);
  }
  for (int i = 0; i < 7; ++i) {
    steps.push_back(NewStep());
    auto sub = rt_->Submit(Request(200 + i, 1, steps.back()));
    ASSERT_TRUE(sub.ok()) << sub.status().ToString();
    mirrors[i].Append(steps.back().k, steps.back().v);
    subs.push_back(std::move(*sub));
  }
  EXPECT_FALSE(IsReady(subs[0].result, kStillQueuedProbe)) << "dispatched before the bucket filled";
  steps.push_back(NewStep());
  auto sub = rt_->Submit(Request(207, 1, steps.back()));
  ASSERT_TRUE(sub.ok()) << sub.status().ToString();
  mirrors[7].Append(steps.back().k, steps.back().v);
  subs.push_back(std::move(*sub));
  for (int i = 0; i < 8; ++i) {
    ASSERT_TRUE(IsReady(subs[i].result, kWellBeforeWindow)) << "request " << i << " waited";
    DecodeResult r = subs[i].result.get();
    ASSERT_TRUE(r.status.ok()) << "request " << i << ": " << r.status.ToString();
    auto err = testing::CompareToReference(r.output,
                                           testing::DenseDecode(shape_, mirrors[i], steps[i].q));
    EXPECT_LE(err.max_abs, kMaxAbs) << "request " << i;
    EXPECT_LE(err.rel_l2, kRelL2) << "request " << i;
  }
}

// ---- argument and lifecycle errors ----------------------------------------------------------

TEST_P(RuntimeWiringTest, SubmitRejectsEmptyDoneCallback) {
  Start();
  ASSERT_TRUE(rt_->CreateSequence(1).ok());
  Step s = NewStep();
  auto h = rt_->Submit(Request(1, 0, s), DoneCallback{});
  ASSERT_FALSE(h.ok());
  EXPECT_EQ(h.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(h.status().message(), "done")) << h.status().ToString();
  rt_->Drain();
  EXPECT_EQ(Length(1, 0), 0);  // not enqueued
}

TEST_P(RuntimeWiringTest, SequenceLengthRejectsLayerOutOfRangeNamingIt) {
  Start();
  ASSERT_TRUE(rt_->CreateSequence(1).ok());
  for (int layer : {-1, 2}) {
    auto len = rt_->SequenceLength(1, layer);
    ASSERT_FALSE(len.ok()) << "layer " << layer;
    EXPECT_EQ(len.status().code(), StatusCode::kInvalidArgument);
    EXPECT_TRUE(Contains(len.status().message(), "layer " + std::to_string(layer)))
        << len.status().ToString();
  }
}

TEST_P(RuntimeWiringTest, CallsAfterShutdownAreUnavailable) {
  HoldingWindow();
  Start();
  ASSERT_TRUE(rt_->CreateSequence(1).ok());
  ASSERT_TRUE(rt_->CreateSequence(2).ok());
  PrefillRandom(1, 0, 4, nullptr);
  Step held = NewStep();
  auto queued = rt_->Submit(Request(1, 0, held));
  ASSERT_TRUE(queued.ok()) << queued.status().ToString();
  const KvCacheUsage usage = rt_->kv_cache_usage();

  rt_->Shutdown();
  ASSERT_TRUE(IsReady(queued->result)) << "Shutdown returned with a request still queued";
  DecodeResult r = queued->result.get();
  EXPECT_EQ(r.status.code(), StatusCode::kUnavailable) << r.status.ToString();

  auto expect_unavailable = [](const Status& s, const std::string& call) {
    EXPECT_EQ(s.code(), StatusCode::kUnavailable) << call << ": " << s.ToString();
  };
  Step s = NewStep();
  expect_unavailable(rt_->CreateSequence(3), "CreateSequence");
  expect_unavailable(rt_->ForkSequence(1, 4), "ForkSequence");
  expect_unavailable(rt_->FreeSequence(2), "FreeSequence");
  expect_unavailable(rt_->Prefill(2, 0, 1, s.k, s.v), "Prefill");
  expect_unavailable(rt_->SequenceLength(1, 0).status(), "SequenceLength");
  expect_unavailable(rt_->Submit(Request(2, 0, s)).status(), "Submit");
  expect_unavailable(rt_->Submit(Request(2, 0, s), [](DecodeResult) {}).status(),
                     "Submit (callback)");
  // Still readable, and nothing was freed or created by the refused calls.
  EXPECT_EQ(rt_->kv_cache_usage().blocks_in_use, usage.blocks_in_use);
  EXPECT_EQ(rt_->kv_cache_usage().sequences, 2);
  EXPECT_TRUE(Contains(rt_->MetricsText(), "attnrt_sequences 2\n"));
  rt_->Shutdown();  // a second Shutdown returns
}

INSTANTIATE_TEST_SUITE_P(Devices, RuntimeWiringTest, testing::kBothDevices, testing::DeviceName);

}  // namespace
}  // namespace attnrt
