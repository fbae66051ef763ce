// Scheduler (scheduler.h): the public classes, options, start, Drain/Shutdown and idle
// accounting, metrics. The parts and how they share state: scheduler_impl.h.
#include "scheduler/scheduler_impl.h"

#include <string>

namespace attnrt::scheduler {

void Scheduler::Impl::Drain() {
  MutexLock lock(&close_mu_);
  if (stopped_) return;
  closed_.store(true, std::memory_order_seq_cst);
  flush_.store(true, std::memory_order_seq_cst);
  Wake();
  WaitIdle();
}

void Scheduler::Impl::Shutdown() {
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

MetricsSnapshot Scheduler::Impl::Metrics() const {
  MetricsSnapshot s = metrics_.Snapshot();
  s.submitted = static_cast<std::uint64_t>(admitted_.load(std::memory_order_relaxed) -
                                           refused_.load(std::memory_order_relaxed));
  s.pending = Depth();
  s.in_flight_batches = in_flight_.load(std::memory_order_relaxed);
  return s;
}

void Scheduler::Impl::SyncForTesting() {
  const std::uint64_t epoch = sync_requested_.fetch_add(1, std::memory_order_acq_rel) + 1;
  Wake();
  MutexLock lock(&sync_mu_);
  while (sync_done_ < epoch && !stopped_thread_) sync_cv_.Wait(lock);
}

void Scheduler::Impl::WaitIdle() {
  idle_waiters_.fetch_add(1, std::memory_order_seq_cst);
  struct Leave {
    std::atomic<int>* waiters;
    ~Leave() { waiters->fetch_sub(1, std::memory_order_seq_cst); }
  } leave{&idle_waiters_};
  MutexLock lock(&idle_mu_);
  // The timed wait only guards against a notification lost between the counters' updates.
  while (!Idle()) idle_cv_.WaitFor(lock, std::chrono::milliseconds(1));
}

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
  if (o.mapped_staging_bytes < defaults::kMappedStagingAuto) {
    return InvalidArgumentError("mapped_staging_bytes " + std::to_string(o.mapped_staging_bytes) +
                                " must be >= 0, or -1 (auto)");
  }
  if (o.batcher_spin.count() < defaults::kBatcherSpinAuto) {
    return InvalidArgumentError("batcher_spin " + Us(o.batcher_spin) +
                                " must be >= 0, or -1 (auto)");
  }
  if (o.result_spin.count() < defaults::kResultSpinAuto) {
    return InvalidArgumentError("result_spin " + Us(o.result_spin) +
                                " must be >= 0, or -1 (auto)");
  }
  if (o.pass_trace < 0 || o.pass_trace > kMaxPassTrace) {
    return InvalidArgumentError("pass_trace " + std::to_string(o.pass_trace) +
                                " out of range [0, " + std::to_string(kMaxPassTrace) + "]");
  }
  if (o.part_size < defaults::kPartSizeAuto || o.part_size > o.max_batch_size) {
    return InvalidArgumentError("part_size " + std::to_string(o.part_size) +
                                " must be in [0, max_batch_size " +
                                std::to_string(o.max_batch_size) + "], or -1 (auto)");
  }
  if (o.part_size > 0 && !executor->accepts_parts()) {
    return InvalidArgumentError("part_size " + std::to_string(o.part_size) +
                                " needs an executor that takes batches in parts; this one does "
                                "not (0 or -1)");
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

DecodeResult Scheduler::Decode(const DecodeRequest& request) { return impl_->Decode(request); }

std::unique_ptr<Scheduler::Producer> Scheduler::CreateProducer() {
  return std::unique_ptr<Producer>(new Producer(impl_->NewProducerState()));
}

bool Scheduler::Cancel(const RequestHandle& handle) { return impl_->Cancel(handle); }
void Scheduler::Drain() { impl_->Drain(); }
void Scheduler::Shutdown() { impl_->Shutdown(); }
MetricsSnapshot Scheduler::Metrics() const { return impl_->Metrics(); }
std::vector<BatcherPass> Scheduler::RecentPasses() const { return impl_->RecentPasses(); }
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

std::chrono::microseconds ResolveBatcherSpin(std::chrono::microseconds spin,
                                             unsigned hardware_threads) {
  if (spin.count() != defaults::kBatcherSpinAuto) return spin;
  return std::chrono::microseconds(
      hardware_threads >= defaults::kSpinMinHardwareThreads ? defaults::kBatcherSpinUs : 0);
}

ResultSpin ResolveResultSpin(std::chrono::microseconds spin, unsigned hardware_threads) {
  ResultSpin r;
  r.max_spinners = std::max(1, static_cast<int>(hardware_threads /
                                                defaults::kHardwareThreadsPerResultSpinner));
  if (spin.count() != defaults::kResultSpinAuto) {
    r.spin = spin;
  } else {
    r.spin = std::chrono::microseconds(hardware_threads >= defaults::kSpinMinHardwareThreads
                                           ? defaults::kResultSpinUs
                                           : defaults::kResultSpinShortUs);
  }
  return r;
}

}  // namespace attnrt::scheduler
