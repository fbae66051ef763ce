// The scheduler's batching thread (scheduler_impl.h): intake to pending lists, deadlines,
// cancellations, the window, dispatch to the executor, sleeping.
#include "scheduler/scheduler_impl.h"

#if defined(__linux__)
#include <sys/prctl.h>
#endif

#include <boost/asio/post.hpp>
#include <spdlog/spdlog.h>

#include "api/internal/log.h"
#include "api/internal/thread_name.h"

namespace attnrt::scheduler {

void Scheduler::Impl::SpinBeforeSleep(ClockNanos wake_at) {
  if (!Polls()) return;
  const ClockNanos until = std::min(wake_at, clock_->Now() + spin_ns_);
  while (intake_.size_approx() == 0 && !wake_hint_.load(std::memory_order_acquire) &&
         clock_->Now() < until) {
#if defined(__x86_64__)
    __builtin_ia32_pause();
#endif
  }
}

void Scheduler::Impl::Run() {
  attnrt::internal::NameThisThread("attnrt-batcher");
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
    std::int64_t taken = 0;
    pass_batches_ = pass_dispatched_ = 0;
    for (int round = 0; round < kIntakeRoundsPerPass &&
                        (n = intake_.try_dequeue_bulk(consumer, buffer.data(), buffer.size())) > 0;
         ++round) {
      taken += static_cast<std::int64_t>(n);
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
      if (open_ != nullptr) {  // its parts are dispatched: the batch runs
        left_queue += static_cast<std::int64_t>(open_->records.size());
        selected_.clear();
        Launch(now, now - open_oldest_ns_);
      }
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
    if (options_.pass_trace > 0) {
      BatcherPass pass;
      pass.begin_ns = now;
      pass.end_ns = clock_->Now();
      pass.taken = static_cast<std::int32_t>(taken);
      pass.batches = pass_batches_;
      pass.dispatched = pass_dispatched_;
      pass.pending = static_cast<std::int32_t>(pending_.size());
      pass.in_flight = in_flight_.load(std::memory_order_relaxed);
      Sleep(now, shutting_down || flush, &pass);
    } else {
      Sleep(now, shutting_down || flush, nullptr);
    }
  }
  {
    MutexLock lock(&sync_mu_);
    stopped_thread_ = true;
  }
  sync_cv_.NotifyAll();
}

std::int64_t Scheduler::Impl::DispatchReady(ClockNanos now, bool flush) {
  std::int64_t left = 0;
  const int min_preferred = window_.preferred_sizes().front();
  while (WaitingForBatch() && in_flight_.load(std::memory_order_acquire) < max_in_flight_) {
    const int parted = Parted();
    const ClockNanos oldest_wait = now - OldestWaitingNs();
    const bool window_expired = flush || oldest_wait >= window_.max_queue_delay_ns();
    const int waiting = parted + static_cast<int>(pending_.size());
    if (!window_expired && waiting < min_preferred) {
      // Not closing yet: hand what has come over in parts while the batch forms.
      while (part_size_ > 0 && static_cast<int>(pending_.size()) >= part_size_ &&
             Parted() + part_size_ < min_preferred) {
        const int before = Parted();
        left += HandOverPart(now);
        if (Parted() == before) break;  // none could join
      }
      break;
    }
    selected_.clear();
    pending_.Select(window_.max_batch_size() - parted, &selected_, parted > 0,
                    window_.max_batch_size());
    int size = window_.DispatchSize(parted + static_cast<int>(selected_.size()), oldest_wait,
                                    flush);
    if (size == 0) {  // (duplicates of the parts' pairs held the bucket back)
      if (parted > 0) pending_.Unselect(selected_.size());  // they stay free to join later
      break;
    }
    size = std::max(size, parted);  // a batch handed over in parts dispatches whole
    selected_.resize(static_cast<std::size_t>(size - parted));
    left += size;
    Launch(now, oldest_wait);
  }
  return left;
}

bool Scheduler::Impl::TakeForExecutor(RequestRecord* record, runtime::BatchRequest* r) {
  pending_.Remove(record);
  // The last cancellation check: after this CAS the request belongs to the executor.
  std::uint64_t state = record->state.load(std::memory_order_acquire);
  while (true) {
    if (state & internal::kCancelBit) {
      Finish(record, Outcome::kCancelled);
      return false;
    }
    const std::uint64_t dispatched = (state & ~internal::kPhaseMask) | internal::kPhaseDispatched;
    if (record->state.compare_exchange_weak(state, dispatched, std::memory_order_acq_rel)) break;
  }
  *r = runtime::BatchRequest{};
  r->sequence_id = record->sequence_id;
  r->layer = record->layer;
  r->q = record->q;
  r->k = record->k;
  r->v = record->v;
  const bool lse_wanted = record->lse_dest != nullptr || record->want_lse;
  if (record->caller_device) {
    // The caller's own device buffers, read and written in place (validated at Submit: out
    // given, lse given when wanted).
    r->memory = runtime::MemoryKind::kDevice;
    r->q = record->device_q;
    r->k = record->device_k;
    r->v = record->device_v;
    r->out = record->out_dest;
    r->lse = record->lse_dest;
  } else if (record->device_visible) {
    // The device reads q/k/v and writes out/lse in the record's staging; Deliver copies to a
    // caller-given destination (ordinary memory the device may not reach).
    r->memory = runtime::MemoryKind::kDevice;
    r->out = record->out;
    r->lse = lse_wanted ? record->lse : nullptr;
  } else {
    // Caller-given destinations are written by the executor directly (no extra copy).
    r->memory = runtime::MemoryKind::kHost;
    r->out = record->out_dest != nullptr ? record->out_dest : record->out;
    r->lse = record->lse_dest != nullptr ? record->lse_dest
                                         : (lse_wanted ? record->lse : nullptr);
  }
  return true;
}

std::int64_t Scheduler::Impl::HandOverPart(ClockNanos now) {
  selected_.clear();
  pending_.Select(part_size_, &selected_, Parted() > 0, window_.max_batch_size());
  if (static_cast<int>(selected_.size()) < part_size_) {  // duplicates hold the rest back
    pending_.Unselect(selected_.size());
    return 0;
  }
  runtime::Batch part;
  part.requests.reserve(selected_.size());
  queue_delays_.clear();
  std::size_t taken = 0;  // selected_ keeps the requests taken (the cancelled are finished)
  for (RequestRecord* record : selected_) {
    runtime::BatchRequest r;
    if (!TakeForExecutor(record, &r)) continue;
    part.requests.push_back(r);
    selected_[taken++] = record;
    queue_delays_.push_back(QueueDelayNs(now, *record));
  }
  const auto cancelled = static_cast<std::int64_t>(selected_.size() - taken);
  selected_.resize(taken);
  if (taken == 0) return cancelled;
  // The first part opens the batch under dispatch_mu_ (waiting out a Decode running inline);
  // the later parts and the close run without it: the open batch holds the executor's
  // submission lock, which keeps Decode's Run out anyway (and Decode never starts one inline
  // while parts are out: they count in the depth). Taking dispatch_mu_ under that lock would
  // invert the order Decode takes them in.
  Status status;
  if (open_ == nullptr) {
    MutexLock dispatch(&dispatch_mu_);
    status = executor_->SubmitPart(std::move(part));
  } else {
    status = executor_->SubmitPart(std::move(part));
  }
  if (!status.ok()) {  // never expected: the scheduler sizes its parts within the batch
    Logger().error("scheduler: executor refused a part of {}: {}", taken, status.ToString());
    for (RequestRecord* record : selected_) finished_.emplace_back(record, status);
    return cancelled + static_cast<std::int64_t>(taken);
  }
  metrics_.queue_delay_ns.RecordAll(queue_delays_);
  if (open_ == nullptr) {
    open_ = std::make_unique<InFlightBatch>();
    open_->records.reserve(static_cast<std::size_t>(window_.max_batch_size()));
    open_oldest_ns_ = kNever;
  }
  for (RequestRecord* record : selected_) {
    open_->records.push_back(record);
    open_oldest_ns_ = std::min(open_oldest_ns_, record->submit_ns);
  }
  return cancelled;  // the part's own leave the queue when their batch closes
}

void Scheduler::Impl::Launch(ClockNanos now, ClockNanos oldest_wait) {
  const bool in_parts = open_ != nullptr;  // closes a batch handed over in parts
  std::unique_ptr<InFlightBatch> batch_state =
      in_parts ? std::move(open_) : std::make_unique<InFlightBatch>();
  open_oldest_ns_ = kNever;
  runtime::Batch batch;
  batch.requests.reserve(selected_.size());
  batch_state->records.reserve(batch_state->records.size() + selected_.size());
  queue_delays_.clear();
  for (RequestRecord* record : selected_) {
    runtime::BatchRequest r;
    if (!TakeForExecutor(record, &r)) continue;
    batch.requests.push_back(r);
    batch_state->records.push_back(record);
    queue_delays_.push_back(QueueDelayNs(now, *record));
  }
  metrics_.queue_delay_ns.RecordAll(queue_delays_);
  const int size = static_cast<int>(batch_state->records.size());
  if (size == 0) return;
  metrics_.batch_size.Record(size);
  ++pass_batches_;
  pass_dispatched_ += size;
  if (Logger().should_log(spdlog::level::debug)) {
    Logger().debug("scheduler: formed batch size={} bucket={} oldest_wait_us={:.1f} pending={}",
                  size, window_.BucketFor(size), oldest_wait * 1e-3, pending_.size());
  }
  batch_state->dispatch_ns = now;
  in_flight_.fetch_add(1, std::memory_order_acq_rel);
  metrics_.in_flight_requests.fetch_add(size, std::memory_order_relaxed);
  InFlightBatch* raw = batch_state.get();
  auto done = [this, raw](std::vector<Status> per) { OnBatchDone(raw, std::move(per)); };
  Status status;
  if (in_parts) {  // without dispatch_mu_: see HandOverPart
    status = executor_->Submit(std::move(batch), std::move(done));
  } else {
    MutexLock dispatch(&dispatch_mu_);  // waits out a Decode running inline
    status = executor_->Submit(std::move(batch), std::move(done));
  }
  if (status.ok()) {
    batch_state.release();  // owned by the done callback now
    metrics_.batches.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  // (Never with parts handed over: the scheduler's batches are within the executor's size, and
  // a rejected closing Submit would leave them with the executor.)
  Logger().error("scheduler: executor rejected a batch of {}: {}", size, status.ToString());
  completion_tasks_.fetch_add(1, std::memory_order_acq_rel);
  metrics_.in_flight_requests.fetch_sub(size, std::memory_order_relaxed);
  in_flight_.fetch_sub(1, std::memory_order_acq_rel);
  std::vector<Status> per(size, status);
  boost::asio::post(completion_pool_,
                    [this, state = std::shared_ptr<InFlightBatch>(std::move(batch_state)),
                     per = std::move(per)]() mutable {
                      DeliverBatch(state.get(), per, 0, per.size());
                    });
}

void Scheduler::Impl::Finish(RequestRecord* record, Outcome outcome) {
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

void Scheduler::Impl::PostFinished() {
  if (finished_.empty()) return;
  completion_tasks_.fetch_add(1, std::memory_order_acq_rel);
  boost::asio::post(completion_pool_, [this, group = std::move(finished_)]() mutable {
    const ClockNanos now = clock_->Now();
    std::vector<RequestRecord*> records;
    records.reserve(group.size());
    for (auto& [record, status] : group) records.push_back(record);
    RecordLatencies(records.data(), records.size(), now);
    for (auto& [record, status] : group) Deliver(record, std::move(status));
    pool_.ReleaseBulk(records.data(), records.size());
    FinishTask();
  });
  finished_.clear();
}

void Scheduler::Impl::Sleep(ClockNanos now, bool closing, BatcherPass* pass) {
  const bool can_dispatch = in_flight_.load(std::memory_order_acquire) < max_in_flight_;
  ClockNanos window_at = kNever;
  if (can_dispatch && WaitingForBatch()) {
    window_at = OldestWaitingNs() + window_.max_queue_delay_ns();
  }
  const ClockNanos deadline_at = pending_.NextDeadlineNs();
  const ClockNanos wake_at = std::min(window_at, deadline_at);
  // Polling pays only when what can arrive can be dispatched at once: with every batch slot
  // taken the next step waits for a completion, which wakes this thread anyway. While pending
  // requests wait for their window, only the window's last batcher_spin is polled (its expiry
  // kept to the microsecond): the thread sleeps until then, unless a full bucket fills (a
  // producer wakes it). Polling the whole window took a core at max batch 128 (H100: 1.7 us of
  // the batching thread's CPU per device-memory request, 2026-11-26).
  ClockNanos sleep_until = wake_at;
  if (!closing && can_dispatch) {
    const bool window_ahead = WaitingForBatch() && wake_at != kNever && wake_at - now > spin_ns_;
    if (!window_ahead) {
      SpinBeforeSleep(wake_at);
    } else if (Polls()) {
      sleep_until = wake_at - spin_ns_;
    }
  }
  wake_hint_.store(false, std::memory_order_relaxed);
  // What a producer's new request must cross to wake us (see the file comment).
  if (closing) {
    wake_depth_.store(0, std::memory_order_relaxed);
  } else if (can_dispatch && part_size_ > 0) {
    // The next part's worth of new requests, or the full batch (the queue's depth counts the
    // parts handed over until their batch closes).
    wake_depth_.store(std::min<std::int64_t>(window_.preferred_sizes().front(),
                                             Parted() + static_cast<std::int64_t>(pending_.size()) +
                                                 part_size_),
                      std::memory_order_relaxed);
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
  if (pass != nullptr) {
    pass->sleep_until_ns = more_work ? now : sleep_until;
    RecordPass(*pass);
  }
  if (!more_work) {
    MutexLock lock(&mu_);
    const auto real = sleep_until == kNever ? std::nullopt : clock_->RealTimeOf(sleep_until);
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

}  // namespace attnrt::scheduler
