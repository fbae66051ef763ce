// Scheduler: intake (validate, copy into a pooled record, enqueue lock-free), the batching thread
// (drain intake, deadlines, cancellation, window, dispatch with pipelining) and completion on a
// Boost.Asio pool. The semantics are documented in scheduler.h.
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
#include "scheduler/scheduler.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <limits>
#include <mutex>
#include <span>
#include <thread>
#include <utility>
#include <vector>

#if defined(__linux__)
#include <sys/prctl.h>
#endif

#include <boost/asio/post.hpp>
#include <boost/asio/thread_pool.hpp>
#include <spdlog/spdlog.h>

#include "api/internal/log.h"
#include "api/internal/mutex.h"

#include "concurrentqueue.h"
#include "scheduler/batching_window.h"
#include "scheduler/completion.h"
#include "scheduler/handle_access.h"
#include "scheduler/request_queue.h"
#include "scheduler/request_record.h"
#include "scheduler/sequence_activity.h"

namespace attnrt::scheduler {


using internal::Completion;
using internal::HandleAccess;
using internal::RequestRecord;

namespace {

struct IntakeTraits : moodycamel::ConcurrentQueueDefaultTraits {
  static const std::size_t BLOCK_SIZE = 256;
};
using IntakeQueue = moodycamel::ConcurrentQueue<RequestRecord*, IntakeTraits>;

constexpr int kRecordsPerSlab = 256;
constexpr std::size_t kProducerCacheRefill = 32;
constexpr std::size_t kIntakeBulk = 256;
constexpr int kIntakeRoundsPerPass = 16;
constexpr int kMaxPriorityLevels = 16;
constexpr int kMaxCompletionThreads = 64;
constexpr std::size_t kInlineDeliveryMax = 8;  // requests: see OnBatchDone
// Longest timeout: a year, so that deadlines (clock nanoseconds + timeout) cannot overflow.
constexpr std::chrono::microseconds kMaxTimeout = std::chrono::hours(24 * 365);

std::string Us(std::chrono::microseconds us) { return std::to_string(us.count()) + "us"; }

// Index of the first Inf/NaN in `x`, or -1. A branch-free pass first (the compiler vectorises
// it: ~50 ns for 4096 halves), the index only on the rare bad request.
std::ptrdiff_t FirstNonFinite(std::span<const Half> x) {
  constexpr std::uint16_t kExponent = 0x7c00;  // all ones: Inf or NaN
  unsigned bad = 0;
  for (const Half& h : x) bad |= (h.bits & kExponent) == kExponent;
  if (!bad) return -1;
  for (std::size_t i = 0; i < x.size(); ++i) {
    if ((x[i].bits & kExponent) == kExponent) return static_cast<std::ptrdiff_t>(i);
  }
  return -1;
}

// The Status of a request finished without reaching the executor.
enum class Outcome { kCancelled, kTimedOut, kShutDown };

}  // namespace

struct Scheduler::Producer::State {
  State(Scheduler::Impl* impl, IntakeQueue* queue) : impl(impl), token(*queue) {}
  Scheduler::Impl* impl;
  moodycamel::ProducerToken token;
  std::vector<RequestRecord*> cache;
};

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
        spin_ns_(std::chrono::duration_cast<std::chrono::nanoseconds>(options.batcher_spin)
                     .count()),
        // Device-visible staging for the working set: the batches in flight, two more forming,
        // and what the producers' caches hold; a backlog beyond that is staged on the heap.
        pool_(q_elems_, kv_elems_, static_cast<std::size_t>(shape_.num_q_heads), kRecordsPerSlab,
              executor->staging_memory(),
              static_cast<std::size_t>(max_in_flight_ + 2) * options.max_batch_size +
                  internal::RecordPool::kCachedRecords),
        pending_(options.num_priority_levels),
        completion_pool_(static_cast<std::size_t>(options.completion_threads)) {}

  ~Impl() override {
    Shutdown();
    clock_->RemoveListener(this);
    completions_->Orphan();  // deletes itself once every future has let go
  }

  void Start() {
    clock_->AddListener(this);
    thread_ = std::thread([this] { Run(); });
  }

  // ---- intake ---------------------------------------------------------------------------------

  StatusOr<RequestHandle> Submit(const DecodeRequest& request, DoneCallback* done,
                                 ResultFuture* future, Producer::State* producer) {
    if (done != nullptr && !*done) {
      return Reject(RejectReason::kInvalidArgument,
                    InvalidArgumentError("done callback is empty (pass a callable, or use the "
                                         "future form of Submit)"));
    }
    if (Status s = Validate(request); !s.ok()) return s;
    const ClockNanos now = clock_->Now();
    ClockNanos timeout_ns = default_timeout_ns_;
    if (request.timeout) {
      timeout_ns =
          std::chrono::duration_cast<std::chrono::nanoseconds>(*request.timeout).count();
    }

    // Admission: counted before the closed check so that Drain/Shutdown, which set closed_ and
    // then wait for the queue depth to reach zero, cannot miss a request admitted concurrently.
    const std::int64_t admitted = admitted_.fetch_add(1, std::memory_order_seq_cst) + 1;
    const std::int64_t depth = admitted - refused_.load(std::memory_order_relaxed) -
                               left_.load(std::memory_order_relaxed);
    if (closed_.load(std::memory_order_seq_cst)) {
      Refuse();
      metrics_.Reject(RejectReason::kClosed);
      return UnavailableError("scheduler is draining or shut down; request not accepted");
    }
    if (depth > options_.max_queue_size) {
      Refuse();
      metrics_.Reject(RejectReason::kQueueFull);
      return ResourceExhaustedError("queue full: max_queue_size = " +
                                    std::to_string(options_.max_queue_size) +
                                    " requests already queued");
    }

    activity_.Add(request.sequence_id);  // removed in Deliver, before the caller sees the result
    RequestRecord* record;
    if (producer != nullptr) {
      if (producer->cache.empty()) {
        producer->cache.resize(kProducerCacheRefill);
        pool_.AcquireBulk(producer->cache.data(), kProducerCacheRefill);
      }
      record = producer->cache.back();
      producer->cache.pop_back();
    } else {
      record = pool_.Acquire();
    }
    record->sequence_id = request.sequence_id;
    record->layer = request.layer;
    record->priority = request.priority;
    record->submit_ns = now;
    record->deadline_ns = timeout_ns > 0 ? now + timeout_ns : kNever;
    record->out_dest = request.out;
    record->lse_dest = request.lse;
    record->want_lse = request.want_lse;
    std::memcpy(record->q, request.q.data(), q_elems_ * sizeof(Half));
    std::memcpy(record->k, request.k.data(), kv_elems_ * sizeof(Half));
    std::memcpy(record->v, request.v.data(), kv_elems_ * sizeof(Half));
    if (done != nullptr) {
      record->callback = std::move(*done);
    } else {
      record->completion = completions_->Acquire();
      *future = HandleAccess::MakeFuture(record->completion);
    }
    const std::uint64_t generation =
        internal::GenerationOf(record->state.load(std::memory_order_relaxed));
    record->state.store((generation << internal::kGenerationShift) | internal::kPhaseQueued,
                      std::memory_order_relaxed);
    const ClockNanos deadline = record->deadline_ns;  // the record is not ours after the enqueue
    if (producer != nullptr) {
      intake_.enqueue(producer->token, record);
    } else {
      intake_.enqueue(record);
    }

    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (sleeping_.load(std::memory_order_acquire) &&
        (depth >= wake_depth_.load(std::memory_order_relaxed) ||
         now + window_.max_queue_delay_ns() < wake_window_before_.load(std::memory_order_relaxed) ||
         deadline < wake_deadline_before_.load(std::memory_order_relaxed))) {
      Wake();
    }
    return HandleAccess::Make(record, generation);
  }

  bool Cancel(const RequestHandle& handle) {
    RequestRecord* record = HandleAccess::RecordOf(handle);
    if (record == nullptr) return false;
    const std::uint64_t generation = HandleAccess::GenerationOf(handle);
    std::uint64_t state = record->state.load(std::memory_order_acquire);
    while (true) {
      if (internal::GenerationOf(state) != generation ||
          (state & internal::kPhaseMask) != internal::kPhaseQueued) {
        return false;
      }
      if (state & internal::kCancelBit) return true;  // already requested
      if (record->state.compare_exchange_weak(state, state | internal::kCancelBit,
                                            std::memory_order_acq_rel)) {
        break;
      }
    }
    cancel_epoch_.fetch_add(1, std::memory_order_release);
    Wake();
    return true;
  }

  std::unique_ptr<Producer::State> NewProducerState() {
    return std::make_unique<Producer::State>(this, &intake_);
  }

  void ReleaseProducerState(Producer::State* state) {
    if (!state->cache.empty()) pool_.ReleaseBulk(state->cache.data(), state->cache.size());
    state->cache.clear();
  }

  // ---- shutdown ------------------------------------------------------------------------------

  void Drain() {
    MutexLock lock(&close_mu_);
    if (stopped_) return;
    closed_.store(true, std::memory_order_seq_cst);
    flush_.store(true, std::memory_order_seq_cst);
    Wake();
    WaitIdle();
  }

  void Shutdown() {
    MutexLock lock(&close_mu_);
    if (stopped_) return;
    closed_.store(true, std::memory_order_seq_cst);
    shutting_down_.store(true, std::memory_order_seq_cst);
    Wake();
    WaitIdle();
    executor_->Wait();  // every done callback has returned
    stop_.store(true, std::memory_order_seq_cst);
    Wake();
    if (thread_.joinable()) thread_.join();
    completion_pool_.join();
    stopped_ = true;
  }

  // ---- observability -------------------------------------------------------------------------

  MetricsSnapshot Metrics() const {
    MetricsSnapshot s = metrics_.Snapshot();
    s.submitted = static_cast<std::uint64_t>(admitted_.load(std::memory_order_relaxed) -
                                             refused_.load(std::memory_order_relaxed));
    s.pending = Depth();
    s.in_flight_batches = in_flight_.load(std::memory_order_relaxed);
    return s;
  }

  void SyncForTesting() {
    const std::uint64_t epoch = sync_requested_.fetch_add(1, std::memory_order_acq_rel) + 1;
    Wake();
    MutexLock lock(&sync_mu_);
    while (sync_done_ < epoch && !stopped_thread_) sync_cv_.Wait(lock);
  }

  const SchedulerOptions& options() const { return options_; }

  template <typename Fn>
  Status RunIfSequenceIdle(SequenceId id, const char* call, Fn&& fn) {
    return activity_.RunIfIdle(id, call, std::forward<Fn>(fn));
  }

  void OnClockAdvanced() override { Wake(); }

 private:
  // ---- validation ----------------------------------------------------------------------------

  Status Reject(RejectReason reason, Status status) {
    metrics_.Reject(reason);
    return status;
  }

  Status Validate(const DecodeRequest& r) {
    if (r.q.size() != q_elems_) {
      return Reject(RejectReason::kInvalidArgument,
                    InvalidArgumentError("q has " + std::to_string(r.q.size()) +
                                         " elements, expected H*D = " + std::to_string(q_elems_)));
    }
    if (r.k.size() != kv_elems_) {
      return Reject(RejectReason::kInvalidArgument,
                    InvalidArgumentError("k has " + std::to_string(r.k.size()) +
                                         " elements, expected Hkv*D = " +
                                         std::to_string(kv_elems_)));
    }
    if (r.v.size() != kv_elems_) {
      return Reject(RejectReason::kInvalidArgument,
                    InvalidArgumentError("v has " + std::to_string(r.v.size()) +
                                         " elements, expected Hkv*D = " +
                                         std::to_string(kv_elems_)));
    }
    if (r.layer < 0 || r.layer >= shape_.num_layers) {
      return Reject(RejectReason::kInvalidArgument,
                    InvalidArgumentError("layer " + std::to_string(r.layer) +
                                         " out of range [0, " +
                                         std::to_string(shape_.num_layers) + ")"));
    }
    if (r.priority < 0 || r.priority >= options_.num_priority_levels) {
      return Reject(RejectReason::kInvalidArgument,
                    InvalidArgumentError("priority " + std::to_string(r.priority) +
                                         " out of range [0, " +
                                         std::to_string(options_.num_priority_levels) + ")"));
    }
    if (r.timeout) {
      if (r.timeout->count() <= 0 || *r.timeout > kMaxTimeout) {
        return Reject(RejectReason::kInvalidArgument,
                      InvalidArgumentError("timeout " + Us(*r.timeout) + " must be > 0 and <= " +
                                           Us(kMaxTimeout)));
      }
      if (options_.default_timeout.count() > 0 && *r.timeout > options_.default_timeout) {
        return Reject(RejectReason::kInvalidArgument,
                      InvalidArgumentError("timeout " + Us(*r.timeout) +
                                           " exceeds default_timeout " +
                                           Us(options_.default_timeout) +
                                           " (a request may only shorten it)"));
      }
    }
    if (options_.check_finite) {
      for (auto [name, span] : {std::pair{"q", r.q}, std::pair{"k", r.k}, std::pair{"v", r.v}}) {
        if (const std::ptrdiff_t i = FirstNonFinite(span); i >= 0) {
          return Reject(RejectReason::kNonFinite,
                        InvalidArgumentError(std::string(name) +
                                             " holds a non-finite value at element " +
                                             std::to_string(i)));
        }
      }
    }
    if (!executor_->HasSequence(r.sequence_id)) {
      return Reject(RejectReason::kUnknownSequence,
                    NotFoundError("sequence_id " + std::to_string(r.sequence_id) +
                                  " is unknown to the executor"));
    }
    return Status::Ok();
  }

  // ---- the batching thread -------------------------------------------------------------------

  void Wake() {
    {
      MutexLock lock(&mu_);
      wake_flag_ = true;
    }
    wake_hint_.store(true, std::memory_order_release);
    cv_.NotifyOne();
  }

  // Before blocking, the batching thread polls for up to batcher_spin (real time, steady clock
  // only): a request or a completion arriving meanwhile is taken without a futex wake-up of
  // this thread, which costs several microseconds on the latency path.
  void SpinBeforeSleep(ClockNanos wake_at) {
    if (spin_ns_ <= 0 || clock_ != SteadyClock::Default()) return;
    const ClockNanos until = std::min(wake_at, clock_->Now() + spin_ns_);
    while (intake_.size_approx() == 0 && !wake_hint_.load(std::memory_order_acquire) &&
           clock_->Now() < until) {
#if defined(__x86_64__)
      __builtin_ia32_pause();
#endif
    }
  }

  void Run() {
#if defined(__linux__)
    prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);  // 1 us: the window is tens of microseconds
#endif
    moodycamel::ConsumerToken consumer(intake_);
    std::vector<RequestRecord*> buffer(kIntakeBulk);
    std::uint64_t seen_cancel_epoch = 0;
    while (true) {
      const std::uint64_t sync_epoch = sync_requested_.load(std::memory_order_acquire);
      const bool shutting_down = shutting_down_.load(std::memory_order_seq_cst);
      const bool flush = flush_.load(std::memory_order_seq_cst);
      const ClockNanos now = clock_->Now();
      std::int64_t left_queue = 0;

      // 1. Intake -> pending lists (or straight to a final outcome).
      // Bounded per pass so a flood of submissions cannot starve dispatch.
      std::size_t n;
      for (int round = 0; round < kIntakeRoundsPerPass &&
                          (n = intake_.try_dequeue_bulk(consumer, buffer.data(), buffer.size())) > 0;
           ++round) {
        for (std::size_t i = 0; i < n; ++i) {
          RequestRecord* record = buffer[i];
          const std::uint64_t state = record->state.load(std::memory_order_acquire);
          if (state & internal::kCancelBit) {
            Finish(record, Outcome::kCancelled);
            ++left_queue;
          } else if (record->deadline_ns <= now) {
            Finish(record, Outcome::kTimedOut);
            ++left_queue;
          } else {
            pending_.Push(record);
          }
        }
      }
      // 2. Cancellations of pending requests.
      const std::uint64_t cancel_epoch = cancel_epoch_.load(std::memory_order_acquire);
      if (cancel_epoch != seen_cancel_epoch) {
        seen_cancel_epoch = cancel_epoch;
        scratch_.clear();
        pending_.TakeIf(
            [](RequestRecord* s) {
              return (s->state.load(std::memory_order_acquire) & internal::kCancelBit) != 0;
            },
            &scratch_);
        for (RequestRecord* s : scratch_) Finish(s, Outcome::kCancelled);
        left_queue += static_cast<std::int64_t>(scratch_.size());
      }
      // 3. Deadlines.
      scratch_.clear();
      pending_.TakeExpired(now, &scratch_);
      for (RequestRecord* s : scratch_) Finish(s, Outcome::kTimedOut);
      left_queue += static_cast<std::int64_t>(scratch_.size());
      // 4. Shutdown fails everything still queued; otherwise dispatch by the window.
      if (shutting_down) {
        scratch_.clear();
        pending_.TakeIf([](RequestRecord*) { return true; }, &scratch_);
        for (RequestRecord* s : scratch_) Finish(s, Outcome::kShutDown);
        left_queue += static_cast<std::int64_t>(scratch_.size());
      } else {
        left_queue += DispatchReady(now, flush);
      }
      PostFinished();
      if (left_queue > 0) LeaveQueue(left_queue);

      {
        MutexLock lock(&sync_mu_);
        sync_done_ = sync_epoch;
      }
      sync_cv_.NotifyAll();
      if (stop_.load(std::memory_order_seq_cst)) break;
      Sleep(now, shutting_down || flush);
    }
    {
      MutexLock lock(&sync_mu_);
      stopped_thread_ = true;
    }
    sync_cv_.NotifyAll();
  }

  // Dispatches batches while fewer than max_in_flight batches are in flight and the window says
  // so. Returns how many requests left the pending lists.
  std::int64_t DispatchReady(ClockNanos now, bool flush) {
    std::int64_t left = 0;
    const int min_preferred = window_.preferred_sizes().front();
    while (!pending_.empty() && in_flight_.load(std::memory_order_acquire) < max_in_flight_) {
      const ClockNanos oldest_wait = now - pending_.OldestSubmitNs();
      const bool window_expired = flush || oldest_wait >= window_.max_queue_delay_ns();
      if (!window_expired && static_cast<int>(pending_.size()) < min_preferred) break;
      selected_.clear();
      pending_.Select(window_.max_batch_size(), &selected_);
      const int size =
          window_.DispatchSize(static_cast<int>(selected_.size()), oldest_wait, flush);
      if (size == 0) break;
      selected_.resize(size);
      left += size;
      Launch(now, oldest_wait);
    }
    return left;
  }

  struct InFlightBatch {
    std::vector<RequestRecord*> records;
    ClockNanos dispatch_ns = 0;
  };

  // Sends selected_ (still in the pending lists) to the executor.
  void Launch(ClockNanos now, ClockNanos oldest_wait) {
    auto batch_state = std::make_unique<InFlightBatch>();
    runtime::Batch batch;
    batch.requests.reserve(selected_.size());
    batch_state->records.reserve(selected_.size());
    for (RequestRecord* record : selected_) {
      pending_.Remove(record);
      // The last cancellation check: after this CAS the request belongs to the executor.
      std::uint64_t state = record->state.load(std::memory_order_acquire);
      bool cancelled = false;
      while (true) {
        if (state & internal::kCancelBit) {
          cancelled = true;
          break;
        }
        const std::uint64_t dispatched =
            (state & ~internal::kPhaseMask) | internal::kPhaseDispatched;
        if (record->state.compare_exchange_weak(state, dispatched, std::memory_order_acq_rel)) {
          break;
        }
      }
      if (cancelled) {
        Finish(record, Outcome::kCancelled);
        continue;
      }
      runtime::BatchRequest r;
      r.sequence_id = record->sequence_id;
      r.layer = record->layer;
      r.q = record->q;
      r.k = record->k;
      r.v = record->v;
      const bool lse_wanted = record->lse_dest != nullptr || record->want_lse;
      if (record->device_visible) {
        // The device reads q/k/v and writes out/lse in the record's staging; Deliver copies to a
        // caller-given destination (ordinary memory the device may not reach).
        r.memory = runtime::MemoryKind::kDevice;
        r.out = record->out;
        r.lse = lse_wanted ? record->lse : nullptr;
      } else {
        // Caller-given destinations are written by the executor directly (no extra copy).
        r.memory = runtime::MemoryKind::kHost;
        r.out = record->out_dest != nullptr ? record->out_dest : record->out;
        r.lse = record->lse_dest != nullptr ? record->lse_dest
                                            : (lse_wanted ? record->lse : nullptr);
      }
      batch.requests.push_back(r);
      batch_state->records.push_back(record);
      metrics_.queue_delay_ns.Record(static_cast<std::uint64_t>(now - record->submit_ns));
    }
    const int size = static_cast<int>(batch_state->records.size());
    if (size == 0) return;
    metrics_.batch_size.Record(size);
    if (Logger().should_log(spdlog::level::debug)) {
      Logger().debug("scheduler: formed batch size={} bucket={} oldest_wait_us={:.1f} pending={}",
                    size, window_.BucketFor(size), oldest_wait * 1e-3, pending_.size());
    }
    batch_state->dispatch_ns = now;
    in_flight_.fetch_add(1, std::memory_order_acq_rel);
    metrics_.in_flight_requests.fetch_add(size, std::memory_order_relaxed);
    InFlightBatch* raw = batch_state.get();
    Status status = executor_->Submit(std::move(batch), [this, raw](std::vector<Status> per) {
      OnBatchDone(raw, std::move(per));
    });
    if (status.ok()) {
      batch_state.release();  // owned by the done callback now
      metrics_.batches.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    Logger().error("scheduler: executor rejected a batch of {}: {}", size, status.ToString());
    completion_tasks_.fetch_add(1, std::memory_order_acq_rel);
    metrics_.in_flight_requests.fetch_sub(size, std::memory_order_relaxed);
    in_flight_.fetch_sub(1, std::memory_order_acq_rel);
    std::vector<Status> per(size, status);
    boost::asio::post(completion_pool_,
                      [this, state = std::shared_ptr<InFlightBatch>(std::move(batch_state)),
                       per = std::move(per)]() mutable { DeliverBatch(state.get(), per); });
  }

  // On an executor thread.
  void OnBatchDone(InFlightBatch* batch, std::vector<Status> per_request) {
    std::unique_ptr<InFlightBatch> owned(batch);
    metrics_.executor_time_ns.Record(static_cast<std::uint64_t>(clock_->Now() - batch->dispatch_ns));
    const std::size_t size = owned->records.size();
    if (per_request.size() != size) {
      per_request.assign(size, InternalError("executor reported " +
                                             std::to_string(per_request.size()) +
                                             " statuses for a batch of " + std::to_string(size)));
    }
    completion_tasks_.fetch_add(1, std::memory_order_acq_rel);
    // A small batch of futures only is delivered here: fulfilling a future runs no user code, and
    // it saves the hand-off to a pool thread (a wake-up, several microseconds) on the latency
    // path. Callbacks, and large batches, go to the pool.
    const bool inline_delivery =
        size <= kInlineDeliveryMax &&
        std::none_of(owned->records.begin(), owned->records.end(),
                     [](const RequestRecord* r) { return static_cast<bool>(r->callback); });
    if (!inline_delivery) {
      boost::asio::post(completion_pool_, [this, state = std::shared_ptr<InFlightBatch>(
                                                     std::move(owned)),
                                           per = std::move(per_request)]() mutable {
        DeliverBatch(state.get(), per);
      });
    }
    metrics_.in_flight_requests.fetch_sub(static_cast<std::int64_t>(size),
                                          std::memory_order_relaxed);
    {
      MutexLock lock(&mu_);
      in_flight_.fetch_sub(1, std::memory_order_acq_rel);
      wake_flag_ = true;
    }
    wake_hint_.store(true, std::memory_order_release);
    cv_.NotifyOne();
    if (inline_delivery) DeliverBatch(owned.get(), per_request);
  }

  // ---- completion (pool threads) -------------------------------------------------------------

  void DeliverBatch(InFlightBatch* batch, std::vector<Status>& per_request) {
    const ClockNanos now = clock_->Now();
    // Counted before delivery, so a caller holding its result sees itself counted.
    std::uint64_t failed = 0;
    for (const Status& s : per_request) failed += s.ok() ? 0 : 1;
    metrics_.completed.fetch_add(batch->records.size(), std::memory_order_relaxed);
    if (failed) metrics_.failed.fetch_add(failed, std::memory_order_relaxed);
    for (std::size_t i = 0; i < batch->records.size(); ++i) {
      Deliver(batch->records[i], std::move(per_request[i]), now);
    }
    pool_.ReleaseBulk(batch->records.data(), batch->records.size());
    FinishTask();
  }

  void Deliver(RequestRecord* record, Status status, ClockNanos now) {
    DecodeResult result;
    if (status.ok()) {
      if (record->device_visible && record->out_dest != nullptr) {
        std::memcpy(record->out_dest, record->out, q_elems_ * sizeof(Half));
      }
      if (record->device_visible && record->lse_dest != nullptr) {
        std::memcpy(record->lse_dest, record->lse, shape_.num_q_heads * sizeof(float));
      }
      // resize + memcpy: Half is not trivial (default member initialiser), so assign() would
      // copy element by element.
      if (record->out_dest == nullptr) {
        result.output.resize(q_elems_);
        std::memcpy(result.output.data(), record->out, q_elems_ * sizeof(Half));
      }
      if (record->lse_dest == nullptr && record->want_lse) {
        result.lse.assign(record->lse, record->lse + shape_.num_q_heads);
      }
    }
    result.status = std::move(status);
    activity_.Remove(record->sequence_id);
    // From here on Cancel() of this request returns false.
    record->state.fetch_or(internal::kPhaseDone, std::memory_order_acq_rel);
    metrics_.latency_ns.Record(static_cast<std::uint64_t>(std::max<ClockNanos>(0, now - record->submit_ns)));
    if (record->callback) {
      try {
        record->callback(std::move(result));
      } catch (const std::exception& e) {
        Logger().error("scheduler: a done callback threw: {}", e.what());
      } catch (...) {
        Logger().error("scheduler: a done callback threw a non-std exception");
      }
      record->callback = nullptr;
    } else {
      completions_->Fulfil(record->completion, std::move(result));
      record->completion = nullptr;
    }
  }

  // Requests that end without the executor: grouped per pass, delivered on the pool.
  void Finish(RequestRecord* record, Outcome outcome) {
    // Claim the request (Cancel() returns false from here on); a cancel that got in first wins,
    // so a true Cancel() always means a Cancelled result.
    const std::uint64_t before =
        record->state.fetch_or(internal::kPhaseDone, std::memory_order_acq_rel);
    if (before & internal::kCancelBit) outcome = Outcome::kCancelled;
    switch (outcome) {
      case Outcome::kCancelled:
        metrics_.cancelled.fetch_add(1, std::memory_order_relaxed);
        finished_.emplace_back(record, CancelledError("request cancelled before dispatch"));
        break;
      case Outcome::kTimedOut:
        metrics_.timed_out.fetch_add(1, std::memory_order_relaxed);
        finished_.emplace_back(
            record, DeadlineExceededError(
                      "request (sequence_id " + std::to_string(record->sequence_id) + ", layer " +
                      std::to_string(record->layer) + ") passed its deadline of " +
                      std::to_string((record->deadline_ns - record->submit_ns) / 1000) +
                      "us before dispatch"));
        break;
      case Outcome::kShutDown:
        metrics_.shut_down.fetch_add(1, std::memory_order_relaxed);
        finished_.emplace_back(record, UnavailableError("scheduler shut down before dispatch"));
        break;
    }
  }

  void PostFinished() {
    if (finished_.empty()) return;
    completion_tasks_.fetch_add(1, std::memory_order_acq_rel);
    boost::asio::post(completion_pool_, [this, group = std::move(finished_)]() mutable {
      const ClockNanos now = clock_->Now();
      std::vector<RequestRecord*> records;
      records.reserve(group.size());
      for (auto& [record, status] : group) {
        Deliver(record, std::move(status), now);
        records.push_back(record);
      }
      pool_.ReleaseBulk(records.data(), records.size());
      FinishTask();
    });
    finished_.clear();
  }

  // ---- idle accounting -----------------------------------------------------------------------

  // Requests admitted and not yet out of the queue (dispatched or finished).
  std::int64_t Depth() const {
    return admitted_.load(std::memory_order_seq_cst) - refused_.load(std::memory_order_seq_cst) -
           left_.load(std::memory_order_seq_cst);
  }
  // A Submit that counted itself in admitted_ and then refused the request.
  void Refuse() {
    refused_.fetch_add(1, std::memory_order_seq_cst);
    if (Depth() == 0) NotifyIdle();
  }
  // Batching thread only.
  void LeaveQueue(std::int64_t n) {
    left_.fetch_add(n, std::memory_order_seq_cst);
    if (Depth() == 0) NotifyIdle();
  }

  void FinishTask() {
    if (completion_tasks_.fetch_sub(1, std::memory_order_acq_rel) == 1) NotifyIdle();
  }

  void NotifyIdle() {
    MutexLock lock(&idle_mu_);
    idle_cv_.NotifyAll();
  }

  bool Idle() const {
    return Depth() == 0 &&
           in_flight_.load(std::memory_order_acquire) == 0 &&
           completion_tasks_.load(std::memory_order_acquire) == 0;
  }

  void WaitIdle() {
    MutexLock lock(&idle_mu_);
    // The timed wait only guards against a notification lost between the counters' updates.
    while (!Idle()) idle_cv_.WaitFor(lock, std::chrono::milliseconds(1));
  }

  // Sleeps until woken or the earliest time something can happen without new input.
  void Sleep(ClockNanos now, bool closing) {
    const bool can_dispatch = in_flight_.load(std::memory_order_acquire) < max_in_flight_;
    ClockNanos window_at = kNever;
    if (can_dispatch && !pending_.empty()) {
      window_at = pending_.OldestSubmitNs() + window_.max_queue_delay_ns();
    }
    const ClockNanos deadline_at = pending_.NextDeadlineNs();
    const ClockNanos wake_at = std::min(window_at, deadline_at);
    if (!closing) SpinBeforeSleep(wake_at);
    wake_hint_.store(false, std::memory_order_relaxed);
    // What a producer's new request must cross to wake us (see the file comment).
    if (closing) {
      wake_depth_.store(0, std::memory_order_relaxed);
    } else if (can_dispatch) {
      wake_depth_.store(window_.preferred_sizes().front(), std::memory_order_relaxed);
    } else {
      wake_depth_.store(std::numeric_limits<std::int64_t>::max(), std::memory_order_relaxed);
    }
    wake_window_before_.store(can_dispatch ? window_at : std::numeric_limits<std::int64_t>::min(),
                              std::memory_order_relaxed);
    wake_deadline_before_.store(deadline_at, std::memory_order_relaxed);
    sleeping_.store(true, std::memory_order_seq_cst);
    std::atomic_thread_fence(std::memory_order_seq_cst);

    // Cancel, completions, Drain/Shutdown and clock advances always Wake() (wake_flag_); only
    // producers rely on this re-check.
    const bool more_work = intake_.size_approx() > 0 || (wake_at != kNever && wake_at <= now);
    if (!more_work) {
      MutexLock lock(&mu_);
      const auto real = wake_at == kNever ? std::nullopt : clock_->RealTimeOf(wake_at);
      while (!wake_flag_) {
        if (!real) {
          cv_.Wait(lock);
        } else if (cv_.WaitUntil(lock, *real) == std::cv_status::timeout) {
          break;
        }
      }
      wake_flag_ = false;
    }
    sleeping_.store(false, std::memory_order_relaxed);
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

  internal::RecordPool pool_;
  // The future form's completion state; outlives this scheduler while futures hold some.
  internal::CompletionPool* const completions_ = new internal::CompletionPool();
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
  CondVar idle_cv_;

  // Batching thread only.
  internal::PendingQueue pending_;
  std::vector<RequestRecord*> selected_;
  std::vector<RequestRecord*> scratch_;
  std::vector<std::pair<RequestRecord*, Status>> finished_;

  boost::asio::thread_pool completion_pool_;
  std::thread thread_;
};

// ---- Scheduler --------------------------------------------------------------------------------

namespace {

Status ValidateOptions(const SchedulerOptions& o, runtime::Executor* executor) {
  if (executor == nullptr) return InvalidArgumentError("executor is null");
  const int executor_max = executor->max_batch_size();
  if (o.max_batch_size < 1 || o.max_batch_size > executor_max) {
    return InvalidArgumentError("max_batch_size " + std::to_string(o.max_batch_size) +
                                " out of range [1, " + std::to_string(executor_max) +
                                "] (the executor's max_batch_size)");
  }
  if (o.min_batch_size < 0 || o.min_batch_size > o.max_batch_size) {
    return InvalidArgumentError("min_batch_size " + std::to_string(o.min_batch_size) +
                                " out of range [0, max_batch_size = " +
                                std::to_string(o.max_batch_size) + "]");
  }
  if (o.max_queue_delay.count() < 0) {
    return InvalidArgumentError("max_queue_delay " + Us(o.max_queue_delay) + " must be >= 0");
  }
  if (o.max_queue_size < 1) {
    return InvalidArgumentError("max_queue_size " + std::to_string(o.max_queue_size) +
                                " must be >= 1");
  }
  if (o.default_timeout.count() < 0 || o.default_timeout > kMaxTimeout) {
    return InvalidArgumentError("default_timeout " + Us(o.default_timeout) +
                                " must be >= 0 (0 = none) and <= " + Us(kMaxTimeout));
  }
  if (o.num_priority_levels < 1 || o.num_priority_levels > kMaxPriorityLevels) {
    return InvalidArgumentError("num_priority_levels " + std::to_string(o.num_priority_levels) +
                                " out of range [1, " + std::to_string(kMaxPriorityLevels) + "]");
  }
  if (o.completion_threads < 1 || o.completion_threads > kMaxCompletionThreads) {
    return InvalidArgumentError("completion_threads " + std::to_string(o.completion_threads) +
                                " out of range [1, " + std::to_string(kMaxCompletionThreads) +
                                "]");
  }
  if (o.batcher_spin.count() < 0) {
    return InvalidArgumentError("batcher_spin " + Us(o.batcher_spin) + " must be >= 0");
  }
  if (executor->max_in_flight() < 1) {
    return InvalidArgumentError("executor max_in_flight " +
                                std::to_string(executor->max_in_flight()) + " must be >= 1");
  }
  return executor->shape().Validate();
}

}  // namespace

StatusOr<std::unique_ptr<Scheduler>> Scheduler::Create(const SchedulerOptions& options,
                                                       runtime::Executor* executor,
                                                       Clock* clock) {
  ATTNRT_RETURN_IF_ERROR(ValidateOptions(options, executor));
  if (clock == nullptr) clock = SteadyClock::Default();
  auto impl = std::make_unique<Impl>(options, executor, clock);
  impl->Start();
  return std::unique_ptr<Scheduler>(new Scheduler(std::move(impl)));
}

Scheduler::Scheduler(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Scheduler::~Scheduler() = default;

StatusOr<Submission> Scheduler::Submit(const DecodeRequest& request) {
  Submission submission;
  ATTNRT_ASSIGN_OR_RETURN(submission.handle,
                          impl_->Submit(request, nullptr, &submission.result, nullptr));
  return submission;
}

StatusOr<RequestHandle> Scheduler::Submit(const DecodeRequest& request, DoneCallback done) {
  return impl_->Submit(request, &done, nullptr, nullptr);
}

std::unique_ptr<Scheduler::Producer> Scheduler::CreateProducer() {
  return std::unique_ptr<Producer>(new Producer(impl_->NewProducerState()));
}

bool Scheduler::Cancel(const RequestHandle& handle) { return impl_->Cancel(handle); }
void Scheduler::Drain() { impl_->Drain(); }
void Scheduler::Shutdown() { impl_->Shutdown(); }
MetricsSnapshot Scheduler::Metrics() const { return impl_->Metrics(); }
std::string Scheduler::PrometheusText() const {
  return scheduler::PrometheusText(impl_->Metrics());
}
const SchedulerOptions& Scheduler::options() const { return impl_->options(); }
Status Scheduler::RunIfSequenceIdle(SequenceId id, const char* call,
                                    const std::function<Status()>& fn) {
  return impl_->RunIfSequenceIdle(id, call, fn);
}
void Scheduler::SyncForTesting() { impl_->SyncForTesting(); }

Scheduler::Producer::Producer(std::unique_ptr<State> state) : state_(std::move(state)) {}
Scheduler::Producer::~Producer() { state_->impl->ReleaseProducerState(state_.get()); }

StatusOr<Submission> Scheduler::Producer::Submit(const DecodeRequest& request) {
  Submission submission;
  ATTNRT_ASSIGN_OR_RETURN(submission.handle, state_->impl->Submit(request, nullptr,
                                                                  &submission.result,
                                                                  state_.get()));
  return submission;
}

StatusOr<RequestHandle> Scheduler::Producer::Submit(const DecodeRequest& request,
                                                    DoneCallback done) {
  return state_->impl->Submit(request, &done, nullptr, state_.get());
}

}  // namespace attnrt::scheduler
