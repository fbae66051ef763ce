// Open-loop load against the scheduler over any runtime::Executor: Poisson arrivals at a fixed
// rate (one generator thread; a request's latency runs from its *intended* arrival time, so a
// stalled generator cannot hide queueing: no coordinated omission) for a fixed duration, then
// achieved batch size, p50/p99/p999 latency and throughput. Shared (attnrt_loadgen, tools/) by the
// latency benchmarks (bench/scheduler_latency_harness.h, bench/api_host_path_bench.cu) and the
// window-tuning tool (examples/tune_window.cc).
// Every request is accounted for: shed load (the one expected refusal) apart from failures
// (see OpenLoopResult), which a caller must not report as a result.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <vector>

#if defined(__linux__)
#include <sys/prctl.h>
#endif

#include "runtime/executor.h"
#include "scheduler/scheduler.h"
#include "tools/host_canary.h"
#include "tools/late_clusters.h"
#include "tools/percentile.h"
#include "tools/thread_waits.h"

namespace attnrt::tools {

struct OpenLoopConfig {
  double rate_per_s = 10'000;                // offered load
  std::chrono::microseconds window{100};     // SchedulerOptions::max_queue_delay
  int max_batch = 32;                        // SchedulerOptions::max_batch_size
  double duration_s = 0.25;                  // arrivals are generated for this long
  int num_sequences = 4096;                  // request i decodes sequence i % num_sequences
  // 0: as above, every sequence growing a token a round over the run. G > 0: the sequences
  // [0, num_sequences) stay at their lengths and request i decodes a fork of sequence
  // i % num_sequences, a new generation of forks every G rounds (SequenceGenerations): every
  // request attends over its parent's length plus fewer than G tokens.
  int tokens_per_sequence = 0;
  int max_queue_size = defaults::kMaxQueueSize;
  std::uint64_t seed = 1;
  // Submitting threads, each with its own Scheduler::Producer; arrival i is submitted by thread
  // i % producers at its due time (together they replay the one Poisson schedule). One thread
  // caps the offered rate near its Submit cost (a 12 KB copy each at H=32 Hkv=8 D=128).
  int producers = 1;
  int completion_threads = 2;  // SchedulerOptions::completion_threads
  std::chrono::microseconds batcher_spin{defaults::kBatcherSpinAuto};  // SchedulerOptions
  int part_size = defaults::kPartSizeAuto;                               // SchedulerOptions
  std::int64_t mapped_staging_bytes = defaults::kMappedStagingAuto;  // SchedulerOptions
  // Requests in device-visible memory: q/k/v and the output rows lie in the executor's
  // staging_memory() and go as TensorMemory::kDevice (nothing copied at Submit or delivery, as
  // a serving engine whose q/k/v come from its own kernels submits them). FailedPrecondition
  // when the executor offers no staging memory.
  bool device_memory_requests = false;
  // Check the outputs of OK results (OpenLoopResult::wrong_outputs). Only for an executor that
  // computes attention over caches holding values in [-1, 1] (a prefill from UniformHalves): the
  // harness's q/k/v are such values, so every output, a softmax-weighted mean of V rows, is too.
  bool check_outputs = false;
  // While requests are outstanding and none completes for this long, the run stops waiting: the
  // scheduler shuts down (completing what it still holds with Unavailable) and what never
  // completed counts as lost.
  double stall_timeout_s = 30;
  // OpenLoopResult::late: the requests over this latency (0: the run's p99), clustered by
  // arrival with gaps of at most late_gap between neighbours.
  std::chrono::microseconds late_threshold{0};
  std::chrono::microseconds late_gap{100};
  // Requests scheduled to arrive in the run's first `warmup` are submitted, completed and
  // checked like the others but left out of the latency percentiles (p50_us .. max_us; the
  // whole run's p99 is p99_with_warmup_us): a scheduler created for the run starts cold (its
  // first pieces' plan, pack and launch took ~10x their median on the H200 host, 2026-11-29),
  // which a long-running server pays once. 0: every request counts.
  std::chrono::microseconds warmup{0};
  // Return every latency (OpenLoopResult::latencies_ns): 16 bytes a request, for a caller that
  // pools several runs' samples.
  bool keep_latencies = false;
  // SchedulerOptions::pass_trace: with it, OpenLoopResult::passes describes the batching
  // thread around the largest cluster of late requests.
  int pass_trace = 0;
  // A HostCanary beside the run (OpenLoopResult::canary...): a thread waking every
  // host_canary_period, its wake-ups later than host_canary_threshold logged. A stall of the
  // host stops it as it stops the runtime's threads; a stall of the runtime does not. 0: none.
  std::chrono::microseconds host_canary_period{0};
  std::chrono::microseconds host_canary_threshold = kCanaryThreshold;
};

// What is expected and what is a failure. The harness sets no deadline and cancels nothing, so
// every accepted request must complete exactly once, OK, with a plausible output. The one
// expected refusal is load shedding: Submit answering ResourceExhausted while max_queue_size
// requests are queued, which deliberate overload (an offered rate above capacity) produces.
// Anything else (another Submit error, an executor error, DeadlineExceeded, Unavailable, a lost
// or twice-completed request, a wrong output) is a failure: failures() > 0, first_error says
// what happened first, and the timings describe a broken run.
struct OpenLoopResult {
  std::int64_t offered = 0;
  std::int64_t rejected = 0;       // Submit answered ResourceExhausted (queue full): shed load
  std::int64_t completed = 0;      // OK results
  std::int64_t submit_errors = 0;  // Submit refused with any other status
  std::int64_t failed = 0;         // non-OK results
  std::int64_t lost = 0;           // accepted, never completed
  std::int64_t duplicated = 0;     // completed more than once
  std::int64_t wrong_outputs = 0;  // output rows not finite or outside [-1, 1] (check_outputs)
  std::string first_error;
  std::int64_t failures() const {
    return submit_errors + failed + lost + duplicated + wrong_outputs;
  }
  double elapsed_s = 0;        // first arrival to last result
  double throughput_per_s = 0; // completed / elapsed_s
  // offered / (start to the producers' last Submit): the rate the producers actually offered.
  // Below config.rate_per_s when Submit costs the producers more than the arrival gaps allow
  // (they fall behind the schedule): a run meant to overload the runtime then measures the
  // producers instead.
  double submitted_per_s = 0;
  double batch_mean = 0;
  double p50_us = 0, p99_us = 0, p999_us = 0, max_us = 0;  // arrivals after the warm-up
  std::int64_t warmup_requests = 0;  // arrivals in the warm-up (not in the percentiles above)
  double p99_with_warmup_us = 0, warmup_max_us = 0;
  // With OpenLoopConfig::keep_latencies, every result's latency (ns, ascending): after the
  // warm-up, and of the whole run (several runs' samples pooled give the percentiles of a
  // longer run). Empty otherwise.
  std::vector<std::int64_t> latencies_ns, latencies_with_warmup_ns;
  // Where the time goes (scheduler metrics, medians): submit -> dispatch, and executor Submit ->
  // done per batch (includes waiting behind the batch in flight before it).
  double queue_delay_p50_us = 0, queue_delay_p99_us = 0, executor_p50_us = 0;
  // executor Submit -> done per batch at the 99th percentile, and the scheduler's own latency
  // (Submit -> result delivered, per request; the histogram's estimate) at the 99th.
  double executor_p99_us = 0, scheduler_latency_p99_us = 0;
  // The load generator's own lateness: Submit called this long after the scheduled arrival.
  double submit_late_p99_us = 0;
  LateClusters late;  // where the tail lies in the run (OpenLoopConfig::late_threshold)
  std::string start;  // the first 8 ms in bins of 1 ms (DescribeStart)
  std::string passes;  // with OpenLoopConfig::pass_trace: DescribePassesAt the largest cluster
  // With OpenLoopConfig::host_canary_period: CanaryLog::Describe, the canary's late wake-ups
  // (-1: no canary), and how much of their lateness lies in the largest late cluster (from 1 ms
  // before its first arrival to its last).
  std::string canary;
  std::int64_t canary_stalls = -1;
  double canary_longest_us = 0, canary_late_ms = 0, canary_in_largest_cluster_us = 0;
  // The schedule's origin (arrival 0) on std::chrono::steady_clock, ns since its epoch.
  std::int64_t start_steady_ns = 0;
  // Every thread's wait for a CPU and page faults over the run (ThreadWaitsBetween, longest
  // wait first; empty where the kernel keeps no per-thread schedstat): DescribeThreadWaits of
  // it, and the longest wait.
  std::vector<ThreadSample> thread_waits;
  std::string thread_waits_text;
  double longest_thread_wait_ms = 0;
  std::string vm_counters_text;  // DescribeVmCounters over the run, and the CPU time stolen
  double stolen_cpu_ms = -1;     // StolenCpuMs over the run (all CPUs; -1: unknown)
  bool host_disturbed = false;   // HostDisturbed(*this, the run's duration)
};

// A run the host disturbed: its canary late by a millisecond or more in all (the host stopped
// the process), or the hypervisor stealing a tenth of the run's duration of CPU time, summed
// over the CPUs (/proc/stat counts it in 10 ms ticks). On the lent H200 hosts every 0.5 s run
// whose 70%-load p99 read milliseconds with a quiet canary had 110-210 ms stolen, the quiet
// runs 0-10 ms (2026-11-29). Its tail is the machine's, not the runtime's.
inline constexpr double kDisturbingCanaryLateMs = 1.0;
inline constexpr double kDisturbingStolenFraction = 0.1;
inline bool HostDisturbed(double canary_late_ms, double stolen_cpu_ms, double duration_s) {
  return canary_late_ms >= kDisturbingCanaryLateMs ||
         stolen_cpu_ms >= kDisturbingStolenFraction * duration_s * 1e3;
}

// Builds (or hands out a cached, idle) executor for one configuration: it must accept batches of
// max_batch requests. The harness creates sequences [0, num_sequences) where absent and never
// frees them; each decode step appends one token, so a CUDA executor's cache must hold
// rate * duration / num_sequences more tokens per sequence per run.
using ExecutorFactory =
    std::function<std::shared_ptr<runtime::Executor>(int max_batch, int num_sequences)>;

inline Status EnsureSequences(runtime::Executor* executor, int n) {
  for (int i = 0; i < n; ++i) {
    if (executor->SequenceLength(i, 0).ok()) continue;
    ATTNRT_RETURN_IF_ERROR(executor->CreateSequence(i));
  }
  return Status::Ok();
}

// Frees sequences 0..n-1 (those that exist) and creates each again with `context` tokens in every
// layer, K = V = kv (context * Hkv * D values). Runs that are compared with each other start from
// here: every decode appends a token, so a run measured after another one otherwise attends over
// longer contexts (a capacity measured before a saturation run flattered the capacity by the
// difference: 172 vs 214 us per B=128 step, H200, 2026-11-26).
inline Status ResetSequences(runtime::Executor* executor, int n, int context,
                             const std::vector<Half>& kv) {
  const ModelShape& shape = executor->shape();
  if (kv.size() != static_cast<std::size_t>(context) * shape.kv_token_elems()) {
    return InvalidArgumentError("kv has " + std::to_string(kv.size()) +
                                " values, expected context * Hkv * D = " +
                                std::to_string(static_cast<std::size_t>(context) *
                                               shape.kv_token_elems()));
  }
  for (int i = 0; i < n; ++i) {
    if (executor->HasSequence(i)) ATTNRT_RETURN_IF_ERROR(executor->FreeSequence(i));
    ATTNRT_RETURN_IF_ERROR(executor->CreateSequence(i));
    for (int layer = 0; layer < shape.num_layers; ++layer) {
      ATTNRT_RETURN_IF_ERROR(executor->Prefill(i, layer, context, kv.data(), kv.data()));
    }
  }
  return Status::Ok();
}

// Sequences whose lengths stay put over a run. Request i going to sequence i % parents, each
// sequence grows a token a round: over a 0.5 s run at T=512 with 1,024 sequences that was 290
// to 520 tokens, so a run's late part attends over 1.5-2x the context it is named for (H200,
// 2026-11-29: the 70%-load runs' largest late clusters sat ~262 k requests in, every sequence
// at 768 tokens; cause not established). Here the parents [0, parents) keep their
// lengths and request i (round r = i / parents) decodes a fork of parent j = i % parents:
// its generation g = (r + j % G) / G (ids parents + g * parents + j) takes G rounds, so every
// request attends over its parent's length plus fewer than G tokens. The parents start new
// generations in turn, parents / G of them a round: generations switched by all parents at
// once made every round-G batch append to 1,024 fresh forks (their first blocks and table
// growth), a burst of planning that backed the queue up every ~50 ms (H200, 2026-11-29). A
// fork shares its parent's blocks (a parent whose length is a multiple of the block size:
// nothing copied, the new tokens in new blocks).
// G = 0: request i decodes parent i % parents itself (the lengths grow).
// Thread safety: none; IdFor is const.
class SequenceGenerations {
 public:
  SequenceGenerations(runtime::Executor* executor, int parents, int tokens_per_sequence)
      : executor_(executor), parents_(parents), tokens_(tokens_per_sequence) {}
  SequenceGenerations(const SequenceGenerations&) = delete;
  SequenceGenerations& operator=(const SequenceGenerations&) = delete;
  ~SequenceGenerations() { (void)FreeForks(); }

  runtime::SequenceId IdFor(std::int64_t i) const {
    const std::int64_t j = i % parents_;
    if (tokens_ <= 0) return static_cast<runtime::SequenceId>(j);
    const std::int64_t round = i / parents_;
    return static_cast<runtime::SequenceId>(parents_ * (1 + (round + j % tokens_) / tokens_) + j);
  }

  // Forks each generation up to the latest any request up to i decodes in (every parent's
  // fork of it).
  Status ForkThrough(std::int64_t i) {
    if (tokens_ <= 0) return Status::Ok();
    const std::int64_t round = i / parents_;
    for (const std::int64_t last = (round + tokens_ - 1) / tokens_; forked_ <= last; ++forked_) {
      for (int j = 0; j < parents_; ++j) {
        const runtime::SequenceId child =
            static_cast<runtime::SequenceId>(parents_ * (1 + forked_) + j);
        ATTNRT_RETURN_IF_ERROR(executor_->ForkSequence(j, child));
      }
    }
    return Status::Ok();
  }

  // Frees every fork; the parents stay. Call with nothing of theirs in flight.
  Status FreeForks() {
    Status first = Status::Ok();
    for (std::int64_t g = 0; g < forked_; ++g) {
      for (int j = 0; j < parents_; ++j) {
        const Status s = executor_->FreeSequence(
            static_cast<runtime::SequenceId>(parents_ * (1 + g) + j));
        if (first.ok() && !s.ok()) first = s;
      }
    }
    forked_ = 0;
    return first;
  }

  std::int64_t generations() const { return forked_; }

 private:
  runtime::Executor* const executor_;
  const int parents_;
  const int tokens_;
  std::int64_t forked_ = 0;  // generations [0, forked_) exist
};

// n FP16 values uniform in [-1, 1]: the harness's q/k/v, and the prefill check_outputs needs.
inline std::vector<Half> UniformHalves(std::mt19937_64& rng, std::size_t n) {
  std::uniform_real_distribution<float> uniform(-1.f, 1.f);
  std::vector<Half> v(n);
  for (Half& h : v) h = FloatToHalf(uniform(rng));
  return v;
}

// The index of the first value of row[0, n) that is not finite or lies outside [-1, 1], or -1.
inline std::ptrdiff_t FirstImplausibleOutput(const Half* row, std::size_t n) {
  // Attention over V values in [-1, 1] stays in [-1, 1]; the slack covers FP16 rounding of the
  // probabilities on the GPU (each within 2^-11 relative) with a wide margin.
  constexpr float kLimit = 1.0f + 1.0f / 64;
  for (std::size_t j = 0; j < n; ++j) {
    if (!(std::abs(HalfToFloat(row[j])) <= kLimit)) return static_cast<std::ptrdiff_t>(j);
  }
  return -1;
}

// The first of several errors reported from many threads. Thread safety: Record from any thread.
class FirstError {
 public:
  void Record(const std::string& what) {
    std::lock_guard<std::mutex> lock(mu_);
    if (text_.empty()) text_ = what;
  }
  std::string Get() {
    std::lock_guard<std::mutex> lock(mu_);
    return text_;
  }

 private:
  std::mutex mu_;
  std::string text_;
};

// Halves in the executor's staging_memory() (device-visible: requests there go as kDevice and
// are read and written in place), freed with the pointer. FailedPrecondition naming `what` when
// the executor offers no staging memory, ResourceExhausted when it cannot allocate.
using StagedHalves = std::unique_ptr<Half, std::function<void(Half*)>>;
inline StatusOr<StagedHalves> AllocateStaged(runtime::Executor* executor, std::size_t halves,
                                             const std::string& what) {
  runtime::StagingMemory* memory = executor->staging_memory();
  if (memory == nullptr) {
    return FailedPreconditionError(what + " needs an executor with staging memory");
  }
  void* block = memory->Allocate(halves * sizeof(Half));
  if (block == nullptr) return ResourceExhaustedError("staging memory for " + what);
  return StagedHalves(static_cast<Half*>(block), [memory](Half* p) { memory->Free(p); });
}

inline StatusOr<OpenLoopResult> RunOpenLoop(const OpenLoopConfig& config,
                                            runtime::Executor* executor) {
  ATTNRT_RETURN_IF_ERROR(EnsureSequences(executor, config.num_sequences));
  scheduler::SchedulerOptions options;
  options.max_batch_size = config.max_batch;
  options.max_queue_delay = config.window;
  options.max_queue_size = config.max_queue_size;
  options.completion_threads = config.completion_threads;
  options.batcher_spin = config.batcher_spin;
  options.part_size = config.part_size;
  options.pass_trace = config.pass_trace;
  options.mapped_staging_bytes = config.mapped_staging_bytes;
  if (config.producers < 1 || config.producers > 64) {
    return InvalidArgumentError("producers = " + std::to_string(config.producers) +
                                ", expected 1 .. 64");
  }
  ATTNRT_ASSIGN_OR_RETURN(std::unique_ptr<scheduler::Scheduler> sched,
                          scheduler::Scheduler::Create(options, executor));

  const ModelShape& shape = executor->shape();
  const std::size_t q_elems = static_cast<std::size_t>(shape.num_q_heads) * shape.head_dim;
  const std::size_t kv_elems = static_cast<std::size_t>(shape.num_kv_heads) * shape.head_dim;
  std::mt19937_64 rng(config.seed);
  const std::vector<Half> q = UniformHalves(rng, q_elems);
  const std::vector<Half> k = UniformHalves(rng, kv_elems);
  const std::vector<Half> v = UniformHalves(rng, kv_elems);

  // Arrival schedule, fixed before the run.
  std::exponential_distribution<double> gap(config.rate_per_s);
  std::vector<std::int64_t> arrival_ns;
  for (double t = gap(rng); t < config.duration_s; t += gap(rng)) {
    arrival_ns.push_back(static_cast<std::int64_t>(t * 1e9));
  }
  const std::size_t n = arrival_ns.size();
  SequenceGenerations sequences(executor, config.num_sequences, config.tokens_per_sequence);
  if (n > 0) ATTNRT_RETURN_IF_ERROR(sequences.ForkThrough(static_cast<std::int64_t>(n) - 1));
  std::vector<std::int64_t> latency_ns(n, -1);
  std::vector<std::int64_t> submit_late_ns(n, 0);  // written by request i's producer
  // Results land in a ring of output rows (request i in row i % rows), poisoned with NaN before
  // the run. Checking each row once after the run (the last result written there) catches an
  // executor that answers OK without writing, or writes garbage, off the completion path.
  constexpr std::size_t kOutputRows = 1024;
  constexpr Half kNaN{0x7e00};
  const std::size_t rows = std::clamp<std::size_t>(n, 1, kOutputRows);
  std::vector<Half> host_out;
  // device_memory_requests: a ring of q, k, v and output rows (request i uses row i % rows,
  // so requests in flight together read distinct lines), in one staging block.
  StagedHalves staged;
  Half* out = nullptr;
  const Half *q_rows = q.data(), *k_rows = k.data(), *v_rows = v.data();
  std::size_t q_stride = 0, kv_stride = 0;  // 0: every request reads the one host copy
  if (config.device_memory_requests) {
    ATTNRT_ASSIGN_OR_RETURN(staged, AllocateStaged(executor, rows * (2 * q_elems + 2 * kv_elems),
                                                   "device_memory_requests"));
    Half* at = staged.get();
    q_rows = at;
    k_rows = at + rows * q_elems;
    v_rows = at + rows * (q_elems + kv_elems);
    out = at + rows * (q_elems + 2 * kv_elems);
    for (std::size_t r = 0; r < rows; ++r) {
      std::copy(q.begin(), q.end(), at + r * q_elems);
      std::copy(k.begin(), k.end(), at + rows * q_elems + r * kv_elems);
      std::copy(v.begin(), v.end(), at + rows * (q_elems + kv_elems) + r * kv_elems);
    }
    q_stride = q_elems;
    kv_stride = kv_elems;
    std::fill(out, out + rows * q_elems, kNaN);
  } else {
    host_out.assign(rows * q_elems, kNaN);
    out = host_out.data();
  }
  // Per request, written by its one producer thread: what Submit answered.
  enum class Intake : std::uint8_t { kAccepted, kShed, kError };
  std::vector<Intake> intake(n, Intake::kAccepted);
  // Per request, written by its completion(s): how often it completed, and whether OK.
  std::vector<std::atomic<int>> completions(n);
  std::vector<char> result_ok(n, 0);
  std::atomic<std::int64_t> done{0};
  FirstError first_error;

  using Clock = std::chrono::steady_clock;
  OpenLoopResult result;
  result.offered = static_cast<std::int64_t>(n);
#if defined(__linux__)
  prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);  // sleep_until precision of ~1 us, not 50 us
#endif
  std::vector<std::unique_ptr<scheduler::Scheduler::Producer>> producers;
  for (int p = 0; p < config.producers; ++p) producers.push_back(sched->CreateProducer());
  // The schedule starts once every producer thread runs (and kStartLead later, so that the first
  // arrivals find them asleep until due): a thread started after the schedule's first arrivals
  // would submit its backlog at once, and the run would measure thread creation (at 70% load the
  // backlog of a producer started 0.8 ms late took the runtime ~5 ms to drain: most of the p99's
  // requests at max batch 32, H200, 2026-11-29).
  constexpr auto kStartLead = std::chrono::microseconds(500);
  Clock::time_point start;
  std::optional<HostCanary> canary;  // OpenLoopConfig::host_canary_period
  std::vector<ThreadSample> threads_before;  // schedstat at the start
  std::vector<std::pair<std::string, std::int64_t>> vm_before;
  double stolen_before_ms = -1;
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  auto produce = [&](int p) {
    for (std::size_t i = p; i < n; i += config.producers) {
      const Clock::time_point due = start + std::chrono::nanoseconds(arrival_ns[i]);
      Clock::time_point now = Clock::now();
      if (now < due) {
        std::this_thread::sleep_until(due);
        now = Clock::now();
      }
      submit_late_ns[i] = std::chrono::duration_cast<std::chrono::nanoseconds>(now - due).count();
      scheduler::DecodeRequest r;
      r.sequence_id = sequences.IdFor(static_cast<std::int64_t>(i));
      const std::size_t row = i % rows;
      r.q = {q_rows + row * q_stride, q_elems};
      r.k = {k_rows + row * kv_stride, kv_elems};
      r.v = {v_rows + row * kv_stride, kv_elems};
      r.out = out + row * q_elems;
      if (config.device_memory_requests) r.memory = TensorMemory::kDevice;
      auto s = producers[p]->Submit(r, [&, i, due](scheduler::DecodeResult res) {
        latency_ns[i] =
            std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - due).count();
        if (res.status.ok()) {
          result_ok[i] = 1;
        } else {
          first_error.Record("request " + std::to_string(i) + ": " + res.status.ToString());
        }
        completions[i].fetch_add(1, std::memory_order_relaxed);
        done.fetch_add(1, std::memory_order_release);
      });
      if (s.ok()) continue;
      if (s.status().code() == StatusCode::kResourceExhausted) {
        intake[i] = Intake::kShed;
      } else {
        intake[i] = Intake::kError;
        first_error.Record("Submit of request " + std::to_string(i) + ": " +
                           s.status().ToString());
      }
    }
  };
  {
    std::vector<std::thread> threads;
    for (int p = 1; p < config.producers; ++p) {
      threads.emplace_back([&, p] {
#if defined(__linux__)
        prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
#endif
        ready.fetch_add(1, std::memory_order_acq_rel);
        while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
        produce(p);
      });
    }
    while (ready.load(std::memory_order_acquire) < config.producers - 1) std::this_thread::yield();
    // Before the schedule's origin is set: reading /proc takes a fraction of a millisecond, which
    // would come out of kStartLead.
    threads_before = SampleThreads();
    vm_before = SampleVmCounters();
    stolen_before_ms = StolenCpuMs();
    start = Clock::now() + kStartLead;
    if (config.host_canary_period.count() > 0) {
      canary.emplace(start, config.host_canary_period, config.host_canary_threshold);
    }
    go.store(true, std::memory_order_release);
    produce(0);
    for (std::thread& t : threads) t.join();
  }
  result.submitted_per_s =
      static_cast<double>(n) /
      std::max(1e-9, std::chrono::duration<double>(Clock::now() - start).count());
  const std::int64_t accepted = std::count(intake.begin(), intake.end(), Intake::kAccepted);
  result.rejected = std::count(intake.begin(), intake.end(), Intake::kShed);
  result.submit_errors = std::count(intake.begin(), intake.end(), Intake::kError);

  // Wait for every accepted request, as long as completions keep coming.
  std::int64_t seen = -1;
  Clock::time_point last_progress = Clock::now();
  for (std::int64_t d; (d = done.load(std::memory_order_acquire)) < accepted;) {
    const Clock::time_point now = Clock::now();
    if (d != seen) {
      seen = d;
      last_progress = now;
    } else if (now - last_progress > std::chrono::duration<double>(config.stall_timeout_s)) {
      first_error.Record("no request completed for " + std::to_string(config.stall_timeout_s) +
                         " s with " + std::to_string(accepted - d) + " of " +
                         std::to_string(accepted) + " accepted requests outstanding");
      break;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  const Clock::time_point end = Clock::now();
  result.thread_waits = ThreadWaitsBetween(threads_before, SampleThreads());
  result.vm_counters_text = DescribeVmCounters(vm_before, SampleVmCounters());
  if (const double stolen_ms = StolenCpuMs(); stolen_ms >= 0 && stolen_before_ms >= 0) {
    result.stolen_cpu_ms = stolen_ms - stolen_before_ms;
    char stolen[64];
    std::snprintf(stolen, sizeof stolen, "; CPU time stolen by the hypervisor %.0f ms",
                  result.stolen_cpu_ms);
    result.vm_counters_text += stolen;
  }
  const CanaryLog* canary_log = canary ? &canary->Stop() : nullptr;
  const scheduler::MetricsSnapshot m = sched->Metrics();
  const std::vector<scheduler::BatcherPass> passes = sched->RecentPasses();
  producers.clear();  // a Producer must not outlive its scheduler
  sched->Shutdown();  // no completion runs after this
  if (const Status freed = sequences.FreeForks(); !freed.ok()) {
    first_error.Record("freeing the run's forks: " + freed.ToString());
    ++result.failed;
  }

  for (std::size_t i = 0; i < n; ++i) {
    if (intake[i] != Intake::kAccepted) continue;
    const int c = completions[i].load(std::memory_order_relaxed);
    if (c == 0) {
      ++result.lost;
      first_error.Record("request " + std::to_string(i) + " was accepted and never completed");
    } else if (c > 1) {
      ++result.duplicated;
      first_error.Record("request " + std::to_string(i) + " completed " + std::to_string(c) +
                         " times");
    } else if (result_ok[i]) {
      ++result.completed;
    } else {
      ++result.failed;
    }
  }
  if (config.check_outputs) {
    std::vector<char> row_written(rows, 0);
    for (std::size_t i = 0; i < n; ++i) row_written[i % rows] |= result_ok[i];
    for (std::size_t r = 0; r < rows; ++r) {
      const Half* row = out + r * q_elems;
      const std::ptrdiff_t j = row_written[r] ? FirstImplausibleOutput(row, q_elems) : -1;
      if (j < 0) continue;
      ++result.wrong_outputs;
      first_error.Record("an OK result's output (ring row " + std::to_string(r) + "): element " +
                         std::to_string(j) + " = " + std::to_string(HalfToFloat(row[j])) +
                         ", expected a finite value in [-1, 1]");
    }
  }
  result.first_error = first_error.Get();

  const std::int64_t warmup_ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(config.warmup).count();
  std::vector<std::int64_t> sorted, all;
  sorted.reserve(n);
  all.reserve(n);
  for (std::size_t i = 0; i < n; ++i) {
    const std::int64_t l = latency_ns[i];
    if (l < 0) continue;
    all.push_back(l);
    if (arrival_ns[i] >= warmup_ns) {
      sorted.push_back(l);
    } else {
      ++result.warmup_requests;
      result.warmup_max_us = std::max(result.warmup_max_us, l * 1e-3);
    }
  }
  std::sort(sorted.begin(), sorted.end());
  std::sort(all.begin(), all.end());
  result.p99_with_warmup_us = PercentileOfSorted(all, 0.99) * 1e-3;
  result.elapsed_s = std::chrono::duration<double>(end - start).count();
  result.throughput_per_s = result.completed / result.elapsed_s;
  result.batch_mean = m.batch_size.Mean();
  result.p50_us = PercentileOfSorted(sorted, 0.5) * 1e-3;
  result.p99_us = PercentileOfSorted(sorted, 0.99) * 1e-3;
  result.p999_us = PercentileOfSorted(sorted, 0.999) * 1e-3;
  result.max_us = sorted.empty() ? 0 : sorted.back() * 1e-3;
  result.queue_delay_p50_us = m.queue_delay_ns.Percentile(0.5) * 1e-3;
  result.queue_delay_p99_us = m.queue_delay_ns.Percentile(0.99) * 1e-3;
  result.executor_p50_us = m.executor_time_ns.Percentile(0.5) * 1e-3;
  result.executor_p99_us = m.executor_time_ns.Percentile(0.99) * 1e-3;
  result.scheduler_latency_p99_us = m.latency_ns.Percentile(0.99) * 1e-3;
  result.submit_late_p99_us = Percentile(submit_late_ns, 0.99) * 1e-3;
  const std::int64_t threshold_ns =
      config.late_threshold.count() > 0
          ? std::chrono::duration_cast<std::chrono::nanoseconds>(config.late_threshold).count()
          : static_cast<std::int64_t>(result.p99_with_warmup_us * 1e3);
  result.start = DescribeStart(arrival_ns, latency_ns, 1'000'000, 8);
  result.late = FindLateClusters(
      arrival_ns, latency_ns, submit_late_ns, threshold_ns,
      std::chrono::duration_cast<std::chrono::nanoseconds>(config.late_gap).count());
  result.start_steady_ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(start.time_since_epoch()).count();
  result.thread_waits_text = DescribeThreadWaits(result.thread_waits);
  if (!result.thread_waits.empty()) {
    result.longest_thread_wait_ms = result.thread_waits.front().waited_ns * 1e-6;
  }
  if (canary_log != nullptr) {
    result.canary = canary_log->Describe();
    result.canary_stalls = canary_log->stall_count();
    result.canary_longest_us = canary_log->longest().late_ns * 1e-3;
    result.canary_late_ms = canary_log->late_total_ns() * 1e-6;
    if (!result.late.largest.empty()) {
      const LateCluster& c = result.late.largest.front();
      result.canary_in_largest_cluster_us =
          canary_log->StalledDuring(c.first_arrival_ns - 1'000'000, c.last_arrival_ns) * 1e-3;
    }
  }
  result.host_disturbed =
      HostDisturbed(result.canary_late_ms, result.stolen_cpu_ms, config.duration_s);
  if (config.pass_trace > 0) {
    // The scheduler's clock is the steady clock (RunOpenLoop gives it no other).
    const std::int64_t start_ns =
        std::chrono::duration_cast<std::chrono::nanoseconds>(start.time_since_epoch()).count();
    result.passes = DescribePassesAt(result.late, passes, start_ns);
  }
  if (config.keep_latencies) {
    result.latencies_ns = std::move(sorted);
    result.latencies_with_warmup_ns = std::move(all);
  }
  return result;
}

// The executor alone, closed loop: full batches of `batch` requests (sequences taken in turn, so
// no batch holds one (sequence, layer) twice) submitted back to back for `duration_s`, as many in
// flight as the executor allows. Gives the kernel-only capacity the scheduler is judged against.
struct CapacityResult {
  int batch = 0;
  std::int64_t batches = 0;
  double elapsed_s = 0;
  double throughput_per_s = 0;  // requests completed per second
  double step_us = 0;           // elapsed / batches: the pipelined time of one batch
  std::int64_t timed_forks = 0;  // forks made inside the timed loop (tokens_per_sequence)
};

// `staged`: every request's q/k/v/out/lse lie in the executor's staging_memory() and go as
// MemoryKind::kDevice (read and written in place, as a scheduler's records staged in mapped
// memory are); FailedPrecondition when the executor offers no staging memory.
// `tokens_per_sequence`: as OpenLoopConfig's (SequenceGenerations): the generations of the
// first `prefork_requests` requests are forked before the clock starts (a fork waits for the
// batches planned before it to launch, so forking inside the timed loop stalls the pipeline),
// any further one when its first batch is formed (CapacityResult::timed_forks); every fork is
// freed at the end.
inline StatusOr<CapacityResult> MeasureExecutorCapacity(runtime::Executor* executor, int batch,
                                                        int num_sequences, double duration_s,
                                                        bool staged = false,
                                                        int tokens_per_sequence = 0,
                                                        std::int64_t prefork_requests = 0) {
  if (batch < 1 || batch > num_sequences) {
    return InvalidArgumentError("batch = " + std::to_string(batch) +
                                ", expected 1 <= batch <= num_sequences = " +
                                std::to_string(num_sequences));
  }
  ATTNRT_RETURN_IF_ERROR(EnsureSequences(executor, num_sequences));
  const ModelShape& shape = executor->shape();
  const std::size_t q_elems = static_cast<std::size_t>(shape.num_q_heads) * shape.head_dim;
  const std::size_t kv_elems = static_cast<std::size_t>(shape.kv_token_elems());
  std::mt19937_64 rng(7);
  const std::vector<Half> q = UniformHalves(rng, q_elems);
  const std::vector<Half> kv = UniformHalves(rng, kv_elems);
  // One output row per batch position: batches run in order, so rows are reused safely.
  std::vector<Half> out(q_elems * batch);
  // Staged: per batch position q, k, v, out (halves) and lse (floats) in one staging block.
  const std::size_t heads = static_cast<std::size_t>(shape.num_q_heads);
  // lse as 2 halves each; slots 64-byte aligned (the kernels load 16-byte vectors)
  const std::size_t slot_halves = (2 * q_elems + 2 * kv_elems + 2 * heads + 31) / 32 * 32;
  StagedHalves staging;
  if (staged) {
    ATTNRT_ASSIGN_OR_RETURN(staging,
                            AllocateStaged(executor, slot_halves * static_cast<std::size_t>(batch),
                                           "a staged capacity run"));
    for (int j = 0; j < batch; ++j) {
      Half* slot = staging.get() + slot_halves * j;
      std::copy(q.begin(), q.end(), slot);
      std::copy(kv.begin(), kv.end(), slot + q_elems);
      std::copy(kv.begin(), kv.end(), slot + q_elems + kv_elems);
    }
  }

  std::atomic<std::int64_t> completed{0}, failed{0};
  FirstError first_error;
  using Clock = std::chrono::steady_clock;
  const Clock::time_point start = Clock::now();
  const Clock::time_point stop = start + std::chrono::duration_cast<Clock::duration>(
                                             std::chrono::duration<double>(duration_s));
  std::int64_t submitted = 0;
  SequenceGenerations sequences(executor, num_sequences, tokens_per_sequence);
  if (prefork_requests > 0) ATTNRT_RETURN_IF_ERROR(sequences.ForkThrough(prefork_requests - 1));
  const std::int64_t preforked = sequences.generations();
  std::int64_t next_request = 0;
  while (Clock::now() < stop) {
    if (const Status forked = sequences.ForkThrough(next_request + batch - 1); !forked.ok()) {
      executor->Wait();
      return forked;
    }
    runtime::Batch b;
    b.requests.resize(batch);
    for (int j = 0; j < batch; ++j) {
      runtime::BatchRequest& r = b.requests[j];
      r.sequence_id = sequences.IdFor(next_request++);
      if (staged) {
        Half* slot = staging.get() + slot_halves * j;
        r.memory = runtime::MemoryKind::kDevice;
        r.q = slot;
        r.k = slot + q_elems;
        r.v = slot + q_elems + kv_elems;
        r.out = slot + q_elems + 2 * kv_elems;
        r.lse = reinterpret_cast<float*>(slot + 2 * q_elems + 2 * kv_elems);
      } else {
        r.q = q.data();
        r.k = kv.data();
        r.v = kv.data();
        r.out = out.data() + j * q_elems;
      }
    }
    const Status st = executor->Submit(std::move(b), [&](std::vector<Status> statuses) {
      for (const Status& s : statuses) {
        if (s.ok()) continue;
        failed.fetch_add(1, std::memory_order_relaxed);
        first_error.Record(s.ToString());
      }
      completed.fetch_add(1, std::memory_order_release);
    });
    if (!st.ok()) {
      executor->Wait();  // the batches in flight call back into this frame
      return st;
    }
    ++submitted;
  }
  executor->Wait();
  const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  const std::int64_t timed_forks = (sequences.generations() - preforked) * num_sequences;
  ATTNRT_RETURN_IF_ERROR(sequences.FreeForks());
  if (failed.load() > 0) {
    return InternalError(std::to_string(failed.load()) +
                         " requests failed while measuring capacity; first: " + first_error.Get());
  }
  CapacityResult r;
  r.batch = batch;
  r.batches = submitted;
  r.elapsed_s = elapsed;
  r.throughput_per_s = static_cast<double>(submitted) * batch / elapsed;
  r.step_us = elapsed * 1e6 / static_cast<double>(std::max<std::int64_t>(submitted, 1));
  r.timed_forks = timed_forks;
  return r;
}

}  // namespace attnrt::tools
