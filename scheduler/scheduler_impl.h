// Scheduler::Impl: the state the scheduler's parts share, and their division of labour.
// scheduler.h documents the semantics; this header is internal to scheduler/.
//
//   intake.cc    Submit (any thread): validate, admit, copy into a pooled record, enqueue
//                lock-free, wake the batching thread only when it must; Cancel; producers;
//                Decode (run inline on the caller's thread when the scheduler is idle).
//   batcher.cc   the batching thread: drain intake, deadlines, cancellations, the window,
//                dispatch to the executor with pipelining; sleeping and spinning.
//   delivery.cc  completion: a batch's statuses from the executor's thread to each request's
//                future or callback (inline for small batches of futures, else on the pool).
//   scheduler.cc the public classes, options, start, Drain/Shutdown and idle accounting,
//                metrics.
//
// Request accounting, in pipeline order: queue depth (admitted, not dispatched) -> in_flight_
// (batches at the executor) -> completion_tasks_ (result groups posted to the pool, not yet
// delivered). Each stage's counter is raised before the previous one is lowered, so "all three
// are zero" means every admitted request has been delivered.
//
// Waking the batching thread without a lock per Submit: before it sleeps it publishes when it
// would want to be woken (a queue depth, a window expiry, a deadline), sets sleeping_ and
// re-checks the intake queue after a seq_cst fence; a producer enqueues, fences, and wakes it
// only if it sleeps and the new request crosses one of those marks (Dekker-style: one side
// always sees the other).
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <latch>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <boost/asio/post.hpp>
#include <boost/asio/thread_pool.hpp>

#include "api/internal/mutex.h"
#include "api/internal/thread_name.h"
#include "concurrentqueue.h"
#include "scheduler/batching_window.h"
#include "scheduler/completion.h"
#include "scheduler/handle_access.h"
#include "scheduler/request_queue.h"
#include "scheduler/request_record.h"
#include "scheduler/scheduler.h"
#include "scheduler/sequence_activity.h"

namespace attnrt::scheduler {

using internal::Completion;
using internal::HandleAccess;
using internal::RequestRecord;

struct IntakeTraits : moodycamel::ConcurrentQueueDefaultTraits {
  static const std::size_t BLOCK_SIZE = 256;
};
using IntakeQueue = moodycamel::ConcurrentQueue<RequestRecord*, IntakeTraits>;

inline constexpr int kRecordsPerSlab = 256;
inline constexpr std::size_t kProducerCacheRefill = 32;
inline constexpr std::size_t kIntakeBulk = 256;
inline constexpr int kIntakeRoundsPerPass = 16;
inline constexpr int kMaxPriorityLevels = 16;
inline constexpr int kMaxCompletionThreads = 64;
inline constexpr std::size_t kInlineDeliveryMax = 8;  // requests: see OnBatchDone
// A batch's results go out in up to completion_threads parts of at least this many requests,
// delivered concurrently (see OnBatchDone).
inline constexpr std::size_t kDeliveryPartMin = 32;
// Longest timeout: a year, so that deadlines (clock nanoseconds + timeout) cannot overflow.
inline constexpr std::chrono::microseconds kMaxTimeout = std::chrono::hours(24 * 365);

inline std::string Us(std::chrono::microseconds us) {
  return std::to_string(us.count()) + "us";
}

// The Status of a request finished without reaching the executor.
enum class Outcome { kCancelled, kTimedOut, kShutDown };

struct Scheduler::Producer::State {
  State(Scheduler::Impl* impl, IntakeQueue* queue) : impl(impl), token(*queue) {}
  Scheduler::Impl* impl;
  moodycamel::ProducerToken token;
  std::vector<RequestRecord*> cache;
};

inline internal::CompletionPool* NewCompletionPool(std::chrono::microseconds result_spin) {
  const ResultSpin r = ResolveResultSpin(result_spin, std::thread::hardware_concurrency());
  return new internal::CompletionPool(r.spin, r.max_spinners);
}

class Scheduler::Impl final : public ClockListener {
 public:
  Impl(const SchedulerOptions& options, runtime::Executor* executor, Clock* clock)
      : options_(options),
        executor_(executor),
        clock_(clock),
        shape_(executor->shape()),
        q_elems_(static_cast<std::size_t>(shape_.num_q_heads) * shape_.head_dim),
        kv_elems_(static_cast<std::size_t>(shape_.num_kv_heads) * shape_.head_dim),
        window_(options.max_batch_size, options.min_batch_size,
                std::chrono::duration_cast<std::chrono::nanoseconds>(options.max_queue_delay)
                    .count(),
                executor->buckets()),
        max_in_flight_(std::max(1, executor->max_in_flight())),
        default_timeout_ns_(
            std::chrono::duration_cast<std::chrono::nanoseconds>(options.default_timeout)
                .count()),
        spin_ns_(std::chrono::duration_cast<std::chrono::nanoseconds>(
                     ResolveBatcherSpin(options.batcher_spin,
                                        std::thread::hardware_concurrency()))
                     .count()),
        part_size_(ResolvePartSize(options.part_size, *executor, window_)),
        pool_(q_elems_, kv_elems_, static_cast<std::size_t>(shape_.num_q_heads), kRecordsPerSlab,
              executor->staging_memory(), StagedRecords(options, max_in_flight_, shape_)),
        pending_(options.num_priority_levels),
        completion_pool_(static_cast<std::size_t>(options.completion_threads)) {}

  // Device-visible records (SchedulerOptions::mapped_staging_bytes): the working set (the
  // batches in flight, two more forming, what the producers' caches hold), or as many as the
  // bytes hold, up to what the queue and the working set can use at once (auto: that many, at
  // most kMappedStagingAutoMaxBytes).
  static std::size_t StagedRecords(const SchedulerOptions& o, int max_in_flight,
                                   const ModelShape& shape) {
    const std::size_t working_set = static_cast<std::size_t>(max_in_flight + 2) *
                                        static_cast<std::size_t>(o.max_batch_size) +
                                    internal::RecordPool::kCachedRecords;
    const std::size_t stride = internal::RecordPool::StrideFor(
        static_cast<std::size_t>(shape.num_q_heads) * shape.head_dim,
        static_cast<std::size_t>(shape.num_kv_heads) * shape.head_dim,
        static_cast<std::size_t>(shape.num_q_heads));
    const std::int64_t bytes = o.mapped_staging_bytes == defaults::kMappedStagingAuto
                                   ? defaults::kMappedStagingAutoMaxBytes
                                   : std::max<std::int64_t>(o.mapped_staging_bytes, 0);
    const std::size_t budget = static_cast<std::size_t>(bytes) / stride;
    const std::size_t most =
        working_set + static_cast<std::size_t>(std::max(o.max_queue_size, 0));
    return std::max(working_set, std::min(budget, most));
  }

  ~Impl() override {
    Shutdown();
    clock_->RemoveListener(this);
    completions_->Orphan();  // deletes itself once every future has let go
  }

  void Start() {
    clock_->AddListener(this);
    NameCompletionThreads();
    thread_ = std::thread([this] { Run(); });
  }

  // Names each completion thread "attnrt-deliver" (top -H, profilers, the host-path bench's CPU
  // split, which counted them as "other"): one task each, held until all have started, so that
  // no thread takes two.
  void NameCompletionThreads() {
    const auto n = static_cast<std::ptrdiff_t>(options_.completion_threads);
    // Shared: a task may still be inside arrive_and_wait when this function returns.
    auto named = std::make_shared<std::latch>(n);
    for (std::ptrdiff_t i = 0; i < n; ++i) {
      boost::asio::post(completion_pool_, [named] {
        attnrt::internal::NameThisThread("attnrt-deliver");
        named->arrive_and_wait();
      });
    }
    named->wait();
  }

  // ---- intake ---------------------------------------------------------------------------------

  // `validated`: the caller already ran Validate(request) (Decode's submitted route).
  StatusOr<RequestHandle> Submit(const DecodeRequest& request, DoneCallback* done,
                                 ResultFuture* future, Producer::State* producer,
                                 bool validated = false);

  bool Cancel(const RequestHandle& handle);

  DecodeResult Decode(const DecodeRequest& request);

  std::unique_ptr<Producer::State> NewProducerState();

  void ReleaseProducerState(Producer::State* state);

  // ---- shutdown ------------------------------------------------------------------------------

  void Drain();

  void Shutdown();

  // ---- observability -------------------------------------------------------------------------

  MetricsSnapshot Metrics() const;

  void SyncForTesting();

  std::vector<BatcherPass> RecentPasses() const {
    MutexLock lock(&passes_mu_);
    std::vector<BatcherPass> out;
    out.reserve(passes_.size());
    for (std::size_t i = 0; i < passes_.size(); ++i) {
      out.push_back(passes_[(passes_next_ + i) % passes_.size()]);
    }
    if (passes_recorded_ < passes_.size()) out.erase(out.begin(), out.end() - passes_recorded_);
    return out;
  }

  const SchedulerOptions& options() const { return options_; }

  template <typename Fn>
  Status RunIfSequenceIdle(SequenceId id, const char* call, Fn&& fn) {
    return activity_.RunIfIdle(id, call, std::forward<Fn>(fn));
  }

  void OnClockAdvanced() override { Wake(); }

 private:
  // ---- validation ----------------------------------------------------------------------------

  Status Reject(RejectReason reason, Status status);

  // Everything a request is checked for before admission, in this order (the order of the
  // answers): ValidateFields, check_finite's scan of host q/k/v, CheckSequence. Submit runs the
  // same steps with the scan fused into its copy (CopyCheckingFinite); Decode's in-place route
  // runs Validate.
  Status Validate(const DecodeRequest& r);
  // The request's sizes, layer, priority, timeout and memory kind (with out / lse).
  Status ValidateFields(const DecodeRequest& r);
  // The executor knows r.sequence_id.
  Status CheckSequence(const DecodeRequest& r);

  // ---- the batching thread -------------------------------------------------------------------

  void Wake();

  // Before blocking, the batching thread polls for up to batcher_spin (real time, steady clock
  // only): a request or a completion arriving meanwhile is taken without a futex wake-up of
  // this thread, which costs several microseconds on the latency path.
  void SpinBeforeSleep(ClockNanos wake_at);
  bool Polls() const { return spin_ns_ > 0 && clock_ == SteadyClock::Default(); }

  void Run();

  // Dispatches batches while fewer than max_in_flight batches are in flight and the window says
  // so. Returns how many requests left the pending lists.
  std::int64_t DispatchReady(ClockNanos now, bool flush);

  struct InFlightBatch {
    std::vector<RequestRecord*> records;
    ClockNanos dispatch_ns = 0;
  };

  // Sends the open batch's parts (if any) and selected_ (still in the pending lists) to the
  // executor as one batch.
  void Launch(ClockNanos now, ClockNanos oldest_wait);
  // Hands the next part_size_ pending requests (that can join the open batch) to the executor
  // (Executor::SubmitPart), opening the batch with the first part; returns how many requests
  // left the queue for good (a part the executor refused fails at once).
  std::int64_t HandOverPart(ClockNanos now);
  // Takes `record` (of selected_) out of the pending lists for the executor: false when it was
  // cancelled first (finished as such), else its request in *r.
  bool TakeForExecutor(RequestRecord* record, runtime::BatchRequest* r);
  // When the oldest request waiting for the next batch was submitted: pending, or in its parts.
  ClockNanos OldestWaitingNs() const {
    return std::min(pending_.OldestSubmitNs(), open_oldest_ns_);
  }
  bool WaitingForBatch() const { return !pending_.empty() || open_ != nullptr; }
  // Requests handed over in parts of the batch being formed.
  int Parted() const { return open_ != nullptr ? static_cast<int>(open_->records.size()) : 0; }
  // Submit -> dispatch at `now`, the pass's start: a request taken in the same pass may have
  // been submitted after it (0 then, not a negative wrapped to 2^64).
  static std::uint64_t QueueDelayNs(ClockNanos now, const RequestRecord& record) {
    return static_cast<std::uint64_t>(std::max<ClockNanos>(0, now - record.submit_ns));
  }
  static int ResolvePartSize(int part_size, const runtime::Executor& executor,
                             const BatchingWindow& window) {
    if (part_size != defaults::kPartSizeAuto) return part_size;
    const int preferred = executor.accepts_parts() ? executor.preferred_part_size() : 0;
    return preferred > 0 && window.preferred_sizes().front() >= 2 * preferred ? preferred : 0;
  }

  // Decode's inline route: runs `request` (validated) on the calling thread through
  // Executor::Run, holding dispatch_mu_ (taken by the caller, released here).
  DecodeResult DecodeInline(const DecodeRequest& request) RELEASE(dispatch_mu_);

  // On an executor thread.
  void OnBatchDone(InFlightBatch* batch, std::vector<Status> per_request);

  // ---- completion (pool threads) -------------------------------------------------------------

  // Delivers the batch's requests [begin, end) (their statuses per_request[begin, end)).
  void DeliverBatch(InFlightBatch* batch, std::vector<Status>& per_request, std::size_t begin,
                    std::size_t end);

  void Deliver(RequestRecord* record, Status status);
  // metrics_.latency_ns of n requests delivered at `now` (before their delivery, as the
  // completed count: a caller holding its result sees itself counted).
  void RecordLatencies(RequestRecord* const* records, std::size_t n, ClockNanos now);

  // Requests that end without the executor: grouped per pass, delivered on the pool.
  void Finish(RequestRecord* record, Outcome outcome);

  void PostFinished();

  // ---- idle accounting -----------------------------------------------------------------------

  // Requests admitted and not yet out of the queue (dispatched or finished).
  std::int64_t Depth() const {
    return admitted_.load(std::memory_order_seq_cst) - refused_.load(std::memory_order_seq_cst) -
           left_.load(std::memory_order_seq_cst);
  }
  // A Submit that counted itself in admitted_ and then refused the request.
  void Refuse() {
    refused_.fetch_add(1, std::memory_order_seq_cst);
    if (IdleWaited() && Depth() == 0) NotifyIdle();
  }
  // Batching thread only. It reads the depth (admitted_'s line, which every Submit writes) only
  // while someone waits for idle: reading it each pass took that line from the producers, and
  // their admission's atomic add then missed (~46% of Submit's samples, one producer,
  // scheduler_intake_bench).
  void LeaveQueue(std::int64_t n) {
    left_.fetch_add(n, std::memory_order_seq_cst);
    if (IdleWaited() && Depth() == 0) NotifyIdle();
  }

  void FinishTask() {
    if (completion_tasks_.fetch_sub(1, std::memory_order_seq_cst) == 1 && IdleWaited()) {
      NotifyIdle();
    }
  }

  // Whether a WaitIdle is under way. Sequentially consistent with the counters' updates above
  // and with WaitIdle's announcement: a waiter either sees the update or is seen (WaitIdle's
  // timed wait covers the rest).
  bool IdleWaited() const { return idle_waiters_.load(std::memory_order_seq_cst) > 0; }

  void NotifyIdle() {
    MutexLock lock(&idle_mu_);
    idle_cv_.NotifyAll();
  }

  bool Idle() const {
    return Depth() == 0 &&
           in_flight_.load(std::memory_order_acquire) == 0 &&
           completion_tasks_.load(std::memory_order_acquire) == 0;
  }

  void WaitIdle();

  // Sleeps until woken or the earliest time something can happen without new input. With a
  // `pass` (SchedulerOptions::pass_trace), records it first with that time (kNever: only a
  // wake; `now`: no sleep).
  void Sleep(ClockNanos now, bool closing, BatcherPass* pass);

  // SchedulerOptions::pass_trace: the batching thread's passes in a ring.
  void RecordPass(const BatcherPass& pass) {
    MutexLock lock(&passes_mu_);
    passes_[passes_next_] = pass;
    passes_next_ = (passes_next_ + 1) % passes_.size();
    ++passes_recorded_;
  }

  const SchedulerOptions options_;
  runtime::Executor* const executor_;
  Clock* const clock_;
  const ModelShape shape_;
  const std::size_t q_elems_;
  const std::size_t kv_elems_;
  const BatchingWindow window_;
  const int max_in_flight_;
  const ClockNanos default_timeout_ns_;
  const ClockNanos spin_ns_;
  const int part_size_;  // SchedulerOptions::part_size resolved; 0: whole batches

  internal::RecordPool pool_;
  // The future form's completion state; outlives this scheduler while futures hold some.
  internal::CompletionPool* const completions_ = NewCompletionPool(options_.result_spin);
  IntakeQueue intake_;
  internal::SequenceActivity activity_;
  SchedulerMetrics metrics_;

  // Pipeline accounting (see the file comment); cache lines grouped by writer. Queue depth is
  // admitted_ - refused_ - left_ (monotonic counters: producers never write a line the batching
  // thread writes, and `submitted` comes for free).
  alignas(64) std::atomic<std::int64_t> admitted_{0};  // producers
  alignas(64) std::atomic<std::int64_t> left_{0};      // batching thread
  alignas(64) std::atomic<std::int64_t> refused_{0};   // rare
  std::atomic<std::uint64_t> cancel_epoch_{0};
  alignas(64) std::atomic<int> in_flight_{0};
  std::atomic<std::int64_t> completion_tasks_{0};

  // Read-mostly flags.
  alignas(64) std::atomic<bool> closed_{false};
  std::atomic<bool> flush_{false};
  std::atomic<bool> shutting_down_{false};
  std::atomic<bool> stop_{false};

  // Wake protocol: written by the batching thread before it sleeps, read by producers.
  alignas(64) std::atomic<bool> sleeping_{false};
  std::atomic<std::int64_t> wake_depth_{0};
  std::atomic<ClockNanos> wake_window_before_{kNever};
  std::atomic<ClockNanos> wake_deadline_before_{kNever};
  alignas(64) Mutex mu_;
  CondVar cv_;
  bool wake_flag_ GUARDED_BY(mu_) = false;
  std::atomic<bool> wake_hint_{false};  // set with wake_flag_, read without mu_ while spinning

  // SyncForTesting.
  std::atomic<std::uint64_t> sync_requested_{0};
  Mutex sync_mu_;
  CondVar sync_cv_;
  std::uint64_t sync_done_ GUARDED_BY(sync_mu_) = 0;
  bool stopped_thread_ GUARDED_BY(sync_mu_) = false;

  // Drain / Shutdown.
  Mutex close_mu_;
  bool stopped_ GUARDED_BY(close_mu_) = false;
  Mutex idle_mu_;  // only for idle_cv_'s wait: the counters it watches are atomics
  std::atomic<int> idle_waiters_{0};  // WaitIdle calls under way
  CondVar idle_cv_;

  // Held around every call into the executor's batch path: the batching thread's Submit and
  // Decode's inline Run, which takes it only when it is free and nothing is queued or in flight.
  // A batch handed over in parts takes it for its first part only (HandOverPart).
  alignas(64) Mutex dispatch_mu_;

  // Batching thread only.
  internal::PendingQueue pending_;
  std::vector<RequestRecord*> selected_;
  // The batch handed to the executor in parts so far (part_size_), null when none is open: its
  // records in the order handed over, and the oldest one's submit time (kNever when none).
  std::unique_ptr<InFlightBatch> open_;
  ClockNanos open_oldest_ns_ = kNever;
  std::vector<RequestRecord*> scratch_;
  std::vector<std::uint64_t> queue_delays_;  // Launch's, recorded once a batch
  std::vector<std::pair<RequestRecord*, Status>> finished_;
  int pass_batches_ = 0, pass_dispatched_ = 0;  // Launch's count in the current pass

  // SchedulerOptions::pass_trace (written by the batching thread, read by RecentPasses).
  mutable Mutex passes_mu_;
  std::vector<BatcherPass> passes_ GUARDED_BY(passes_mu_) =
      std::vector<BatcherPass>(static_cast<std::size_t>(options_.pass_trace));
  std::size_t passes_next_ GUARDED_BY(passes_mu_) = 0;
  std::size_t passes_recorded_ GUARDED_BY(passes_mu_) = 0;

  boost::asio::thread_pool completion_pool_;
  std::thread thread_;
};

}  // namespace attnrt::scheduler
