// The request scheduler: the public face of scheduler/. Turns decode requests submitted one at a
// time from many threads into well-filled batches for a runtime::Executor, without adding latency
// of its own. Knows nothing of CUDA or kernels: it depends on runtime/executor.h only.
//
// ---------------------------------------------------------------------------------------------
// Life of a request
//   Submit (any thread) validates the request, copies q/k/v into scheduler-owned staging (so the
//   caller's buffers are free on return) and pushes it onto a lock-free moodycamel queue. One
//   batching thread drains that queue into per-priority FIFO lists, applies deadlines and
//   cancellations, forms batches by the window below and hands them to the executor, keeping up
//   to executor->max_in_flight() batches in flight (batch i+1 is formed while batch i runs).
//   Callbacks run on a Boost.Asio thread pool (completion_threads), never on the batching
//   thread: a slow or blocking callback delays only the completions queued behind it on its
//   pool thread, never batching. Small batches of future-form requests are completed on the
//   executor's completion thread (a promise runs no user code), one thread hand-off fewer.
//
// Validation at Submit (a rejected request is not enqueued; no callback runs; the Status names
// the field and its value): q has H*D elements, k and v Hkv*D (H, Hkv, D from the executor's
// ModelShape); 0 <= layer < num_layers; 0 <= priority < num_priority_levels; timeout > 0 and
// not longer than default_timeout; the sequence is known to the executor (HasSequence); with
// check_finite, no Inf/NaN in q, k or v (host memory only); memory kDevice only on an executor
// that accepts device memory, with `out` (and `lse` when want_lse) given. Then: Unavailable
// once Drain() or Shutdown() has begun; ResourceExhausted when max_queue_size requests are
// already queued.
//
// Batching window (semantics of Triton's dynamic batcher: max_queue_delay_microseconds with the
// executor's graph buckets as preferred batch sizes). Let `full bucket` be the largest executor
// bucket <= max_batch_size (max_batch_size itself when the executor reports no buckets), and the
// `preferred sizes` the executor buckets in [min_batch_size, max_batch_size] plus the full bucket
// (just the full bucket when min_batch_size is 0, the default). Whenever fewer than the
// executor's max_in_flight() batches are in flight:
//   1. if the pending requests fill a preferred size, the largest such batch dispatches at once
//      (in particular a full bucket never waits);
//   2. else, once the oldest pending request has waited max_queue_delay, everything pending (up
//      to max_batch_size) dispatches; min_batch_size is honoured only within the delay, never
//      past it. max_queue_delay = 0 therefore means "dispatch whatever is there";
//   3. else the batcher waits (for more requests, the delay, or a deadline).
//   When max_in_flight() batches are in flight nothing dispatches; requests keep joining the next
//   batch.
//   Batches in parts (part_size): while a batch that can dispatch waits for a full bucket, the
//   batching thread hands its requests to the executor part_size at a time as they arrive
//   (Executor::SubmitPart: the executor validates them and appends their tokens then), and the
//   rest when the batch closes by rule 1 or 2, so that closing leaves the executor only the
//   last part's work. A request handed over in a part is dispatched from then on (Cancel
//   returns false, its deadline no longer applies) though it still counts against
//   max_queue_size until its batch closes; the batch it joined always dispatches whole.
//   Requests are taken by strict priority (0 first), FIFO inside a level. A batch never holds two
//   requests of one (sequence, layer): the later one stays pending for a later batch, so
//   per-sequence order holds; requests of different layers share batches freely. The executor
//   pads a batch up to its bucket.
//   Order, precisely: two requests of one (sequence, layer) run in submission order when they
//   are submitted from one thread (or one Producer) at one priority level. The intake queue is
//   FIFO per producer, not across producers, so requests of one (sequence, layer) submitted from
//   different threads are ordered only if the later Submit starts after the earlier request has
//   completed (as autoregressive decoding does: the next token needs this one's output). A
//   later request of higher priority may overtake.
//
// Queue policy
//   - max_queue_size bounds the requests admitted but not yet dispatched (in-flight ones do not
//     count); Submit past it returns ResourceExhausted at once.
//   - Deadlines: default_timeout (0 = none) or a shorter per-request timeout, measured from
//     Submit. A request still queued at its deadline completes with DeadlineExceeded; one already
//     dispatched runs to completion.
//   - Cancel(handle): a request not yet dispatched completes with Cancelled (checked when it is
//     dequeued and again just before the batch goes to the executor); once dispatched, Cancel
//     returns false and the request completes normally.
//
// Completion: every accepted request completes exactly once, with the executor's result or a
// Status (DeadlineExceeded, Cancelled, Unavailable, or the executor's error); nothing is dropped.
// A callback that throws is caught and logged (spdlog error) and counts as delivered.
//
// Shutdown
//   - Drain(): stops intake (later Submits return Unavailable), dispatches everything queued
//     without waiting for the window, and returns when every admitted request has completed.
//   - Shutdown(): stops intake, completes every request still queued with Unavailable, waits for
//     the in-flight batches, then stops the threads. The destructor calls Shutdown().
//
// Observability: Metrics() (counters, gauges, histograms with percentiles), PrometheusText(),
// and an spdlog debug line per formed batch (size, bucket, oldest wait).
// ---------------------------------------------------------------------------------------------
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include <attnrt/config.h>
#include <attnrt/status.h>
#include "runtime/executor.h"
#include "scheduler/clock.h"
#include "scheduler/metrics.h"
#include "scheduler/request.h"

namespace attnrt::scheduler {

struct SchedulerOptions {
  // Defaults: attnrt/config.h (attnrt::defaults), shared with RuntimeOptions.
  // Most requests in one batch; 1 <= max_batch_size <= executor->max_batch_size().
  int max_batch_size = defaults::kMaxBatchSize;
  // Smallest batch dispatched before max_queue_delay (see "Batching window"); 0 = only a full
  // bucket dispatches early. 0 <= min_batch_size <= max_batch_size.
  int min_batch_size = defaults::kMinBatchSize;
  // How long the oldest request may wait for a fuller batch; 0 = dispatch what is there. >= 0.
  std::chrono::microseconds max_queue_delay{defaults::kMaxQueueDelayUs};
  // Requests admitted but not yet dispatched; >= 1.
  int max_queue_size = defaults::kMaxQueueSize;
  // Per-request deadline from Submit; 0 = none. >= 0.
  std::chrono::microseconds default_timeout{defaults::kTimeoutUs};
  // Strict priority levels, 0 the highest; 1..16.
  int num_priority_levels = defaults::kNumPriorityLevels;
  // Reject requests whose q, k or v hold Inf or NaN (a vectorised scan of each request).
  bool check_finite = defaults::kCheckFinite;
  // Threads delivering results (futures and callbacks); 1..64.
  int completion_threads = defaults::kCompletionThreads;
  // Bytes of the executor's staging memory (staging_memory(): pinned and mapped on the CUDA
  // executor) allocated up front for request records; requests staged there are read and
  // written by the device in place. At least the working set's records (the batches in flight
  // and two forming) whatever the value, at most what max_queue_size and the working set can
  // hold; a backlog past them is staged on the heap and takes the executor's copy path. >= 0,
  // or -1 (the default, auto: the queue's and the working set's records, at most
  // defaults::kMappedStagingAutoMaxBytes). Unused when the executor offers no staging memory.
  std::int64_t mapped_staging_bytes = defaults::kMappedStagingAuto;
  // How long the batching thread polls for work before it blocks (while requests wait for their
  // window: its last batcher_spin, sleeping before) (0 = never polls); -1 (the
  // default) = auto (ResolveBatcherSpin).
  std::chrono::microseconds batcher_spin{defaults::kBatcherSpinAuto};
  // How long a thread waiting on a ResultFuture polls before it sleeps (every waiter polls at
  // least defaults::kResultSpinShortUs, and only that when the long pollers' slots are taken:
  // ResolveResultSpin); -1 (the default) = auto.
  std::chrono::microseconds result_spin{defaults::kResultSpinAuto};
  // Keep the batching thread's last pass_trace passes (Scheduler::RecentPasses): when it woke,
  // what it took and dispatched, when it meant to wake next. 0 (the default) keeps none; at
  // most kMaxPassTrace. A diagnostic: a latency spike with an idle device and producers on time
  // is either a pass that ran long, a sleep planned too long, or a wake-up that came late.
  int pass_trace = 0;
  // Requests handed to the executor at a time while a batch forms (see "Batches in parts"); 0 =
  // never (whole batches only); -1 (the default) = auto: the executor's preferred_part_size()
  // when the smallest preferred size holds at least two such parts (the CUDA executor: a full
  // bucket, or min_batch_size's bucket, of 64 or more), else 0. > 0 needs an executor that
  // accepts_parts().
  int part_size = defaults::kPartSizeAuto;
};

inline constexpr int kMaxPassTrace = 1 << 20;

// One pass of the batching thread (SchedulerOptions::pass_trace), times on the scheduler's clock.
struct BatcherPass {
  std::int64_t begin_ns = 0;        // the pass began (the thread had woken)
  std::int64_t end_ns = 0;          // it was about to sleep
  std::int64_t sleep_until_ns = 0;  // the wake-up it planned (INT64_MAX: none; only a wake)
  std::int32_t taken = 0;           // requests taken from the intake queue
  std::int32_t batches = 0;         // batches dispatched
  std::int32_t dispatched = 0;      // requests in them
  std::int32_t pending = 0;         // requests left waiting for a batch
  std::int32_t in_flight = 0;       // batches at the executor when it was about to sleep
};

// The poll a scheduler uses for batcher_spin = `spin` on a machine with `hardware_threads`
// (std::thread::hardware_concurrency()): `spin` itself when >= 0; for -1,
// defaults::kBatcherSpinUs with at least defaults::kSpinMinHardwareThreads threads, else 0.
std::chrono::microseconds ResolveBatcherSpin(std::chrono::microseconds spin,
                                             unsigned hardware_threads);

// The waiters' poll for result_spin = `spin` on a machine with `hardware_threads`: how long,
// and how many waiters may poll that long at once. `spin` itself when >= 0; for -1,
// defaults::kResultSpinUs with at least defaults::kSpinMinHardwareThreads threads, else
// defaults::kResultSpinShortUs. Spinners: hardware_threads / kHardwareThreadsPerResultSpinner,
// at least 1.
struct ResultSpin {
  std::chrono::microseconds spin{0};
  int max_spinners = 1;
};
ResultSpin ResolveResultSpin(std::chrono::microseconds spin, unsigned hardware_threads);


// Thread safety: Submit, Cancel, CreateProducer, Metrics and PrometheusText from any thread;
// Drain and Shutdown from any thread, any number of times (later calls wait for the first).
class Scheduler {
 public:
  class Producer;

  // `executor` and `clock` must outlive the scheduler; a null clock means the steady clock. The
  // scheduler is the only caller of executor->Submit while it lives. Submit calls
  // executor->HasSequence(id) from the submitting threads, concurrently with batches running,
  // so the executor must make that query thread-safe (and cheap). InvalidArgument names the bad
  // option.
  static StatusOr<std::unique_ptr<Scheduler>> Create(const SchedulerOptions& options,
                                                     runtime::Executor* executor,
                                                     Clock* clock = nullptr);
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  StatusOr<Submission> Submit(const DecodeRequest& request);
  StatusOr<RequestHandle> Submit(const DecodeRequest& request, DoneCallback done);

  // Runs one request and returns its result (a rejection too, in DecodeResult::status) on the
  // calling thread. While nothing is queued or at the executor, the calling thread runs the
  // batch of one itself (Executor::Run: no hand-off to the batching, launching or completion
  // threads, the lowest latency a lone caller gets; counted in MetricsSnapshot::decoded_inline);
  // otherwise the request is submitted and awaited, batched with the others. Validation,
  // admission (Drain, Shutdown, max_queue_size) and the per-sequence rules are Submit's; a
  // request run inline never waits for a window, so its timeout cannot expire. Not from a done
  // callback (the queued route waits for a delivery that may need the callback's thread).
  DecodeResult Decode(const DecodeRequest& request);

  // A producer for one submitting thread: it keeps a moodycamel producer token (its own
  // sub-queue, cheapest intake) and a small cache of request records (with their staging). Must
  // not outlive the scheduler. Thread safety: one thread at a time.
  std::unique_ptr<Producer> CreateProducer();

  // True when the request will complete with Cancelled; false when it was already dispatched,
  // has completed, or the handle is empty.
  bool Cancel(const RequestHandle& handle);

  void Drain();
  void Shutdown();

  // Runs fn() when no decode request of sequence `id` is outstanding (submitted and not yet
  // completed); otherwise FailedPrecondition naming `call` (e.g. "FreeSequence") and the count.
  // A Submit racing the call may land before or after it. The facade runs the calls that change a
  // sequence's cache through it, so they never race that sequence's decodes. A request counts
  // as completed just before its future or callback sees the result.
  Status RunIfSequenceIdle(SequenceId id, const char* call, const std::function<Status()>& fn);

  MetricsSnapshot Metrics() const;
  std::string PrometheusText() const;
  const SchedulerOptions& options() const;
  // The batching thread's last SchedulerOptions::pass_trace passes, oldest first (empty when the
  // option is 0).
  std::vector<BatcherPass> RecentPasses() const;

  // For tests with a ManualClock: blocks until the batching thread has taken in everything
  // submitted before the call and acted on it (window, deadlines, cancellations) at the clock's
  // current time.
  void SyncForTesting();

  class Impl;

 private:
  explicit Scheduler(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

class Scheduler::Producer {
 public:
  ~Producer();
  Producer(const Producer&) = delete;
  Producer& operator=(const Producer&) = delete;

  StatusOr<Submission> Submit(const DecodeRequest& request);
  StatusOr<RequestHandle> Submit(const DecodeRequest& request, DoneCallback done);

  struct State;

 private:
  friend class Scheduler;
  explicit Producer(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace attnrt::scheduler
