// Scheduler behaviour against a FakeExecutor with a ManualClock (window, priority, deadlines,
// cancellation, queue policy, ordering, pipelining, completion, shutdown, metrics), and the
// exactly-once property under concurrency with the steady clock.
#include "scheduler/scheduler.h"

#include <gtest/gtest.h>

#include <atomic>
#include <deque>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <stdexcept>
#include <thread>

#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include "api/internal/finite.h"
#include "api/internal/log.h"
#include "tests/support/fake_executor.h"
#include "tests/support/moodycamel_tsan.h"

namespace attnrt::scheduler {
namespace {

using attnrt::testing::FakeExecutor;
using attnrt::testing::FakeExecutorOptions;
using attnrt::testing::ReadTag;
using attnrt::testing::RecordedBatch;
using attnrt::testing::WriteTag;
using std::chrono::microseconds;

// Owns one request's q/k/v; q[0..3] carry a tag, the rest a pattern derived from it.
struct RequestData {
  RequestData(const ModelShape& shape, std::uint64_t tag)
      : q(static_cast<std::size_t>(shape.num_q_heads) * shape.head_dim),
        k(static_cast<std::size_t>(shape.num_kv_heads) * shape.head_dim),
        v(k.size()) {
    for (std::size_t i = 0; i < q.size(); ++i) q[i] = FloatToHalf(0.25f * ((i + tag) % 17));
    for (std::size_t i = 0; i < k.size(); ++i) {
      k[i] = FloatToHalf(-0.5f * ((i + tag) % 5));
      v[i] = FloatToHalf(0.125f * ((i * 3 + tag) % 7));
    }
    WriteTag(q.data(), tag);
  }
  std::vector<Half> q, k, v;
};

std::vector<std::uint16_t> Bits(const std::vector<Half>& h) {
  std::vector<std::uint16_t> out(h.size());
  for (std::size_t i = 0; i < h.size(); ++i) out[i] = h[i].bits;
  return out;
}

class SchedulerTest : public ::testing::Test {
 protected:
  void Make(SchedulerOptions options, FakeExecutorOptions executor_options = {}) {
    scheduler_.reset();  // before the executor it uses
    executor_ = std::make_unique<FakeExecutor>(std::move(executor_options));
    ASSERT_TRUE(executor_->CreateSequences(64).ok());
    auto created = Scheduler::Create(options, executor_.get(), &clock_);
    ASSERT_TRUE(created.ok()) << created.status().ToString();
    scheduler_ = std::move(created).value();
  }

  const ModelShape& shape() const { return executor_->shape(); }

  DecodeRequest Request(std::uint64_t tag, runtime::SequenceId seq, int layer = 0,
                        int priority = 0) {
    data_.emplace_back(shape(), tag);
    DecodeRequest r;
    r.sequence_id = seq;
    r.layer = layer;
    r.priority = priority;
    r.q = data_.back().q;
    r.k = data_.back().k;
    r.v = data_.back().v;
    return r;
  }

  ResultFuture SubmitOk(const DecodeRequest& r) {
    auto s = scheduler_->Submit(r);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return s.ok() ? std::move(s->result) : ResultFuture();
  }

  // Tags of every recorded batch, in order.
  std::vector<std::vector<std::uint64_t>> BatchTags() const {
    std::vector<std::vector<std::uint64_t>> out;
    for (const RecordedBatch& b : executor_->batches()) {
      out.emplace_back();
      for (const auto& r : b.requests) out.back().push_back(r.tag);
    }
    return out;
  }

  static bool Ready(ResultFuture& f) {
    return f.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
  }
  // Waits for a result the test expects to come (bounded so that a bug fails, never hangs).
  static DecodeResult Get(ResultFuture& f) {
    EXPECT_EQ(f.wait_for(std::chrono::seconds(20)), std::future_status::ready);
    return f.get();
  }

  // Submits one request without destinations (result in DecodeResult, with LSE) and one with
  // them, lets them run, and checks both results.
  void RunRoutingCase();

  ManualClock clock_;
  std::deque<RequestData> data_;
  std::unique_ptr<FakeExecutor> executor_;
  std::unique_ptr<Scheduler> scheduler_;  // destroyed first
};

// The fake executor's payloads are tags, not numbers (some tag bits read as NaN), so these
// tests switch the finite check off; the check has its own tests.
SchedulerOptions WindowOptions(int max_batch, microseconds delay) {
  SchedulerOptions o;
  o.max_batch_size = max_batch;
  o.max_queue_delay = delay;
  o.check_finite = false;
  return o;
}

FakeExecutorOptions Buckets(std::vector<int> buckets, int max_in_flight = 2) {
  FakeExecutorOptions o;
  o.buckets = std::move(buckets);
  o.max_in_flight = max_in_flight;
  return o;
}

// ---- options and intake validation ------------------------------------------------------------

TEST(SchedulerCreateTest, RejectsBadOptionsNamingTheField) {
  FakeExecutor executor(Buckets({1, 2, 4, 8, 16, 32, 64, 128}));
  struct Case {
    const char* field;
    std::function<void(SchedulerOptions&)> mutate;
  };
  const std::vector<Case> cases = {
      {"max_batch_size", [](SchedulerOptions& o) { o.max_batch_size = 0; }},
      {"max_batch_size", [](SchedulerOptions& o) { o.max_batch_size = 129; }},
      {"min_batch_size", [](SchedulerOptions& o) { o.min_batch_size = o.max_batch_size + 1; }},
      {"min_batch_size", [](SchedulerOptions& o) { o.min_batch_size = -1; }},
      {"max_queue_delay", [](SchedulerOptions& o) { o.max_queue_delay = microseconds(-1); }},
      {"max_queue_size", [](SchedulerOptions& o) { o.max_queue_size = 0; }},
      {"default_timeout", [](SchedulerOptions& o) { o.default_timeout = microseconds(-5); }},
      {"default_timeout",  // past a year: deadlines would overflow the clock's nanoseconds
       [](SchedulerOptions& o) { o.default_timeout = std::chrono::hours(24 * 366); }},
      {"num_priority_levels", [](SchedulerOptions& o) { o.num_priority_levels = 0; }},
      {"num_priority_levels", [](SchedulerOptions& o) { o.num_priority_levels = 17; }},
      {"completion_threads", [](SchedulerOptions& o) { o.completion_threads = 0; }},
      {"batcher_spin", [](SchedulerOptions& o) { o.batcher_spin = microseconds(-2); }},
      {"result_spin", [](SchedulerOptions& o) { o.result_spin = microseconds(-2); }},
      {"pass_trace", [](SchedulerOptions& o) { o.pass_trace = -1; }},
      {"pass_trace", [](SchedulerOptions& o) { o.pass_trace = kMaxPassTrace + 1; }},
  };
  for (const Case& c : cases) {
    SchedulerOptions o;
    c.mutate(o);
    auto s = Scheduler::Create(o, &executor);
    ASSERT_FALSE(s.ok()) << c.field;
    EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.status().message().find(c.field), std::string::npos) << s.status().ToString();
  }
  EXPECT_FALSE(Scheduler::Create(SchedulerOptions{}, nullptr).ok());
  EXPECT_TRUE(Scheduler::Create(SchedulerOptions{}, &executor).ok());
}

// The process's threads named `name` (Linux: /proc/self/task/*/comm); -1 elsewhere.
int ThreadsNamed(const std::string& name) {
#if defined(__linux__)
  int n = 0;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream comm(task.path() / "comm");
    std::string line;
    if (std::getline(comm, line) && line == name) ++n;
  }
  return n;
#else
  (void)name;
  return -1;
#endif
}

// Each completion thread carries the name "attnrt-deliver" while the scheduler lives.
TEST(SchedulerThreadsTest, CompletionThreadsAreNamed) {
  if (ThreadsNamed("attnrt-deliver") < 0) GTEST_SKIP() << "thread names are read on Linux only";
  FakeExecutor executor;
  const int before = ThreadsNamed("attnrt-deliver");
  SchedulerOptions o;
  o.completion_threads = 3;
  {
    auto s = Scheduler::Create(o, &executor);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    EXPECT_EQ(ThreadsNamed("attnrt-deliver") - before, 3);
  }
  EXPECT_EQ(ThreadsNamed("attnrt-deliver"), before);
}

TEST_F(SchedulerTest, MalformedRequestsAreRejectedNamingTheFieldAndNothingIsEnqueued) {
  SchedulerOptions o = WindowOptions(8, microseconds(0));
  o.default_timeout = microseconds(1000);
  o.check_finite = true;
  Make(o);
  struct Case {
    const char* expect;
    StatusCode code;
    RejectReason reason;
    std::function<void(DecodeRequest&)> mutate;
  };
  std::vector<Half> short_buffer(7);
  const std::vector<Case> cases = {
      {"q has 7 elements, expected H*D = 256", StatusCode::kInvalidArgument,
       RejectReason::kInvalidArgument, [&](DecodeRequest& r) { r.q = short_buffer; }},
      {"k has 7 elements, expected Hkv*D = 128", StatusCode::kInvalidArgument,
       RejectReason::kInvalidArgument, [&](DecodeRequest& r) { r.k = short_buffer; }},
      {"v has 7 elements", StatusCode::kInvalidArgument, RejectReason::kInvalidArgument,
       [&](DecodeRequest& r) { r.v = short_buffer; }},
      {"layer 4 out of range [0, 4)", StatusCode::kInvalidArgument,
       RejectReason::kInvalidArgument, [](DecodeRequest& r) { r.layer = 4; }},
      {"layer -1", StatusCode::kInvalidArgument, RejectReason::kInvalidArgument,
       [](DecodeRequest& r) { r.layer = -1; }},
      {"priority 2 out of range [0, 2)", StatusCode::kInvalidArgument,
       RejectReason::kInvalidArgument, [](DecodeRequest& r) { r.priority = 2; }},
      {"timeout 2000us exceeds default_timeout 1000us", StatusCode::kInvalidArgument,
       RejectReason::kInvalidArgument, [](DecodeRequest& r) { r.timeout = microseconds(2000); }},
      {"timeout 0us must be > 0", StatusCode::kInvalidArgument, RejectReason::kInvalidArgument,
       [](DecodeRequest& r) { r.timeout = microseconds(0); }},
      {"sequence_id 999 is unknown", StatusCode::kNotFound, RejectReason::kUnknownSequence,
       [](DecodeRequest& r) { r.sequence_id = 999; }},
  };
  int rejected = 0;
  for (const Case& c : cases) {
    DecodeRequest r = Request(1, 3);
    c.mutate(r);
    auto s = scheduler_->Submit(r);
    ASSERT_FALSE(s.ok()) << c.expect;
    EXPECT_EQ(s.status().code(), c.code) << s.status().ToString();
    EXPECT_NE(s.status().message().find(c.expect), std::string::npos) << s.status().ToString();
    ++rejected;
  }
  // Non-finite values, one per tensor.
  for (const char* field : {"q", "k", "v"}) {
    DecodeRequest r = Request(2, 3);
    RequestData& d = data_.back();
    std::vector<Half>& t = field[0] == 'q' ? d.q : field[0] == 'k' ? d.k : d.v;
    t[5] = FloatToHalf(std::numeric_limits<float>::quiet_NaN());
    if (field[0] == 'v') t[5] = FloatToHalf(std::numeric_limits<float>::infinity());
    auto s = scheduler_->Submit(r);
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.status().message().find(std::string(field) + " holds a non-finite value at element 5"),
              std::string::npos)
        << s.status().ToString();
  }
  scheduler_->SyncForTesting();
  MetricsSnapshot m = scheduler_->Metrics();
  EXPECT_EQ(m.submitted, 0u);
  EXPECT_EQ(m.pending, 0);
  EXPECT_EQ(m.rejected[static_cast<int>(RejectReason::kInvalidArgument)], 8u);
  EXPECT_EQ(m.rejected[static_cast<int>(RejectReason::kUnknownSequence)], 1u);
  EXPECT_EQ(m.rejected[static_cast<int>(RejectReason::kNonFinite)], 3u);
  EXPECT_EQ(executor_->submitted_batches(), 0);
  // A good request still goes through.
  auto f = SubmitOk(Request(3, 3));
  EXPECT_TRUE(Get(f).status.ok());
}

TEST(SchedulerDefaultsTest, FiniteCheckIsOnByDefault) {
  EXPECT_TRUE(SchedulerOptions{}.check_finite);
}

// batcher_spin's default polls only where a core is left for the threads it waits for.
TEST(SchedulerDefaultsTest, BatcherSpinAutoPollsOnlyWithFourOrMoreHardwareThreads) {
  const microseconds automatic = SchedulerOptions{}.batcher_spin;
  EXPECT_EQ(automatic, microseconds(-1));
  EXPECT_EQ(ResolveBatcherSpin(automatic, 2), microseconds(0));
  EXPECT_EQ(ResolveBatcherSpin(automatic, 3), microseconds(0));
  EXPECT_EQ(ResolveBatcherSpin(automatic, 4), microseconds(100));
  EXPECT_EQ(ResolveBatcherSpin(automatic, 16), microseconds(100));
  EXPECT_EQ(ResolveBatcherSpin(automatic, 0), microseconds(0));  // count unknown: no poll
  // An explicit value is kept whatever the machine.
  EXPECT_EQ(ResolveBatcherSpin(microseconds(50), 2), microseconds(50));
  EXPECT_EQ(ResolveBatcherSpin(microseconds(0), 16), microseconds(0));
}

// result_spin's default: a long poll where cores are left for it, one long poller per four
// hardware threads.
TEST(SchedulerDefaultsTest, ResultSpinAutoPollsLongOnlyWithFourOrMoreHardwareThreads) {
  const microseconds automatic = SchedulerOptions{}.result_spin;
  EXPECT_EQ(automatic, microseconds(-1));
  EXPECT_EQ(ResolveResultSpin(automatic, 2).spin, microseconds(4));
  EXPECT_EQ(ResolveResultSpin(automatic, 2).max_spinners, 1);
  EXPECT_EQ(ResolveResultSpin(automatic, 4).spin, microseconds(200));
  EXPECT_EQ(ResolveResultSpin(automatic, 16).spin, microseconds(200));
  EXPECT_EQ(ResolveResultSpin(automatic, 16).max_spinners, 4);
  EXPECT_EQ(ResolveResultSpin(automatic, 0).spin, microseconds(4));  // count unknown
  EXPECT_EQ(ResolveResultSpin(automatic, 0).max_spinners, 1);
  // An explicit value is kept whatever the machine; the spinner count still follows it.
  EXPECT_EQ(ResolveResultSpin(microseconds(50), 2).spin, microseconds(50));
  EXPECT_EQ(ResolveResultSpin(microseconds(0), 16).spin, microseconds(0));
  EXPECT_EQ(ResolveResultSpin(microseconds(0), 16).max_spinners, 4);
}

TEST_F(SchedulerTest, NonFiniteValuesPassWhenTheCheckIsOff) {
  Make(WindowOptions(8, microseconds(0)));
  DecodeRequest r = Request(1, 1);
  data_.back().k[0] = FloatToHalf(std::numeric_limits<float>::infinity());
  auto f = SubmitOk(r);
  EXPECT_TRUE(Get(f).status.ok());
}

// A request of H=32 Hkv=32 D=128 (24 KB of q/k/v) is copied with streaming stores and checked
// in the same pass: an Inf/NaN anywhere in any tensor is refused naming it (nothing enqueued,
// nothing left pending), and good requests still carry their q bit for bit (the fake executor
// returns q as the output).
TEST_F(SchedulerTest, LargeRequestsAreCheckedAndCopiedInOnePass) {
  FakeExecutorOptions eo;
  eo.shape.num_q_heads = 32;
  eo.shape.num_kv_heads = 32;
  eo.shape.head_dim = 128;
  SchedulerOptions o = WindowOptions(8, microseconds(1000));
  o.check_finite = true;
  Make(o, eo);
  ASSERT_GE((shape().num_q_heads + 2 * shape().num_kv_heads) * shape().head_dim * sizeof(Half),
            kStreamingCopyMinBytes);
  const std::size_t q_elems = static_cast<std::size_t>(shape().num_q_heads) * shape().head_dim;
  const std::size_t kv_elems = static_cast<std::size_t>(shape().num_kv_heads) * shape().head_dim;
  struct Case {
    const char* tensor;
    std::size_t element;
  };
  for (const Case& c : {Case{"q", 4093}, Case{"q", q_elems - 1}, Case{"k", 8},
                        Case{"v", kv_elems - 1}}) {
    DecodeRequest r = Request(2, 3);
    RequestData& d = data_.back();
    std::vector<Half>& t = c.tensor[0] == 'q' ? d.q : c.tensor[0] == 'k' ? d.k : d.v;
    t[c.element] = Half{0x7c00};
    auto sub = scheduler_->Submit(r);
    ASSERT_FALSE(sub.ok()) << c.tensor << " " << c.element;
    EXPECT_NE(sub.status().message().find(std::string(c.tensor) +
                                          " holds a non-finite value at element " +
                                          std::to_string(c.element)),
              std::string::npos)
        << sub.status().ToString();
  }
  scheduler_->SyncForTesting();
  const MetricsSnapshot m = scheduler_->Metrics();
  EXPECT_EQ(m.submitted, 0u);
  EXPECT_EQ(m.pending, 0);
  EXPECT_EQ(m.rejected[static_cast<int>(RejectReason::kNonFinite)], 4u);
  // The answers keep Validate's order: a non-finite value before an unknown sequence, and both
  // before the scheduler's own state (RunRoutingCase drains it).
  auto nan_and_unknown = [&] {
    DecodeRequest r = Request(2, 999);
    data_.back().v[kv_elems - 1] = Half{0x7e00};
    return scheduler_->Submit(r);
  };
  auto both = nan_and_unknown();
  ASSERT_FALSE(both.ok());
  EXPECT_EQ(both.status().code(), StatusCode::kInvalidArgument) << both.status().ToString();
  RunRoutingCase();
  both = nan_and_unknown();
  ASSERT_FALSE(both.ok());
  EXPECT_EQ(both.status().code(), StatusCode::kInvalidArgument) << both.status().ToString();
  auto unknown = scheduler_->Submit(Request(3, 999));
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.status().code(), StatusCode::kNotFound) << unknown.status().ToString();
  auto drained = scheduler_->Submit(Request(4, 3));
  ASSERT_FALSE(drained.ok());
  EXPECT_EQ(drained.status().code(), StatusCode::kUnavailable) << drained.status().ToString();
}

TEST_F(SchedulerTest, InputsAreCopiedAtSubmitAndOutputsRouted) {
  Make(WindowOptions(8, microseconds(1000)));
  RunRoutingCase();
  for (const RecordedBatch& b : executor_->batches()) {
    for (const auto& r : b.requests) EXPECT_EQ(r.memory, runtime::MemoryKind::kHost);
  }
}

// With an executor that offers staging memory, requests are staged in it and submitted as
// kDevice (the device reads and writes them in place); results still reach every destination,
// and the staging goes back to the executor when the scheduler goes.
TEST_F(SchedulerTest, ExecutorStagingMemoryIsUsedInPlace) {
  FakeExecutorOptions eo;
  eo.offer_staging_memory = true;
  Make(WindowOptions(8, microseconds(1000)), eo);
  RunRoutingCase();
  EXPECT_GT(executor_->fake_staging().allocations(), 0);
  int requests = 0;
  for (const RecordedBatch& b : executor_->batches()) {
    for (const auto& r : b.requests) {
      EXPECT_EQ(r.memory, runtime::MemoryKind::kDevice);
      EXPECT_TRUE(r.in_staging) << "q/k/v/out outside the executor's staging memory";
      ++requests;
    }
  }
  EXPECT_EQ(requests, 2);
  scheduler_.reset();
  EXPECT_EQ(executor_->fake_staging().live(), 0u) << "staging not returned to the executor";
}

// mapped_staging_bytes: the staging allocated up front is the working set's records at 0, the
// budget's otherwise (in slabs), capped by what the queue can hold; auto (-1, the default) is the
// queue's and the working set's records; a value below -1 is refused naming the field.
TEST_F(SchedulerTest, MappedStagingBytesSizeTheStagedRecords) {
  FakeExecutorOptions eo;
  eo.offer_staging_memory = true;
  constexpr std::size_t kStride = 1600;  // H4 Hkv2 D64: q, out 512 B; k, v 256 B; lse 16 -> 64
  constexpr std::size_t kSlab = 256 * kStride;
  const std::size_t working_set = (2 + 2) * 8 + 512;  // max_in_flight 2, max_batch 8, caches
  auto staged_bytes = [&](std::int64_t budget, int max_queue_size) {
    SchedulerOptions o = WindowOptions(8, microseconds(0));
    o.mapped_staging_bytes = budget;
    o.max_queue_size = max_queue_size;
    Make(o, eo);
    const std::size_t bytes = executor_->fake_staging().allocated_bytes();
    scheduler_.reset();
    return bytes;
  };
  const std::size_t at_zero = staged_bytes(0, 65536);
  EXPECT_GE(at_zero, working_set * kStride);
  EXPECT_LT(at_zero, working_set * kStride + kSlab);
  const std::size_t budget = 4 << 20;
  const std::size_t at_budget = staged_bytes(budget, 65536);
  EXPECT_GE(at_budget, budget - kStride);
  EXPECT_LT(at_budget, budget + kSlab);
  const std::size_t capped = staged_bytes(budget, 100);  // the queue holds 100: no more staged
  EXPECT_GE(capped, (working_set + 100) * kStride);
  EXPECT_LT(capped, (working_set + 100) * kStride + kSlab);
  EXPECT_EQ(SchedulerOptions{}.mapped_staging_bytes, defaults::kMappedStagingAuto);
  const std::size_t automatic = staged_bytes(defaults::kMappedStagingAuto, 3000);
  EXPECT_GE(automatic, (working_set + 3000) * kStride);
  EXPECT_LT(automatic, (working_set + 3000) * kStride + kSlab);
  // Auto stops at kMappedStagingAutoMaxBytes: a queue of a million holds no more.
  const std::size_t most = staged_bytes(defaults::kMappedStagingAuto, 1 << 20);
  EXPECT_GE(most, static_cast<std::size_t>(defaults::kMappedStagingAutoMaxBytes) - kStride);
  EXPECT_LT(most, static_cast<std::size_t>(defaults::kMappedStagingAutoMaxBytes) + kSlab);

  executor_ = std::make_unique<FakeExecutor>(eo);
  SchedulerOptions bad = WindowOptions(8, microseconds(0));
  bad.mapped_staging_bytes = -2;
  auto refused = Scheduler::Create(bad, executor_.get(), &clock_);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("mapped_staging_bytes"), std::string::npos)
      << refused.status().ToString();
}

// A backlog past the working set stays in the staging within mapped_staging_bytes (every request
// reaches the executor as kDevice); with the working set only, part of it goes on the heap (kHost).
TEST_F(SchedulerTest, BacklogWithinMappedStagingBytesStaysStaged) {
  FakeExecutorOptions eo;
  eo.offer_staging_memory = true;
  constexpr int kBacklog = 1200;  // past the working set's 544 records
  for (const std::int64_t budget : {std::int64_t{4} << 20, std::int64_t{0}}) {
    SchedulerOptions o = WindowOptions(8, microseconds(0));
    o.mapped_staging_bytes = budget;
    Make(o, eo);
    executor_->Pause();
    std::vector<ResultFuture> futures;
    for (int i = 0; i < kBacklog; ++i) {
      futures.push_back(SubmitOk(Request(static_cast<std::uint64_t>(i), i % 64, (i / 64) % 4)));
    }
    executor_->Resume();
    for (ResultFuture& f : futures) {
      DecodeResult r = Get(f);
      ASSERT_TRUE(r.status.ok()) << r.status.ToString();
    }
    int device = 0, host = 0;
    for (const RecordedBatch& b : executor_->batches()) {
      for (const auto& r : b.requests) (r.memory == runtime::MemoryKind::kDevice ? device : host)++;
    }
    EXPECT_EQ(device + host, kBacklog);
    if (budget > 0) {
      EXPECT_EQ(host, 0) << "a backlog within mapped_staging_bytes went on the heap";
    } else {
      EXPECT_GT(host, 0) << "a backlog past the working set stayed staged with no budget";
    }
    scheduler_.reset();
  }
}

// TensorMemory::kDevice: the caller's buffers go to the executor as they are (nothing copied,
// nothing scanned on the host, the output written in place, none returned).
TEST_F(SchedulerTest, DeviceMemoryRequestsAreReadAndWrittenInPlace) {
  FakeExecutorOptions eo;
  eo.accept_device_memory = true;
  SchedulerOptions o = WindowOptions(8, microseconds(0));
  o.check_finite = true;  // does not apply: the runtime never reads device memory on the host
  Make(o, eo);
  DecodeRequest r = Request(21, 1);
  data_.back().k[5] = FloatToHalf(std::numeric_limits<float>::quiet_NaN());
  std::vector<Half> out(data_.back().q.size(), Half{0xffff});
  r.out = out.data();
  r.memory = TensorMemory::kDevice;
  auto f = SubmitOk(r);
  DecodeResult res = Get(f);
  ASSERT_TRUE(res.status.ok()) << res.status.ToString();
  EXPECT_TRUE(res.output.empty()) << "a device request's output is written in place only";
  EXPECT_EQ(Bits(out), Bits(data_.back().q)) << "the fake executor writes out = q in place";
  ASSERT_EQ(executor_->batches().size(), 1u);
  EXPECT_EQ(executor_->batches()[0].requests[0].memory, runtime::MemoryKind::kDevice);
  EXPECT_EQ(executor_->batches()[0].requests[0].tag, 21u);
}

TEST_F(SchedulerTest, DeviceMemoryRequestsAreValidatedNamingTheField) {
  Make(WindowOptions(8, microseconds(0)));  // the fake takes host memory only by default
  std::vector<Half> out(shape().num_q_heads * shape().head_dim);
  DecodeRequest r = Request(22, 1);
  r.out = out.data();
  r.memory = TensorMemory::kDevice;
  auto refused = scheduler_->Submit(r);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("host memory only"), std::string::npos)
      << refused.status().ToString();

  FakeExecutorOptions eo;
  eo.accept_device_memory = true;
  scheduler_.reset();
  Make(WindowOptions(8, microseconds(0)), eo);
  DecodeRequest no_out = Request(23, 1);
  no_out.memory = TensorMemory::kDevice;
  auto s1 = scheduler_->Submit(no_out);
  ASSERT_FALSE(s1.ok());
  EXPECT_NE(s1.status().message().find("out is required"), std::string::npos)
      << s1.status().ToString();
  DecodeRequest no_lse = Request(24, 1);
  no_lse.memory = TensorMemory::kDevice;
  no_lse.out = out.data();
  no_lse.want_lse = true;
  auto s2 = scheduler_->Submit(no_lse);
  ASSERT_FALSE(s2.ok());
  EXPECT_NE(s2.status().message().find("want_lse needs an lse"), std::string::npos)
      << s2.status().ToString();
  DecodeRequest bad = Request(25, 1);
  bad.memory = static_cast<TensorMemory>(7);
  auto s3 = scheduler_->Submit(bad);
  ASSERT_FALSE(s3.ok());
  EXPECT_NE(s3.status().message().find("neither kHost nor kDevice"), std::string::npos)
      << s3.status().ToString();
  scheduler_->SyncForTesting();
  EXPECT_TRUE(executor_->batches().empty()) << "a refused request reached the executor";
}

void SchedulerTest::RunRoutingCase() {
  // Result in DecodeResult (no destination), with LSE.
  DecodeRequest a = Request(11, 1, 2);
  a.want_lse = true;
  const std::vector<std::uint16_t> a_q = Bits(data_.back().q);
  auto fa = SubmitOk(a);
  std::fill(data_.back().q.begin(), data_.back().q.end(), Half{0x7e00});  // caller reuses buffers
  // Result written to caller-given destinations.
  DecodeRequest b = Request(12, 2, 3);
  std::vector<Half> out(data_.back().q.size(), Half{0xffff});
  std::vector<float> lse(shape().num_q_heads, -1.0f);
  b.out = out.data();
  b.lse = lse.data();
  const std::vector<std::uint16_t> b_q = Bits(data_.back().q);
  auto fb = SubmitOk(b);
  scheduler_->Drain();

  DecodeResult ra = Get(fa);
  ASSERT_TRUE(ra.status.ok()) << ra.status.ToString();
  EXPECT_EQ(Bits(ra.output), a_q);
  ASSERT_EQ(ra.lse.size(), static_cast<std::size_t>(shape().num_q_heads));
  for (int h = 0; h < shape().num_q_heads; ++h) EXPECT_EQ(ra.lse[h], 2 * 1000 + h);

  DecodeResult rb = Get(fb);
  ASSERT_TRUE(rb.status.ok());
  EXPECT_TRUE(rb.output.empty());
  EXPECT_TRUE(rb.lse.empty());
  EXPECT_EQ(Bits(out), b_q);
  for (int h = 0; h < shape().num_q_heads; ++h) EXPECT_EQ(lse[h], 3 * 1000 + h);
}

// ---- batching window --------------------------------------------------------------------------

TEST_F(SchedulerTest, FullBucketDispatchesImmediately) {
  Make(WindowOptions(8, microseconds(100)), Buckets({1, 2, 4, 8}));
  std::vector<ResultFuture> f;
  for (int i = 0; i < 8; ++i) f.push_back(SubmitOk(Request(i, i)));
  scheduler_->SyncForTesting();
  ASSERT_EQ(BatchTags(), (std::vector<std::vector<std::uint64_t>>{{0, 1, 2, 3, 4, 5, 6, 7}}));
  for (auto& x : f) EXPECT_TRUE(Get(x).status.ok());
  EXPECT_EQ(clock_.Now(), 0);  // no time passed
}

TEST_F(SchedulerTest, PartialBatchWaitsForTheDelayThenGoesWhole) {
  Make(WindowOptions(8, microseconds(100)), Buckets({1, 2, 4, 8}));
  std::vector<ResultFuture> f;
  for (int i = 0; i < 3; ++i) f.push_back(SubmitOk(Request(i, i)));
  scheduler_->SyncForTesting();
  EXPECT_EQ(executor_->submitted_batches(), 0);
  clock_.Advance(microseconds(60));
  f.push_back(SubmitOk(Request(3, 3)));  // joins the waiting batch
  scheduler_->SyncForTesting();
  clock_.Advance(microseconds(39));
  scheduler_->SyncForTesting();
  EXPECT_EQ(executor_->submitted_batches(), 0);
  EXPECT_FALSE(Ready(f[0]));
  clock_.Advance(microseconds(1));  // the oldest has now waited exactly max_queue_delay
  scheduler_->SyncForTesting();
  ASSERT_EQ(BatchTags(), (std::vector<std::vector<std::uint64_t>>{{0, 1, 2, 3}}));
  for (auto& x : f) EXPECT_TRUE(Get(x).status.ok());
  // Queue delay recorded in clock time: 100 us for three requests, 40 us for the late one.
  const MetricsSnapshot m = scheduler_->Metrics();
  EXPECT_EQ(m.queue_delay_ns.count, 4u);
  EXPECT_EQ(m.queue_delay_ns.max, 100'000u);
  EXPECT_EQ(m.queue_delay_ns.sum, 3 * 100'000u + 40'000u);
  EXPECT_EQ(m.batch_size.max, 4u);
}

TEST_F(SchedulerTest, BeyondAFullBucketTheRestWaitsForItsOwnWindow) {
  Make(WindowOptions(8, microseconds(100)), Buckets({1, 2, 4, 8}));
  std::vector<ResultFuture> f;
  for (int i = 0; i < 10; ++i) f.push_back(SubmitOk(Request(i, i)));
  scheduler_->SyncForTesting();
  EXPECT_EQ(BatchTags().size(), 1u);
  EXPECT_EQ(BatchTags()[0].size(), 8u);
  for (int i = 0; i < 8; ++i) EXPECT_TRUE(Get(f[i]).status.ok());
  EXPECT_FALSE(Ready(f[8]));
  clock_.Advance(microseconds(100));
  scheduler_->SyncForTesting();
  ASSERT_EQ(BatchTags().size(), 2u);
  EXPECT_EQ(BatchTags()[1], (std::vector<std::uint64_t>{8, 9}));
  for (int i = 8; i < 10; ++i) EXPECT_TRUE(Get(f[i]).status.ok());
}

TEST_F(SchedulerTest, ZeroDelayDispatchesWhatIsThere) {
  Make(WindowOptions(8, microseconds(0)), Buckets({1, 2, 4, 8}));
  auto f = SubmitOk(Request(5, 5));
  scheduler_->SyncForTesting();
  EXPECT_EQ(BatchTags(), (std::vector<std::vector<std::uint64_t>>{{5}}));
  EXPECT_TRUE(Get(f).status.ok());
}

TEST_F(SchedulerTest, MinBatchSizeIsHonouredOnlyWithinTheDelay) {
  SchedulerOptions o = WindowOptions(8, microseconds(100));
  o.min_batch_size = 4;
  Make(o, Buckets({1, 2, 4, 8}));
  std::vector<ResultFuture> f;
  for (int i = 0; i < 3; ++i) f.push_back(SubmitOk(Request(i, i)));
  scheduler_->SyncForTesting();
  EXPECT_EQ(executor_->submitted_batches(), 0);  // 3 < min_batch_size
  f.push_back(SubmitOk(Request(3, 3)));
  scheduler_->SyncForTesting();
  EXPECT_EQ(BatchTags(), (std::vector<std::vector<std::uint64_t>>{{0, 1, 2, 3}}));  // preferred 4
  for (int i = 4; i < 6; ++i) f.push_back(SubmitOk(Request(i, i)));
  scheduler_->SyncForTesting();
  EXPECT_EQ(executor_->submitted_batches(), 1);  // 2 < min_batch_size: wait
  clock_.Advance(microseconds(100));
  scheduler_->SyncForTesting();
  ASSERT_EQ(BatchTags().size(), 2u);
  EXPECT_EQ(BatchTags()[1], (std::vector<std::uint64_t>{4, 5}));  // past the delay: goes anyway
  for (auto& x : f) EXPECT_TRUE(Get(x).status.ok());
}

// pass_trace: each pass of the batching thread, what it took, dispatched and left, and the wake-up
// it planned; the ring keeps the last pass_trace passes; none without the option.
TEST_F(SchedulerTest, PassTraceRecordsTheBatchingThreadsPasses) {
  SchedulerOptions o = WindowOptions(4, microseconds(100));
  o.pass_trace = 64;
  Make(o, Buckets({1, 2, 4}));
  std::vector<ResultFuture> f;
  for (int i = 0; i < 4; ++i) f.push_back(SubmitOk(Request(i, i)));  // a full bucket
  scheduler_->SyncForTesting();
  scheduler_->SyncForTesting();  // the pass that dispatched is recorded before the next one
  std::vector<BatcherPass> passes = scheduler_->RecentPasses();
  ASSERT_FALSE(passes.empty());
  int taken = 0, dispatched = 0, batches = 0;
  for (const BatcherPass& p : passes) {
    EXPECT_LE(p.begin_ns, p.end_ns);
    taken += p.taken;
    dispatched += p.dispatched;
    batches += p.batches;
  }
  EXPECT_EQ(taken, 4);
  EXPECT_EQ(dispatched, 4);
  EXPECT_EQ(batches, 1);
  for (auto& x : f) EXPECT_TRUE(Get(x).status.ok());

  // A lone request waits for its window: the pass that took it leaves it pending and plans to
  // wake by the window's end.
  const std::size_t before = scheduler_->RecentPasses().size();  // < 64: nothing dropped yet
  const std::int64_t submitted_at = clock_.Now();
  ResultFuture lone = SubmitOk(Request(9, 9));
  scheduler_->SyncForTesting();
  scheduler_->SyncForTesting();
  passes = scheduler_->RecentPasses();
  ASSERT_LT(passes.size(), 64u);
  auto it = std::find_if(passes.begin() + before, passes.end(),
                         [](const BatcherPass& p) { return p.taken == 1; });
  ASSERT_NE(it, passes.end());
  EXPECT_EQ(it->pending, 1);
  EXPECT_EQ(it->dispatched, 0);
  EXPECT_EQ(it->sleep_until_ns, submitted_at + 100'000);
  clock_.Advance(microseconds(100));
  EXPECT_TRUE(Get(lone).status.ok());

  for (int i = 0; i < 80; ++i) scheduler_->SyncForTesting();
  EXPECT_EQ(scheduler_->RecentPasses().size(), 64u);  // the last pass_trace passes only
}

TEST_F(SchedulerTest, NoPassTraceByDefault) {
  Make(WindowOptions(4, microseconds(0)), Buckets({1, 2, 4}));
  ResultFuture f = SubmitOk(Request(1, 1));
  EXPECT_TRUE(Get(f).status.ok());
  scheduler_->SyncForTesting();
  EXPECT_TRUE(scheduler_->RecentPasses().empty());
}

// ---- queue policy -----------------------------------------------------------------------------

TEST_F(SchedulerTest, StrictPriorityThenFifoWithinALevel) {
  SchedulerOptions o = WindowOptions(4, microseconds(0));
  o.num_priority_levels = 3;
  Make(o, Buckets({1, 2, 4}, /*max_in_flight=*/1));
  executor_->Pause();
  std::vector<ResultFuture> f;
  f.push_back(SubmitOk(Request(100, 0)));  // the only batch in flight (max_in_flight 1)
  executor_->WaitForSubmitted(1);
  f.push_back(SubmitOk(Request(1, 1, 0, /*priority=*/2)));
  f.push_back(SubmitOk(Request(2, 2, 0, 2)));
  f.push_back(SubmitOk(Request(3, 3, 0, 1)));
  f.push_back(SubmitOk(Request(4, 4, 0, 0)));
  f.push_back(SubmitOk(Request(5, 5, 0, 2)));
  f.push_back(SubmitOk(Request(6, 6, 0, 0)));
  scheduler_->SyncForTesting();
  EXPECT_EQ(scheduler_->Metrics().pending, 6);
  executor_->Resume();
  for (auto& x : f) EXPECT_TRUE(Get(x).status.ok());
  EXPECT_EQ(BatchTags(),
            (std::vector<std::vector<std::uint64_t>>{{100}, {4, 6, 3, 1}, {2, 5}}));
}

TEST_F(SchedulerTest, RequestsPastTheirDeadlineCompleteWithDeadlineExceeded) {
  SchedulerOptions o = WindowOptions(8, microseconds(10'000));
  o.default_timeout = microseconds(1000);
  Make(o);
  auto a = SubmitOk(Request(1, 1));
  DecodeRequest rb = Request(2, 2);
  rb.timeout = microseconds(200);
  auto b = SubmitOk(rb);
  scheduler_->SyncForTesting();
  clock_.Advance(microseconds(199));
  scheduler_->SyncForTesting();
  EXPECT_FALSE(Ready(b));
  clock_.Advance(microseconds(1));
  scheduler_->SyncForTesting();
  DecodeResult result_b = Get(b);
  EXPECT_EQ(result_b.status.code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(result_b.status.message().find("deadline of 200us"), std::string::npos)
      << result_b.status.ToString();
  EXPECT_FALSE(Ready(a));
  clock_.Advance(microseconds(800));
  scheduler_->SyncForTesting();
  EXPECT_EQ(Get(a).status.code(), StatusCode::kDeadlineExceeded);
  EXPECT_EQ(executor_->submitted_batches(), 0);
  const MetricsSnapshot m = scheduler_->Metrics();
  EXPECT_EQ(m.timed_out, 2u);
  EXPECT_EQ(m.pending, 0);
  EXPECT_EQ(m.latency_ns.count, 2u);
}

TEST_F(SchedulerTest, DeadlinesFireWhileMaxInFlightBatchesRun) {
  SchedulerOptions o = WindowOptions(1, microseconds(0));
  o.default_timeout = microseconds(500);
  Make(o, Buckets({1}, /*max_in_flight=*/1));
  executor_->Pause();
  auto running = SubmitOk(Request(1, 1));
  executor_->WaitForSubmitted(1);
  auto waiting = SubmitOk(Request(2, 2));
  scheduler_->SyncForTesting();
  clock_.Advance(microseconds(500));
  scheduler_->SyncForTesting();
  EXPECT_EQ(Get(waiting).status.code(), StatusCode::kDeadlineExceeded);
  executor_->Resume();
  // Dispatched before its deadline: runs to completion although the deadline has passed.
  EXPECT_TRUE(Get(running).status.ok());
}

TEST_F(SchedulerTest, CancelBeforeDispatchCompletesWithCancelled) {
  Make(WindowOptions(8, microseconds(10'000)));
  auto a = scheduler_->Submit(Request(1, 1));
  auto b = scheduler_->Submit(Request(2, 2));
  ASSERT_TRUE(a.ok() && b.ok());
  scheduler_->SyncForTesting();
  EXPECT_TRUE(scheduler_->Cancel(a->handle));
  DecodeResult ra = Get(a->result);
  EXPECT_EQ(ra.status.code(), StatusCode::kCancelled);
  EXPECT_FALSE(scheduler_->Cancel(a->handle));  // false once completed
  clock_.Advance(microseconds(10'000));
  scheduler_->SyncForTesting();
  EXPECT_TRUE(Get(b->result).status.ok());
  EXPECT_FALSE(scheduler_->Cancel(b->handle));  // completed
  EXPECT_FALSE(scheduler_->Cancel(RequestHandle()));
  EXPECT_EQ(BatchTags(), (std::vector<std::vector<std::uint64_t>>{{2}}));
  EXPECT_EQ(scheduler_->Metrics().cancelled, 1u);
}

TEST_F(SchedulerTest, CancelAfterDispatchReturnsFalseAndTheRequestCompletes) {
  Make(WindowOptions(1, microseconds(0)), Buckets({1}, 1));
  executor_->Pause();
  auto a = scheduler_->Submit(Request(1, 1));
  ASSERT_TRUE(a.ok());
  executor_->WaitForSubmitted(1);
  EXPECT_FALSE(scheduler_->Cancel(a->handle));
  executor_->Resume();
  EXPECT_TRUE(Get(a->result).status.ok());
}

TEST_F(SchedulerTest, CancelledHandleOfARecycledRecordDoesNotTouchTheNewRequest) {
  Make(WindowOptions(1, microseconds(0)), Buckets({1}, 1));
  auto a = scheduler_->Submit(Request(1, 1));
  ASSERT_TRUE(a.ok());
  EXPECT_TRUE(Get(a->result).status.ok());
  // Later requests may reuse a's request record; a's stale handle must not cancel them.
  executor_->Pause();
  std::vector<Submission> later;
  for (int i = 0; i < 40; ++i) {
    auto s = scheduler_->Submit(Request(10 + i, 2 + i % 30));
    ASSERT_TRUE(s.ok());
    later.push_back(std::move(s).value());
  }
  EXPECT_FALSE(scheduler_->Cancel(a->handle));
  executor_->Resume();
  for (auto& s : later) EXPECT_TRUE(Get(s.result).status.ok());
}

TEST_F(SchedulerTest, QueueFullIsRejectedAtSubmitWithResourceExhausted) {
  SchedulerOptions o = WindowOptions(8, microseconds(10'000));
  o.max_queue_size = 4;
  Make(o);
  std::vector<ResultFuture> f;
  for (int i = 0; i < 4; ++i) f.push_back(SubmitOk(Request(i, i)));
  auto full = scheduler_->Submit(Request(9, 9));
  ASSERT_FALSE(full.ok());
  EXPECT_EQ(full.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(full.status().message().find("max_queue_size = 4"), std::string::npos);
  clock_.Advance(microseconds(10'000));
  scheduler_->SyncForTesting();
  for (auto& x : f) EXPECT_TRUE(Get(x).status.ok());
  auto again = SubmitOk(Request(10, 10));  // room again once dispatched
  const MetricsSnapshot m = scheduler_->Metrics();
  EXPECT_EQ(m.rejected[static_cast<int>(RejectReason::kQueueFull)], 1u);
  EXPECT_EQ(m.submitted, 5u);
}

// ---- ordering and pipelining ------------------------------------------------------------------

TEST_F(SchedulerTest, NeverTwoRequestsOfOneSequenceAndLayerInABatch) {
  Make(WindowOptions(8, microseconds(0)), Buckets({1, 2, 4, 8}, 1));
  executor_->Pause();
  std::vector<ResultFuture> f;
  f.push_back(SubmitOk(Request(100, 9)));
  executor_->WaitForSubmitted(1);
  f.push_back(SubmitOk(Request(1, 1, 0)));
  f.push_back(SubmitOk(Request(2, 1, 0)));
  f.push_back(SubmitOk(Request(3, 1, 0)));
  f.push_back(SubmitOk(Request(4, 1, 1)));  // same sequence, other layer: may share
  f.push_back(SubmitOk(Request(5, 2, 0)));
  f.push_back(SubmitOk(Request(6, 2, 0)));
  scheduler_->SyncForTesting();
  executor_->Resume();
  for (auto& x : f) EXPECT_TRUE(Get(x).status.ok());
  EXPECT_EQ(BatchTags(),
            (std::vector<std::vector<std::uint64_t>>{{100}, {1, 4, 5}, {2, 6}, {3}}));
  EXPECT_EQ(executor_->duplicate_key_batches(), 0);
}

TEST_F(SchedulerTest, KeepsUpToMaxInFlightBatchesRunning) {
  Make(WindowOptions(1, microseconds(0)), Buckets({1}, /*max_in_flight=*/2));
  executor_->Pause();
  std::vector<ResultFuture> f;
  for (int i = 0; i < 5; ++i) f.push_back(SubmitOk(Request(i, i)));
  executor_->WaitForSubmitted(2);
  scheduler_->SyncForTesting();
  EXPECT_EQ(executor_->submitted_batches(), 2);  // batch 2 formed while batch 1 runs, no third
  EXPECT_EQ(executor_->in_flight(), 2);
  MetricsSnapshot m = scheduler_->Metrics();
  EXPECT_EQ(m.in_flight_batches, 2);
  EXPECT_EQ(m.in_flight_requests, 2);
  EXPECT_EQ(m.pending, 3);
  executor_->Resume();
  for (auto& x : f) EXPECT_TRUE(Get(x).status.ok());
  EXPECT_EQ(executor_->max_in_flight_seen(), 2);
  EXPECT_EQ(executor_->submitted_batches(), 5);
}

// ---- completion -------------------------------------------------------------------------------

TEST_F(SchedulerTest, ACallbackThatThrowsIsCaughtAndOthersStillComplete) {
  Make(WindowOptions(8, microseconds(0)));
  std::atomic<int> calls{0};
  auto a = scheduler_->Submit(Request(1, 1), [&](DecodeResult r) {
    calls.fetch_add(1);
    EXPECT_TRUE(r.status.ok());
    throw std::runtime_error("callback failure");
  });
  ASSERT_TRUE(a.ok());
  auto b = scheduler_->Submit(Request(2, 2), [&](DecodeResult) { throw 42; });
  ASSERT_TRUE(b.ok());
  scheduler_->Drain();
  EXPECT_EQ(calls.load(), 1);
  EXPECT_EQ(scheduler_->Metrics().completed, 2u);
}

// A large batch's results go out in parts on the completion threads at once: the first request's
// callback sees a callback of the batch's second half start while it waits (one thread
// delivering the batch in order would never let it). Every callback runs once, every status OK.
TEST_F(SchedulerTest, ALargeBatchIsDeliveredInPartsConcurrently) {
  SchedulerOptions o = WindowOptions(64, std::chrono::seconds(10));
  o.completion_threads = 2;
  Make(o, Buckets({64}));
  std::atomic<int> calls{0}, ok{0};
  std::atomic<bool> second_half_started{false}, first_saw_second{false};
  for (int i = 0; i < 64; ++i) {
    ASSERT_TRUE(scheduler_->Submit(Request(i, i), [&, i](DecodeResult r) {
                             if (r.status.ok()) ok.fetch_add(1);
                             calls.fetch_add(1);
                             if (i >= 32) second_half_started = true;
                             if (i != 0) return;
                             using std::chrono::steady_clock;
                             const auto until = steady_clock::now() + std::chrono::seconds(10);
                             while (!second_half_started && steady_clock::now() < until) {
                               std::this_thread::yield();
                             }
                             first_saw_second = second_half_started.load();
                           }).ok());
  }
  scheduler_->Drain();
  EXPECT_EQ(executor_->submitted_batches(), 1);
  EXPECT_EQ(calls.load(), 64);
  EXPECT_EQ(ok.load(), 64);
  EXPECT_TRUE(first_saw_second.load());
  EXPECT_EQ(scheduler_->Metrics().completed, 64u);
}

// A callback that blocks holds its completion thread only: batching goes on, small batches of
// futures still complete (on the executor's thread), and only callbacks queue behind it.
TEST_F(SchedulerTest, ABlockingCallbackDoesNotStallBatching) {
  SchedulerOptions o = WindowOptions(1, microseconds(0));
  o.completion_threads = 1;  // the blocked callback holds the only completion thread
  Make(o, Buckets({1}));
  std::promise<void> entered, release;
  auto released = release.get_future().share();
  auto a = scheduler_->Submit(Request(1, 1), [&, released](DecodeResult) {
    entered.set_value();
    released.wait();
  });
  ASSERT_TRUE(a.ok());
  entered.get_future().wait();
  std::vector<ResultFuture> f;
  for (int i = 0; i < 6; ++i) f.push_back(SubmitOk(Request(10 + i, 10 + i)));
  std::atomic<bool> queued_callback_ran{false};
  ASSERT_TRUE(scheduler_->Submit(Request(20, 20), [&](DecodeResult) {
                           queued_callback_ran = true;
                         }).ok());
  executor_->WaitForSubmitted(8);  // every batch still reached the executor
  for (auto& x : f) EXPECT_TRUE(Get(x).status.ok());  // futures are not behind the callback
  EXPECT_FALSE(queued_callback_ran.load());            // callbacks are
  release.set_value();
  scheduler_->Drain();
  EXPECT_TRUE(queued_callback_ran.load());
}

TEST_F(SchedulerTest, ExecutorFailuresReachEveryAffectedRequestAndOnlyThose) {
  Make(WindowOptions(2, microseconds(0)), Buckets({1, 2}, 1));
  executor_->FailNextSubmit(InternalError("device lost"));
  auto a = SubmitOk(Request(1, 1));
  DecodeResult ra = Get(a);
  EXPECT_EQ(ra.status, InternalError("device lost"));
  EXPECT_TRUE(ra.output.empty());
  executor_->FailSequence(7, ResourceExhaustedError("sequence 7 full"));
  executor_->Pause();
  auto hold = SubmitOk(Request(2, 2));
  executor_->WaitForSubmitted(1);
  auto bad = SubmitOk(Request(3, 7));
  auto good = SubmitOk(Request(4, 8));
  scheduler_->SyncForTesting();
  executor_->Resume();
  EXPECT_TRUE(Get(hold).status.ok());
  EXPECT_EQ(Get(bad).status.code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(Get(good).status.ok());
  EXPECT_EQ(BatchTags().back(), (std::vector<std::uint64_t>{3, 4}));  // they shared a batch
  const MetricsSnapshot m = scheduler_->Metrics();
  EXPECT_EQ(m.completed, 4u);
  EXPECT_EQ(m.failed, 2u);
}

// ---- drain and shutdown -----------------------------------------------------------------------

TEST_F(SchedulerTest, DrainFinishesEverythingAdmittedWithoutWaitingForTheWindow) {
  Make(WindowOptions(8, microseconds(1'000'000)));
  std::vector<ResultFuture> f;
  for (int i = 0; i < 3; ++i) f.push_back(SubmitOk(Request(i, i)));
  scheduler_->SyncForTesting();
  EXPECT_EQ(executor_->submitted_batches(), 0);
  scheduler_->Drain();  // the manual clock never moves: the window is bypassed
  for (auto& x : f) {
    ASSERT_TRUE(Ready(x));
    EXPECT_TRUE(x.get().status.ok());
  }
  auto late = scheduler_->Submit(Request(9, 9));
  ASSERT_FALSE(late.ok());
  EXPECT_EQ(late.status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(scheduler_->Metrics().rejected[static_cast<int>(RejectReason::kClosed)], 1u);
  scheduler_->Shutdown();  // after Drain: nothing left to fail
  EXPECT_EQ(scheduler_->Metrics().shut_down, 0u);
}

TEST_F(SchedulerTest, ShutdownFailsQueuedRequestsAndWaitsForInFlightOnes) {
  Make(WindowOptions(1, microseconds(0)), Buckets({1}, 1));
  executor_->Pause();
  auto running = SubmitOk(Request(1, 1));
  executor_->WaitForSubmitted(1);
  std::vector<ResultFuture> queued;
  for (int i = 0; i < 3; ++i) queued.push_back(SubmitOk(Request(10 + i, 10 + i)));
  std::thread stopper([&] { scheduler_->Shutdown(); });
  for (auto& x : queued) {
    DecodeResult r = Get(x);
    EXPECT_EQ(r.status.code(), StatusCode::kUnavailable) << r.status.ToString();
  }
  EXPECT_FALSE(Ready(running));  // Shutdown is waiting for it
  executor_->Resume();
  stopper.join();
  EXPECT_TRUE(Ready(running));
  EXPECT_TRUE(running.get().status.ok());
  EXPECT_EQ(scheduler_->Submit(Request(20, 20)).status().code(), StatusCode::kUnavailable);
  const MetricsSnapshot m = scheduler_->Metrics();
  EXPECT_EQ(m.shut_down, 3u);
  EXPECT_EQ(m.completed, 1u);
}

TEST_F(SchedulerTest, DestructorShutsDownWithRequestsQueued) {
  Make(WindowOptions(8, microseconds(1'000'000)));
  auto f = SubmitOk(Request(1, 1));
  scheduler_.reset();
  ASSERT_TRUE(Ready(f));
  EXPECT_EQ(f.get().status.code(), StatusCode::kUnavailable);
}

// ---- batches in parts (SchedulerOptions::part_size) -------------------------------------------

FakeExecutorOptions PartsExecutor(int preferred_part_size = 0) {
  FakeExecutorOptions o = Buckets({1, 2, 4, 8});
  o.accept_parts = true;
  o.preferred_part_size = preferred_part_size;
  return o;
}

SchedulerOptions PartOptions(int part_size, microseconds delay = microseconds(100)) {
  SchedulerOptions o = WindowOptions(8, delay);
  o.part_size = part_size;
  return o;
}

std::vector<std::vector<std::uint64_t>> Tags(const std::vector<RecordedBatch>& batches) {
  std::vector<std::vector<std::uint64_t>> out;
  for (const RecordedBatch& b : batches) {
    out.emplace_back();
    for (const auto& r : b.requests) out.back().push_back(r.tag);
  }
  return out;
}

// While a batch waits for its full bucket, requests go to the executor part_size at a time; the
// bucket closes it with the rest, as one batch in the order handed over.
TEST_F(SchedulerTest, PartsAreHandedOverWhileTheBatchForms) {
  Make(PartOptions(2), PartsExecutor());
  std::vector<ResultFuture> f;
  for (int i = 0; i < 3; ++i) f.push_back(SubmitOk(Request(i, i)));
  scheduler_->SyncForTesting();
  EXPECT_EQ(Tags(executor_->parts()), (std::vector<std::vector<std::uint64_t>>{{0, 1}}));
  EXPECT_EQ(executor_->submitted_batches(), 0);
  EXPECT_FALSE(Ready(f[0]));
  f.push_back(SubmitOk(Request(3, 3)));
  scheduler_->SyncForTesting();
  EXPECT_EQ(Tags(executor_->parts()), (std::vector<std::vector<std::uint64_t>>{{0, 1}, {2, 3}}));
  for (int i = 4; i < 8; ++i) f.push_back(SubmitOk(Request(i, i)));
  scheduler_->SyncForTesting();
  ASSERT_EQ(BatchTags(), (std::vector<std::vector<std::uint64_t>>{{0, 1, 2, 3, 4, 5, 6, 7}}));
  for (auto& x : f) EXPECT_TRUE(Get(x).status.ok());
  EXPECT_EQ(clock_.Now(), 0);  // the full bucket closed it: no time passed
  const MetricsSnapshot m = scheduler_->Metrics();
  EXPECT_EQ(m.batches, 1u);
  EXPECT_EQ(m.batch_size.max, 8u);
  EXPECT_EQ(m.queue_delay_ns.count, 8u);
}

// The window closes a batch whose parts never filled the bucket; the queue depth counts the parts
// until then.
TEST_F(SchedulerTest, TheWindowClosesABatchHandedOverInParts) {
  Make(PartOptions(2), PartsExecutor());
  std::vector<ResultFuture> f;
  for (int i = 0; i < 5; ++i) f.push_back(SubmitOk(Request(i, i)));
  scheduler_->SyncForTesting();
  EXPECT_EQ(Tags(executor_->parts()), (std::vector<std::vector<std::uint64_t>>{{0, 1}, {2, 3}}));
  EXPECT_EQ(scheduler_->Metrics().pending, 5);
  clock_.Advance(microseconds(99));
  scheduler_->SyncForTesting();
  EXPECT_EQ(executor_->submitted_batches(), 0);
  clock_.Advance(microseconds(1));
  scheduler_->SyncForTesting();
  ASSERT_EQ(BatchTags(), (std::vector<std::vector<std::uint64_t>>{{0, 1, 2, 3, 4}}));
  for (auto& x : f) EXPECT_TRUE(Get(x).status.ok());
}

// A request handed over in a part is dispatched: Cancel returns false and it completes.
TEST_F(SchedulerTest, CancelAfterHandOverReturnsFalseAndTheRequestCompletes) {
  Make(PartOptions(2, microseconds(10'000)), PartsExecutor());
  auto a = scheduler_->Submit(Request(1, 1));
  auto b = scheduler_->Submit(Request(2, 2));
  auto c = scheduler_->Submit(Request(3, 3));
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  scheduler_->SyncForTesting();
  ASSERT_EQ(executor_->parts().size(), 1u);
  EXPECT_FALSE(scheduler_->Cancel(a->handle));
  EXPECT_TRUE(scheduler_->Cancel(c->handle));  // still pending
  EXPECT_EQ(Get(c->result).status.code(), StatusCode::kCancelled);
  clock_.Advance(microseconds(10'000));
  scheduler_->SyncForTesting();
  EXPECT_TRUE(Get(a->result).status.ok());
  EXPECT_TRUE(Get(b->result).status.ok());
  EXPECT_EQ(BatchTags(), (std::vector<std::vector<std::uint64_t>>{{1, 2}}));
}

// A (sequence, layer) already in a part waits for a later batch; so does a part that only its
// duplicates would fill.
TEST_F(SchedulerTest, PartsNeverTakeASequenceAndLayerTwice) {
  Make(PartOptions(2), PartsExecutor());
  std::vector<ResultFuture> f;
  f.push_back(SubmitOk(Request(0, 1)));
  f.push_back(SubmitOk(Request(1, 2)));
  scheduler_->SyncForTesting();
  f.push_back(SubmitOk(Request(2, 1)));  // sequence 1 again
  f.push_back(SubmitOk(Request(3, 3)));
  scheduler_->SyncForTesting();
  EXPECT_EQ(Tags(executor_->parts()), (std::vector<std::vector<std::uint64_t>>{{0, 1}}));
  clock_.Advance(microseconds(100));
  scheduler_->SyncForTesting();
  clock_.Advance(microseconds(100));
  scheduler_->SyncForTesting();
  for (auto& x : f) EXPECT_TRUE(Get(x).status.ok());
  EXPECT_EQ(BatchTags(), (std::vector<std::vector<std::uint64_t>>{{0, 1, 3}, {2}}));
  EXPECT_EQ(executor_->duplicate_key_batches(), 0);
}

// A request that could not fill the bucket because the others pending duplicate the parts'
// pairs still joins the batch: the next distinct request fills the bucket with it.
TEST_F(SchedulerTest, ARequestHeldBackByDuplicatesStillJoinsTheBatch) {
  Make(PartOptions(2), PartsExecutor());
  std::vector<ResultFuture> f;
  for (int i = 0; i < 6; ++i) f.push_back(SubmitOk(Request(i, i)));
  scheduler_->SyncForTesting();
  ASSERT_EQ(executor_->parts().size(), 3u);  // sequences 0-5 handed over
  f.push_back(SubmitOk(Request(6, 0)));  // sequence 0 again: waits for a later batch
  f.push_back(SubmitOk(Request(7, 6)));  // distinct, but 7 of 8: the bucket is not full
  scheduler_->SyncForTesting();
  EXPECT_EQ(executor_->submitted_batches(), 0);
  f.push_back(SubmitOk(Request(8, 7)));  // the eighth distinct pair
  scheduler_->SyncForTesting();
  ASSERT_GE(executor_->submitted_batches(), 1);
  EXPECT_EQ(BatchTags()[0], (std::vector<std::uint64_t>{0, 1, 2, 3, 4, 5, 7, 8}));
  clock_.Advance(microseconds(100));
  scheduler_->SyncForTesting();
  for (auto& x : f) EXPECT_TRUE(Get(x).status.ok());
  EXPECT_EQ(executor_->duplicate_key_batches(), 0);
}

// Drain dispatches a batch open in parts at once; Shutdown runs one (its requests are
// dispatched), failing only the requests still pending.
TEST_F(SchedulerTest, DrainAndShutdownCloseABatchOpenInParts) {
  Make(PartOptions(2, microseconds(1'000'000)), PartsExecutor());
  std::vector<ResultFuture> f;
  for (int i = 0; i < 3; ++i) f.push_back(SubmitOk(Request(i, i)));
  scheduler_->SyncForTesting();
  ASSERT_EQ(executor_->parts().size(), 1u);
  scheduler_->Drain();
  for (auto& x : f) {
    ASSERT_TRUE(Ready(x));
    EXPECT_TRUE(x.get().status.ok());
  }
  EXPECT_EQ(BatchTags(), (std::vector<std::vector<std::uint64_t>>{{0, 1, 2}}));

  Make(PartOptions(2, microseconds(1'000'000)), PartsExecutor());
  f.clear();
  for (int i = 0; i < 3; ++i) f.push_back(SubmitOk(Request(10 + i, i)));
  scheduler_->SyncForTesting();
  ASSERT_EQ(executor_->parts().size(), 1u);
  scheduler_->Shutdown();
  EXPECT_TRUE(Get(f[0]).status.ok());
  EXPECT_TRUE(Get(f[1]).status.ok());
  EXPECT_EQ(Get(f[2]).status.code(), StatusCode::kUnavailable);
  EXPECT_EQ(BatchTags(), (std::vector<std::vector<std::uint64_t>>{{10, 11}}));
}

// part_size: -1 takes the executor's preferred size when the bucket holds two such parts; a size
// > 0 needs an executor that takes parts; out of range is refused naming the field.
TEST_F(SchedulerTest, PartSizeAutoAndValidation) {
  Make(PartOptions(-1), PartsExecutor(/*preferred_part_size=*/4));
  for (int i = 0; i < 5; ++i) SubmitOk(Request(i, i));
  scheduler_->SyncForTesting();
  EXPECT_EQ(Tags(executor_->parts()), (std::vector<std::vector<std::uint64_t>>{{0, 1, 2, 3}}));
  scheduler_->Drain();

  Make(PartOptions(-1), PartsExecutor(/*preferred_part_size=*/8));  // one part is the batch
  for (int i = 0; i < 5; ++i) SubmitOk(Request(i, i));
  scheduler_->SyncForTesting();
  EXPECT_TRUE(executor_->parts().empty());
  scheduler_->Drain();

  FakeExecutor plain;
  auto refused = Scheduler::Create(PartOptions(2), &plain, &clock_);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("part_size"), std::string::npos);
  FakeExecutor parts(PartsExecutor());
  for (int bad : {-2, 9}) {
    auto r = Scheduler::Create(PartOptions(bad), &parts, &clock_);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("part_size"), std::string::npos);
  }
}

// ---- Decode -----------------------------------------------------------------------------------

// On an idle scheduler Decode runs the batch of one on the calling thread: with a window of a
// second on a clock that never moves, a queued request would never be dispatched.
TEST_F(SchedulerTest, DecodeOnAnIdleSchedulerRunsOnTheCallersThread) {
  Make(WindowOptions(8, microseconds(1'000'000)));
  DecodeRequest a = Request(21, 3, 1);
  a.want_lse = true;
  const std::vector<std::uint16_t> a_q = Bits(data_.back().q);
  DecodeResult ra = scheduler_->Decode(a);
  ASSERT_TRUE(ra.status.ok()) << ra.status.ToString();
  EXPECT_EQ(Bits(ra.output), a_q);
  ASSERT_EQ(ra.lse.size(), static_cast<std::size_t>(shape().num_q_heads));
  for (int h = 0; h < shape().num_q_heads; ++h) EXPECT_EQ(ra.lse[h], 1 * 1000 + h);

  DecodeRequest b = Request(22, 4, 2);  // to caller-given destinations
  std::vector<Half> out(data_.back().q.size(), Half{0xffff});
  std::vector<float> lse(shape().num_q_heads, -1.0f);
  b.out = out.data();
  b.lse = lse.data();
  DecodeResult rb = scheduler_->Decode(b);
  ASSERT_TRUE(rb.status.ok()) << rb.status.ToString();
  EXPECT_TRUE(rb.output.empty());
  EXPECT_TRUE(rb.lse.empty());
  EXPECT_EQ(Bits(out), Bits(data_.back().q));
  for (int h = 0; h < shape().num_q_heads; ++h) EXPECT_EQ(lse[h], 2 * 1000 + h);

  EXPECT_EQ(BatchTags(), (std::vector<std::vector<std::uint64_t>>{{21}, {22}}));
  for (const RecordedBatch& batch : executor_->batches()) {
    EXPECT_EQ(batch.requests[0].memory, runtime::MemoryKind::kHost);  // the caller's buffers
  }
  const MetricsSnapshot m = scheduler_->Metrics();
  EXPECT_EQ(m.decoded_inline, 2u);
  EXPECT_EQ(m.batches, 2u);
  EXPECT_EQ(m.submitted, 2u);
  EXPECT_EQ(m.completed, 2u);
  EXPECT_EQ(m.failed, 0u);
  EXPECT_EQ(m.latency_ns.count, 2u);
  EXPECT_EQ(m.pending, 0);
  EXPECT_EQ(m.in_flight_batches, 0);
  EXPECT_NE(scheduler_->PrometheusText().find("attnrt_scheduler_decoded_inline_total 2"),
            std::string::npos);
  // The sequence counts as idle again: a sequence call goes through.
  EXPECT_TRUE(scheduler_->RunIfSequenceIdle(3, "FreeSequence", [] { return Status::Ok(); }).ok());
}

// Behind queued requests Decode is submitted and batched with them (never overtaking them).
TEST_F(SchedulerTest, DecodeBehindQueuedRequestsJoinsTheirBatch) {
  Make(WindowOptions(8, microseconds(100)));
  std::vector<ResultFuture> queued;
  for (int i = 0; i < 2; ++i) queued.push_back(SubmitOk(Request(30 + i, 10 + i)));
  scheduler_->SyncForTesting();
  DecodeRequest d = Request(32, 12);
  const std::vector<std::uint16_t> d_q = Bits(data_.back().q);
  DecodeResult rd;
  std::thread caller([&] { rd = scheduler_->Decode(d); });
  while (scheduler_->Metrics().pending < 3) std::this_thread::yield();
  scheduler_->SyncForTesting();
  EXPECT_EQ(executor_->submitted_batches(), 0);  // still waiting for the window
  clock_.Advance(microseconds(100));
  caller.join();
  ASSERT_TRUE(rd.status.ok()) << rd.status.ToString();
  EXPECT_EQ(Bits(rd.output), d_q);
  for (auto& f : queued) EXPECT_TRUE(Get(f).status.ok());
  // {30, 31, 32} in one batch; or, when the caller counted itself in the queue before the sync
  // but enqueued after it, 32 in a batch of its own after theirs. Never first.
  const auto tags = BatchTags();
  ASSERT_FALSE(tags.empty());
  EXPECT_EQ(tags[0][0], 30u);
  std::vector<std::uint64_t> order;
  for (const auto& b : tags) order.insert(order.end(), b.begin(), b.end());
  EXPECT_EQ(order, (std::vector<std::uint64_t>{30, 31, 32}));
  EXPECT_EQ(scheduler_->Metrics().decoded_inline, 0u);
}

// While a batch runs, Decode waits for its own turn through the queue.
TEST_F(SchedulerTest, DecodeWhileABatchRunsGoesThroughTheQueue) {
  Make(WindowOptions(1, microseconds(0)), Buckets({1}, 2));
  executor_->Pause();
  auto running = SubmitOk(Request(40, 1));
  executor_->WaitForSubmitted(1);
  DecodeResult rd;
  std::thread caller([&] { rd = scheduler_->Decode(Request(41, 2)); });
  executor_->WaitForSubmitted(2);
  executor_->Resume();
  caller.join();
  EXPECT_TRUE(rd.status.ok()) << rd.status.ToString();
  EXPECT_TRUE(Get(running).status.ok());
  EXPECT_EQ(scheduler_->Metrics().decoded_inline, 0u);
  EXPECT_EQ(scheduler_->Metrics().completed, 2u);
}

TEST_F(SchedulerTest, DecodeRejectsWhatSubmitRejects) {
  Make(WindowOptions(8, microseconds(100)));
  DecodeRequest bad_q = Request(50, 1);
  bad_q.q = bad_q.q.subspan(1);
  DecodeResult r = scheduler_->Decode(bad_q);
  EXPECT_EQ(r.status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status.message().find("q has"), std::string::npos) << r.status.ToString();
  EXPECT_TRUE(r.output.empty());
  r = scheduler_->Decode(Request(51, 999));
  EXPECT_EQ(r.status.code(), StatusCode::kNotFound) << r.status.ToString();
  executor_->FailNextSubmit(InternalError("injected"));
  r = scheduler_->Decode(Request(52, 1));
  EXPECT_EQ(r.status.code(), StatusCode::kInternal) << r.status.ToString();
  EXPECT_TRUE(r.output.empty());
  scheduler_->Drain();
  r = scheduler_->Decode(Request(53, 1));
  EXPECT_EQ(r.status.code(), StatusCode::kUnavailable) << r.status.ToString();
  const MetricsSnapshot m = scheduler_->Metrics();
  EXPECT_EQ(m.rejected[static_cast<int>(RejectReason::kInvalidArgument)], 1u);
  EXPECT_EQ(m.rejected[static_cast<int>(RejectReason::kUnknownSequence)], 1u);
  EXPECT_EQ(m.rejected[static_cast<int>(RejectReason::kClosed)], 1u);
  EXPECT_EQ(m.submitted, 1u);  // the executor's failure: admitted, completed with its error
  EXPECT_EQ(m.completed, 1u);
  EXPECT_EQ(m.failed, 1u);
  EXPECT_EQ(executor_->submitted_batches(), 0);
}

// ---- metrics ----------------------------------------------------------------------------------

TEST_F(SchedulerTest, MetricsCountEveryOutcomeAndExportPrometheusText) {
  SchedulerOptions o = WindowOptions(4, microseconds(50));
  o.default_timeout = microseconds(1000);
  Make(o, Buckets({1, 2, 4}));
  std::vector<ResultFuture> ok;
  for (int i = 0; i < 6; ++i) ok.push_back(SubmitOk(Request(i, i)));  // 4 at once, 2 at 50 us
  auto cancelled = scheduler_->Submit(Request(20, 20));
  ASSERT_TRUE(cancelled.ok());
  ASSERT_TRUE(scheduler_->Cancel(cancelled->handle));
  EXPECT_FALSE(scheduler_->Submit(Request(21, 999)).ok());
  scheduler_->SyncForTesting();
  clock_.Advance(microseconds(50));
  scheduler_->SyncForTesting();
  for (auto& x : ok) EXPECT_TRUE(Get(x).status.ok());
  EXPECT_EQ(Get(cancelled->result).status.code(), StatusCode::kCancelled);
  scheduler_->Drain();
  const MetricsSnapshot m = scheduler_->Metrics();
  EXPECT_EQ(m.submitted, 7u);
  EXPECT_EQ(m.completed, 6u);
  EXPECT_EQ(m.cancelled, 1u);
  EXPECT_EQ(m.rejected_total(), 1u);
  EXPECT_EQ(m.batches, 2u);
  EXPECT_EQ(m.batch_size.count, 2u);
  EXPECT_EQ(m.batch_size.sum, 6u);
  EXPECT_EQ(m.latency_ns.count, 7u);
  EXPECT_EQ(m.queue_delay_ns.count, 6u);
  EXPECT_EQ(m.executor_time_ns.count, 2u);
  EXPECT_EQ(m.pending, 0);
  EXPECT_EQ(m.in_flight_batches, 0);
  const std::string text = scheduler_->PrometheusText();
  EXPECT_NE(text.find("attnrt_scheduler_requests_submitted_total 7\n"), std::string::npos) << text;
  EXPECT_NE(text.find("attnrt_scheduler_batches_total 2\n"), std::string::npos);
  EXPECT_NE(text.find("attnrt_scheduler_batch_size_sum 6\n"), std::string::npos);
  EXPECT_NE(text.find("attnrt_scheduler_queue_delay_seconds_count 6\n"), std::string::npos);
}

// The scheduler logs through the library's named logger ("attnrt", api/internal/log.h): a host
// routes it by adding a sink to that logger.
TEST_F(SchedulerTest, EachFormedBatchIsLoggedAtDebugLevel) {
  auto stream = std::make_shared<std::ostringstream>();
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(*stream);
  sink->set_pattern("%v");
  spdlog::logger& logger = Logger();
  const spdlog::level::level_enum previous_level = logger.level();
  logger.sinks().push_back(sink);
  logger.set_level(spdlog::level::debug);
  Make(WindowOptions(8, microseconds(100)), Buckets({1, 2, 4, 8}));
  std::vector<ResultFuture> f;
  for (int i = 0; i < 3; ++i) f.push_back(SubmitOk(Request(i, i)));
  scheduler_->SyncForTesting();
  clock_.Advance(microseconds(100));
  scheduler_->SyncForTesting();
  for (auto& x : f) EXPECT_TRUE(Get(x).status.ok());
  scheduler_.reset();
  logger.sinks().pop_back();
  logger.set_level(previous_level);
  EXPECT_NE(stream->str().find("formed batch size=3 bucket=4 oldest_wait_us=100.0"),
            std::string::npos)
      << stream->str();
}

// ---- concurrency: exactly once ------------------------------------------------------------------

#if defined(ATTNRT_TSAN_ACTIVE)
constexpr int kRequestsPerProducer = 5'000;  // TSan runs ~10-20x slower
#else
constexpr int kRequestsPerProducer = 100'000;
#endif

// A scheduler over `executor` on the steady clock, for the concurrency tests; tag payloads, so
// the finite check is off (see WindowOptions).
std::unique_ptr<Scheduler> MakeConcurrent(SchedulerOptions o, FakeExecutor* executor) {
  o.check_finite = false;
  auto created = Scheduler::Create(o, executor);
  EXPECT_TRUE(created.ok()) << created.status().ToString();
  return created.ok() ? std::move(created).value() : nullptr;
}

// 8 producers (half with producer tokens) submit with random layers, priorities, cancellations
// and a few tight timeouts; every accepted request must complete exactly once with OK,
// Cancelled (iff Cancel returned true) or DeadlineExceeded, and per-(sequence, layer) order must
// hold in the executor's batches.
TEST(SchedulerConcurrencyTest, EveryRequestCompletesExactlyOnce) {
  constexpr int kProducers = 8;
  constexpr int kTotal = kProducers * kRequestsPerProducer;
  FakeExecutorOptions eo;
  eo.record = false;
  eo.max_sequences = 1024;
  FakeExecutor executor(eo);
  ASSERT_TRUE(executor.CreateSequences(1024).ok());
  SchedulerOptions o;
  o.max_batch_size = 32;
  o.max_queue_delay = microseconds(50);
  o.max_queue_size = 1 << 14;
  o.num_priority_levels = 2;
  o.default_timeout = microseconds(10'000'000);
  std::unique_ptr<Scheduler> scheduler = MakeConcurrent(o, &executor);
  ASSERT_NE(scheduler, nullptr);

  std::vector<std::atomic<std::uint8_t>> completions(kTotal);
  std::vector<std::atomic<std::uint8_t>> outcome(kTotal);  // 1 ok, 2 cancelled, 3 deadline
  std::vector<std::uint8_t> cancel_accepted(kTotal, 0);
  std::atomic<std::int64_t> queue_full_retries{0};
  std::atomic<int> wrong_output{0};
  const ModelShape shape = executor.shape();

  auto produce = [&](int p) {
    std::unique_ptr<Scheduler::Producer> producer;
    if (p % 2 == 0) producer = scheduler->CreateProducer();
    std::mt19937 rng(p);
    RequestData data(shape, 0);
    for (int i = 0; i < kRequestsPerProducer; ++i) {
      const int id = p * kRequestsPerProducer + i;
      WriteTag(data.q.data(), id);
      DecodeRequest r;
      r.sequence_id = rng() % 1024;
      r.layer = static_cast<int>(rng() % shape.num_layers);
      r.priority = static_cast<int>(rng() % 2);
      if (rng() % 64 == 0) r.timeout = microseconds(1 + rng() % 20);
      r.q = data.q;
      r.k = data.k;
      r.v = data.v;
      DoneCallback done = [&, id](DecodeResult result) {
        completions[id].fetch_add(1, std::memory_order_relaxed);
        std::uint8_t kind = 0;
        if (result.status.ok()) {
          kind = 1;
          if (ReadTag(result.output.data()) != static_cast<std::uint64_t>(id)) wrong_output++;
        } else if (result.status.code() == StatusCode::kCancelled) {
          kind = 2;
        } else if (result.status.code() == StatusCode::kDeadlineExceeded) {
          kind = 3;
        }
        outcome[id].store(kind, std::memory_order_relaxed);
      };
      while (true) {
        auto s = producer ? producer->Submit(r, done) : scheduler->Submit(r, done);
        if (s.ok()) {
          if (rng() % 16 == 0 && scheduler->Cancel(*s)) cancel_accepted[id] = 1;
          break;
        }
        ASSERT_EQ(s.status().code(), StatusCode::kResourceExhausted) << s.status().ToString();
        queue_full_retries.fetch_add(1, std::memory_order_relaxed);
        std::this_thread::sleep_for(microseconds(20));  // back off like a client
      }
    }
  };
  std::vector<std::thread> threads;
  for (int p = 0; p < kProducers; ++p) threads.emplace_back(produce, p);
  for (auto& t : threads) t.join();
  scheduler->Drain();

  int ok = 0, cancelled = 0, deadline = 0;
  for (int id = 0; id < kTotal; ++id) {
    ASSERT_EQ(completions[id].load(), 1) << "request " << id;
    const int kind = outcome[id].load();
    ASSERT_NE(kind, 0) << "request " << id << " completed with an unexpected status";
    ASSERT_EQ(kind == 2, cancel_accepted[id] == 1) << "request " << id;
    ok += kind == 1;
    cancelled += kind == 2;
    deadline += kind == 3;
  }
  EXPECT_EQ(wrong_output.load(), 0);
  EXPECT_EQ(executor.duplicate_key_batches(), 0);
  const MetricsSnapshot m = scheduler->Metrics();
  EXPECT_EQ(m.submitted, static_cast<std::uint64_t>(kTotal));
  EXPECT_EQ(m.completed, static_cast<std::uint64_t>(ok));
  EXPECT_EQ(m.cancelled, static_cast<std::uint64_t>(cancelled));
  EXPECT_EQ(m.timed_out, static_cast<std::uint64_t>(deadline));
  EXPECT_EQ(m.rejected[static_cast<int>(RejectReason::kQueueFull)],
            static_cast<std::uint64_t>(queue_full_retries.load()));
  EXPECT_EQ(m.latency_ns.count, static_cast<std::uint64_t>(kTotal));
  EXPECT_GT(ok, kTotal / 2);
  std::printf("exactly-once: %d requests: %d ok, %d cancelled, %d deadline, %lld queue-full "
              "retries, %llu batches (mean %.1f)\n",
              kTotal, ok, cancelled, deadline,
              static_cast<long long>(queue_full_retries.load()),
              static_cast<unsigned long long>(m.batches), m.batch_size.Mean());
}

// Decode callers beside Submit producers: every request completes exactly once with its own
// output, whichever route each Decode took.
TEST(SchedulerConcurrencyTest, DecodeAndSubmitFromManyThreadsCompleteExactlyOnce) {
  constexpr int kDecoders = 4, kProducers = 4, kEach = 1500;
  FakeExecutorOptions eo;
  eo.record = false;
  eo.max_sequences = 64;
  FakeExecutor executor(eo);
  ASSERT_TRUE(executor.CreateSequences(64).ok());
  SchedulerOptions o;
  o.max_batch_size = 16;
  o.max_queue_delay = microseconds(30);
  o.max_queue_size = 1 << 14;
  std::unique_ptr<Scheduler> scheduler = MakeConcurrent(o, &executor);
  ASSERT_NE(scheduler, nullptr);
  const ModelShape shape = executor.shape();
  std::atomic<int> wrong{0}, failed{0}, callbacks{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kDecoders + kProducers; ++t) {
    threads.emplace_back([&, t] {
      RequestData data(shape, 0);
      for (int i = 0; i < kEach; ++i) {
        const std::uint64_t tag = static_cast<std::uint64_t>(t) << 32 | i;
        WriteTag(data.q.data(), tag);
        DecodeRequest r;
        r.sequence_id = t * 8 + i % 8;
        r.q = data.q;
        r.k = data.k;
        r.v = data.v;
        if (t < kDecoders) {
          DecodeResult result = scheduler->Decode(r);
          if (!result.status.ok()) {
            failed++;
          } else if (ReadTag(result.output.data()) != tag) {
            wrong++;
          }
        } else {
          auto s = scheduler->Submit(r, [&, tag](DecodeResult result) {
            callbacks++;
            if (!result.status.ok()) {
              failed++;
            } else if (ReadTag(result.output.data()) != tag) {
              wrong++;
            }
          });
          if (!s.ok()) failed++;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  scheduler->Drain();
  EXPECT_EQ(failed.load(), 0);
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(callbacks.load(), kProducers * kEach);
  EXPECT_EQ(executor.duplicate_key_batches(), 0);
  const MetricsSnapshot m = scheduler->Metrics();
  constexpr auto kTotal = static_cast<std::uint64_t>((kDecoders + kProducers) * kEach);
  EXPECT_EQ(m.submitted, kTotal);
  EXPECT_EQ(m.completed, kTotal);
  EXPECT_EQ(m.latency_ns.count, kTotal);
  std::printf("decode + submit: %llu requests, %llu decoded inline, %llu batches\n",
              static_cast<unsigned long long>(kTotal),
              static_cast<unsigned long long>(m.decoded_inline),
              static_cast<unsigned long long>(m.batches));
}

// Per-(sequence, layer) order under concurrency: one producer per sequence submits its steps in
// order; the executor must see each (sequence, layer)'s steps in submission order.
TEST(SchedulerConcurrencyTest, PerSequenceOrderHoldsAcrossBatches) {
  constexpr int kSequences = 8;
  constexpr int kSteps = 2000;
  FakeExecutorOptions eo;
  FakeExecutor executor(eo);
  ASSERT_TRUE(executor.CreateSequences(kSequences).ok());
  SchedulerOptions o;
  o.max_batch_size = 16;
  o.max_queue_delay = microseconds(20);
  o.max_queue_size = kSequences * kSteps;
  std::unique_ptr<Scheduler> scheduler = MakeConcurrent(o, &executor);
  ASSERT_NE(scheduler, nullptr);
  std::vector<std::thread> threads;
  for (int s = 0; s < kSequences; ++s) {
    threads.emplace_back([&, s] {
      RequestData data(executor.shape(), 0);
      for (int step = 0; step < kSteps; ++step) {
        WriteTag(data.q.data(), static_cast<std::uint64_t>(s) << 32 | step);
        DecodeRequest r;
        r.sequence_id = s;
        r.layer = step % 2;  // both layers of a sequence interleave
        r.q = data.q;
        r.k = data.k;
        r.v = data.v;
        ASSERT_TRUE(scheduler->Submit(r, [](DecodeResult) {}).ok());
      }
    });
  }
  for (auto& t : threads) t.join();
  scheduler->Drain();
  std::map<std::pair<runtime::SequenceId, int>, std::int64_t> last;
  std::size_t seen = 0;
  for (const RecordedBatch& b : executor.batches()) {
    for (const auto& r : b.requests) {
      const std::int64_t step = static_cast<std::int64_t>(r.tag & 0xffffffffu);
      auto [it, inserted] = last.try_emplace({r.sequence_id, r.layer}, -1);
      ASSERT_GT(step, it->second) << "sequence " << r.sequence_id << " layer " << r.layer;
      it->second = step;
      ++seen;
    }
  }
  EXPECT_EQ(seen, static_cast<std::size_t>(kSequences * kSteps));
  EXPECT_EQ(executor.duplicate_key_batches(), 0);
}

}  // namespace
}  // namespace attnrt::scheduler
