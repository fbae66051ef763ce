// Soak and overload runs of the public Runtime on the CPU executor, shared by the soak tool
// (bench/api_soak_bench.cc) and its ctest versions (tests/api/api_soak_test.cc).
//   RunSoak: many threads submit decodes with sequence create/fork/free churn, random cancels and
//     short timeouts; checks every accepted request completed exactly once with an expected
//     Status, no block leaked, RSS flat after warm-up.
//   RunOverload: measures capacity (closed loop), then open-loop phases at a normal rate, at an
//     overload rate and at the normal rate again; checks prompt load shedding, bounded latency
//     of the admitted, bounded memory and full recovery.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#if defined(__linux__)
#include <sys/prctl.h>
#endif

#include <attnrt/runtime.h>
#include "tools/percentile.h"

namespace attnrt::bench {

using SoakClock = std::chrono::steady_clock;

// VmRSS of this process in KiB from /proc/self/status; -1 where there is none.
inline std::int64_t ReadRssKb() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::strtoll(line.c_str() + 6, nullptr, 10);
  }
  return -1;
}

inline double SecondsSince(SoakClock::time_point t) {
  return std::chrono::duration<double>(SoakClock::now() - t).count();
}

// The first of several errors reported from many threads. Thread safety: any thread.
class SoakFirstError {
 public:
  void Record(const std::string& what) {
    std::lock_guard<std::mutex> lock(mu_);
    ++count_;
    if (text_.empty()) text_ = what;
  }
  std::string text() const {
    std::lock_guard<std::mutex> lock(mu_);
    return text_;
  }
  std::int64_t count() const {
    std::lock_guard<std::mutex> lock(mu_);
    return count_;
  }

 private:
  mutable std::mutex mu_;
  std::string text_;
  std::int64_t count_ = 0;
};

// A small decode shape: the soak exercises the host path (scheduler, planner, churn), not the
// reference kernel's arithmetic.
inline ModelShape SoakShape() {
  ModelShape s;
  s.num_layers = 2;
  s.num_q_heads = 2;
  s.num_kv_heads = 1;
  s.head_dim = 64;
  s.block_size = 16;
  s.max_context = 32;  // short lives: a sequence is freed and recreated every ~60 decodes
  return s;
}

// ============================================================================================
// Soak
// ============================================================================================

struct SoakConfig {
  std::int64_t requests = 10'000'000;
  int threads = 8;
  int sequences_per_thread = 16;        // sequence records per thread; live, dead or forked into
  int max_outstanding_per_thread = 128; // submitted, not yet completed
  int prompt_tokens = 4;                // per layer at create
  double cancel_fraction = 0.01;        // requests cancelled right after Submit
  double timeout_fraction = 0.01;       // requests with a 1..200 us timeout
  double churn_fraction = 0.01;         // decode draws that fork or free instead
  double busy_free_fraction = 0.001;    // decode draws that try to free a sequence still busy
  double progress_interval_s = 5;       // a progress line on `progress` this often
  double rss_sample_interval_s = 0.25;
  std::uint64_t seed = 1;
  ModelShape shape = SoakShape();
  std::size_t kv_cache_bytes = std::size_t{32} << 20;
  DeviceKind device = DeviceKind::kCpu;  // kCuda: the same soak through the CUDA executor
  // Bytes of device memory in use (e.g. cudaMemGetInfo's total - free), sampled beside RSS and
  // held to the same flatness rule; null: not sampled (the CPU executor).
  std::function<std::int64_t()> device_used_bytes;
  std::FILE* progress = stderr;         // null: quiet
};

struct RssSample {
  double fraction = 0;  // of the requests claimed
  double t_s = 0;
  std::int64_t rss_kb = 0;
  std::int64_t device_bytes = -1;  // SoakConfig::device_used_bytes; -1 when not sampled
};

struct SoakResult {
  std::int64_t requests = 0;
  std::int64_t accepted = 0;
  std::map<std::string, std::int64_t> submit_refused;  // by status code name
  std::map<std::string, std::int64_t> outcomes;        // completed requests by status code name
  std::int64_t never_completed = 0;
  std::int64_t completed_twice = 0;
  std::int64_t completed_unaccepted = 0;  // a callback for a request Submit refused
  std::int64_t cancel_true_not_cancelled = 0;
  std::int64_t unexpected_outcomes = 0;   // a status other than OK, Cancelled, DeadlineExceeded
  std::int64_t cancels_true = 0;
  std::int64_t creates = 0, forks = 0, frees = 0, busy_refusals = 0, churn_errors = 0;
  std::int64_t blocks_baseline = 0, blocks_after = 0, sequences_after = 0, blocks_max = 0;
  std::int64_t blocks_total = 0;
  // attnrt_scheduler_requests_{completed,cancelled,timed_out}_total: every accepted request ends
  // in exactly one of them.
  std::uint64_t metrics_completed = 0;
  double elapsed_s = 0;
  double requests_per_s = 0;
  std::int64_t rss_start_kb = 0, rss_at_20_kb = 0, rss_end_kb = 0, rss_max_kb = 0;
  std::int64_t rss_max_after_20_kb = 0;
  double rss_growth_after_20 = 0;  // (max after 20% - at 20%) / at 20%
  double rss_flat_limit = 0.05;
  std::vector<RssSample> rss;
  // Device memory (SoakConfig::device_used_bytes), as RSS: -1 when not sampled.
  std::int64_t device_start = -1, device_at_20 = -1, device_end = -1, device_max_after_20 = -1;
  double device_growth_after_20 = 0;
  std::string first_error;
  std::int64_t errors = 0;

  bool rss_flat() const { return rss_growth_after_20 < rss_flat_limit; }
  bool device_sampled() const { return device_start >= 0; }
  bool device_flat() const {
    return !device_sampled() || device_growth_after_20 < rss_flat_limit;
  }
  bool passed() const {
    return errors == 0 && never_completed == 0 && completed_twice == 0 &&
           completed_unaccepted == 0 && cancel_true_not_cancelled == 0 &&
           unexpected_outcomes == 0 && churn_errors == 0 && blocks_after == blocks_baseline &&
           sequences_after == 0 && metrics_completed == static_cast<std::uint64_t>(accepted) &&
           rss_flat() && device_flat();
  }
};

namespace internal {

// Per request, one byte: bits 0-3 the completing status code, then these flags.
inline constexpr std::uint8_t kCodeMask = 0x0f;
inline constexpr std::uint8_t kCancelTrue = 0x10;
inline constexpr std::uint8_t kTwice = 0x20;
inline constexpr std::uint8_t kCompleted = 0x40;
inline constexpr std::uint8_t kAccepted = 0x80;

// One of a thread's sequence records: a live sequence, or a dead one to be recreated or forked
// into.
struct SoakSequence {
  enum class Pending { kNone, kFree, kFork };
  SequenceId id = 0;
  bool live = false;
  Pending pending = Pending::kNone;  // churn waiting for the sequence's decodes to complete
  std::vector<int> tokens;           // per layer: an upper bound on its length (owner thread)
  std::atomic<int> outstanding{0};   // decodes submitted and not yet called back
};

struct SoakThread {
  std::vector<std::unique_ptr<SoakSequence>> sequences;
  std::atomic<int> outstanding{0};
  std::uint64_t next_id = 0;
};

}  // namespace internal

inline std::uint64_t MetricValue(const std::string& text, const std::string& name) {
  const std::size_t at = text.find("\n" + name + " ");
  if (at == std::string::npos) return 0;
  return std::strtoull(text.c_str() + at + name.size() + 2, nullptr, 10);
}

inline SoakResult RunSoak(const SoakConfig& config) {
  using internal::SoakSequence;
  using internal::SoakThread;
  SoakResult result;
  result.requests = config.requests;
  SoakFirstError errors;
  const ModelShape& shape = config.shape;
  const SoakClock::time_point start = SoakClock::now();

  RuntimeOptions options;
  options.shape = shape;
  options.device = config.device;
  options.kv_cache_bytes = config.kv_cache_bytes;
  auto created = Runtime::Create(options);
  if (!created.ok()) {
    result.first_error = "Runtime::Create: " + created.status().ToString();
    result.errors = 1;
    return result;
  }
  std::unique_ptr<Runtime> rt = std::move(*created);
  result.blocks_baseline = rt->kv_cache_usage().blocks_in_use;
  result.blocks_total = rt->kv_cache_usage().blocks_total;

  // Pre-touched so that this per-request record (1 byte each) is resident before the RSS
  // baseline and cannot pass for growth.
  const std::int64_t n = config.requests;
  std::unique_ptr<std::atomic<std::uint8_t>[]> state(new std::atomic<std::uint8_t>[n]);
  for (std::int64_t i = 0; i < n; ++i) state[i].store(0, std::memory_order_relaxed);

  // A pool of random inputs the requests cycle through (the runtime copies them at Submit).
  constexpr int kInputs = 64;
  const std::size_t q_elems = static_cast<std::size_t>(shape.num_q_heads) * shape.head_dim;
  const std::size_t kv_elems = static_cast<std::size_t>(shape.kv_token_elems());
  std::mt19937_64 input_rng(config.seed);
  std::uniform_real_distribution<float> uniform(-1.f, 1.f);
  auto halves = [&](std::size_t count) {
    std::vector<Half> v(count);
    for (Half& h : v) h = FloatToHalf(uniform(input_rng));
    return v;
  };
  std::vector<std::vector<Half>> qs, ks, vs;
  for (int i = 0; i < kInputs; ++i) {
    qs.push_back(halves(q_elems));
    ks.push_back(halves(kv_elems));
    vs.push_back(halves(kv_elems));
  }
  const std::vector<Half> prompt_k = halves(kv_elems * config.prompt_tokens);
  const std::vector<Half> prompt_v = halves(kv_elems * config.prompt_tokens);

  std::vector<std::unique_ptr<SoakThread>> threads;
  for (int t = 0; t < config.threads; ++t) {
    auto th = std::make_unique<SoakThread>();
    th->next_id = (static_cast<std::uint64_t>(t) + 1) << 40;
    for (int s = 0; s < config.sequences_per_thread; ++s) {
      auto seq = std::make_unique<SoakSequence>();
      seq->tokens.assign(shape.num_layers, 0);
      th->sequences.push_back(std::move(seq));
    }
    threads.push_back(std::move(th));
  }

  std::atomic<std::int64_t> next{0};
  std::atomic<std::int64_t> creates{0}, forks{0}, frees{0}, busy_refusals{0}, churn_errors{0},
      cancels_true{0};
  std::map<std::string, std::int64_t> refused;
  std::mutex refused_mu;

  auto churn_error = [&](const std::string& what, const Status& s) {
    churn_errors.fetch_add(1, std::memory_order_relaxed);
    errors.Record(what + ": " + s.ToString());
  };

  auto worker = [&](int t) {
    SoakThread& th = *threads[t];
    std::mt19937_64 rng(config.seed * 1000003 + t);
    std::uniform_real_distribution<double> u01(0.0, 1.0);
    const int m = config.sequences_per_thread;
    auto create = [&](SoakSequence& seq) {
      const SequenceId id = th.next_id++;
      Status s = rt->CreateSequence(id);
      if (!s.ok()) return churn_error("CreateSequence " + std::to_string(id), s);
      for (int l = 0; l < shape.num_layers; ++l) {
        s = rt->Prefill(id, l, config.prompt_tokens, prompt_k, prompt_v);
        if (!s.ok()) return churn_error("Prefill " + std::to_string(id), s);
        seq.tokens[l] = config.prompt_tokens;
      }
      seq.id = id;
      seq.live = true;
      creates.fetch_add(1, std::memory_order_relaxed);
    };
    auto free_seq = [&](SoakSequence& seq) {
      const Status s = rt->FreeSequence(seq.id);
      if (!s.ok()) return churn_error("FreeSequence " + std::to_string(seq.id), s);
      seq.live = false;
      frees.fetch_add(1, std::memory_order_relaxed);
    };

    for (;;) {
      // Bounded outstanding work per thread (a closed loop with a window).
      for (int cur = th.outstanding.load(std::memory_order_acquire);
           cur >= config.max_outstanding_per_thread;
           cur = th.outstanding.load(std::memory_order_acquire)) {
        th.outstanding.wait(cur, std::memory_order_acquire);
      }
      SoakSequence& seq = *th.sequences[rng() % m];
      const int busy = seq.outstanding.load(std::memory_order_acquire);
      if (!seq.live) {
        if (busy == 0) create(seq);
        continue;
      }
      if (seq.pending != SoakSequence::Pending::kNone) {
        if (busy != 0) continue;  // draining: no new decodes until the churn ran
        const SoakSequence::Pending action = seq.pending;
        seq.pending = SoakSequence::Pending::kNone;
        if (action == SoakSequence::Pending::kFree) {
          free_seq(seq);
          continue;
        }
        SoakSequence* child = nullptr;
        for (int k = 0, first = static_cast<int>(rng() % m); k < m && child == nullptr; ++k) {
          SoakSequence& c = *th.sequences[(first + k) % m];
          if (!c.live && c.outstanding.load(std::memory_order_acquire) == 0) child = &c;
        }
        if (child == nullptr) continue;  // no dead record to fork into
        const SequenceId id = th.next_id++;
        const Status s = rt->ForkSequence(seq.id, id);
        if (!s.ok()) {
          churn_error("ForkSequence " + std::to_string(seq.id) + " -> " + std::to_string(id), s);
          continue;
        }
        child->id = id;
        child->live = true;
        child->tokens = seq.tokens;
        forks.fetch_add(1, std::memory_order_relaxed);
        continue;
      }
      const double roll = u01(rng);
      if (roll < config.busy_free_fraction && busy > 0) {
        // Refused while a decode is outstanding, or allowed if they all just completed.
        const Status s = rt->FreeSequence(seq.id);
        if (s.ok()) {
          seq.live = false;
          frees.fetch_add(1, std::memory_order_relaxed);
        } else if (s.code() == StatusCode::kFailedPrecondition) {
          busy_refusals.fetch_add(1, std::memory_order_relaxed);
        } else {
          churn_error("FreeSequence of a busy sequence", s);
        }
        continue;
      }
      if (roll < config.churn_fraction) {
        seq.pending = rng() % 2 == 0 ? SoakSequence::Pending::kFree : SoakSequence::Pending::kFork;
        continue;
      }
      const int layer = static_cast<int>(rng() % shape.num_layers);
      if (seq.tokens[layer] >= shape.max_context) {
        seq.pending = SoakSequence::Pending::kFree;  // full: free it once its decodes completed
        continue;
      }
      const std::int64_t i = next.fetch_add(1, std::memory_order_relaxed);
      if (i >= n) break;
      const int input = static_cast<int>(rng() % kInputs);
      DecodeRequest req;
      req.sequence_id = seq.id;
      req.layer = layer;
      req.q = qs[input];
      req.k = ks[input];
      req.v = vs[input];
      if (u01(rng) < config.timeout_fraction) {
        req.timeout = std::chrono::microseconds(1 + rng() % 200);
      }
      seq.outstanding.fetch_add(1, std::memory_order_acq_rel);
      th.outstanding.fetch_add(1, std::memory_order_acq_rel);
      SoakSequence* seq_ptr = &seq;
      SoakThread* th_ptr = &th;
      std::atomic<std::uint8_t>* cell = &state[i];
      // Two pointers and the cell: small enough for std::function's inline storage? Not needed
      // for correctness; the runtime owns the callback until it ran.
      auto sub = rt->Submit(req, [cell, seq_ptr, th_ptr](DecodeResult r) {
        const auto code = static_cast<std::uint8_t>(r.status.code());
        const std::uint8_t before =
            cell->fetch_or(internal::kCompleted | (code & internal::kCodeMask),
                           std::memory_order_acq_rel);
        if (before & internal::kCompleted) cell->fetch_or(internal::kTwice);
        seq_ptr->outstanding.fetch_sub(1, std::memory_order_acq_rel);
        th_ptr->outstanding.fetch_sub(1, std::memory_order_acq_rel);
        th_ptr->outstanding.notify_one();
      });
      if (!sub.ok()) {
        seq.outstanding.fetch_sub(1, std::memory_order_acq_rel);
        th.outstanding.fetch_sub(1, std::memory_order_acq_rel);
        std::lock_guard<std::mutex> lock(refused_mu);
        ++refused[std::string(StatusCodeName(sub.status().code()))];
        errors.Record("Submit of request " + std::to_string(i) + ": " +
                      sub.status().ToString());
        continue;
      }
      cell->fetch_or(internal::kAccepted, std::memory_order_acq_rel);
      ++seq.tokens[layer];  // an upper bound: a cancelled or timed-out decode takes none
      if (u01(rng) < config.cancel_fraction && rt->Cancel(*sub)) {
        cell->fetch_or(internal::kCancelTrue, std::memory_order_acq_rel);
        cancels_true.fetch_add(1, std::memory_order_relaxed);
      }
    }
    // Wait for this thread's requests, then free its sequences.
    for (int cur = th.outstanding.load(); cur != 0; cur = th.outstanding.load()) {
      th.outstanding.wait(cur);
    }
    for (auto& s : th.sequences) {
      if (s->live) free_seq(*s);
    }
  };

  // Monitor: RSS samples and progress lines.
  std::atomic<bool> stop{false};
  result.rss_start_kb = ReadRssKb();
  auto device_bytes = [&]() -> std::int64_t {
    return config.device_used_bytes ? config.device_used_bytes() : -1;
  };
  result.device_start = device_bytes();
  std::vector<RssSample> samples;
  std::int64_t blocks_max = 0;
  std::thread monitor([&] {
    SoakClock::time_point last_line = SoakClock::now();
    std::int64_t last_count = 0;
    while (!stop.load()) {
      std::this_thread::sleep_for(std::chrono::duration<double>(config.rss_sample_interval_s));
      const std::int64_t claimed = std::min(next.load(), n);
      const RssSample sample{static_cast<double>(claimed) / static_cast<double>(n),
                             SecondsSince(start), ReadRssKb(), device_bytes()};
      samples.push_back(sample);
      const KvCacheUsage usage = rt->kv_cache_usage();
      blocks_max = std::max(blocks_max, usage.blocks_in_use);
      const double since_line =
          std::chrono::duration<double>(SoakClock::now() - last_line).count();
      if (config.progress != nullptr && since_line >= config.progress_interval_s) {
        std::fprintf(config.progress,
                     "[soak] t=%.1fs requests=%" PRId64 "/%" PRId64
                     " (%.1f%%) rate=%.0f/s rss=%.1fMiB blocks_in_use=%" PRId64
                     " sequences=%" PRId64 " errors=%" PRId64 "\n",
                     sample.t_s, claimed, n, 100.0 * sample.fraction,
                     (claimed - last_count) / since_line, sample.rss_kb / 1024.0,
                     usage.blocks_in_use, usage.sequences, errors.count());
        std::fflush(config.progress);
        last_line = SoakClock::now();
        last_count = claimed;
      }
    }
  });

  {
    std::vector<std::thread> workers;
    for (int t = 0; t < config.threads; ++t) workers.emplace_back(worker, t);
    for (auto& w : workers) w.join();
  }
  result.elapsed_s = SecondsSince(start);
  stop = true;
  monitor.join();
  samples.push_back({1.0, result.elapsed_s, ReadRssKb(), device_bytes()});

  const KvCacheUsage after = rt->kv_cache_usage();
  result.blocks_after = after.blocks_in_use;
  result.sequences_after = after.sequences;
  result.blocks_max = blocks_max;
  rt->Drain();
  const std::string metrics = rt->MetricsText();
  result.metrics_completed =
      MetricValue(metrics, "attnrt_scheduler_requests_completed_total") +
      MetricValue(metrics, "attnrt_scheduler_requests_cancelled_total") +
      MetricValue(metrics, "attnrt_scheduler_requests_timed_out_total");
  rt.reset();

  for (std::int64_t i = 0; i < n; ++i) {
    const std::uint8_t s = state[i].load(std::memory_order_acquire);
    const bool accepted = s & internal::kAccepted, completed = s & internal::kCompleted;
    if (accepted) ++result.accepted;
    if (accepted && !completed) {
      ++result.never_completed;
      errors.Record("request " + std::to_string(i) + " was accepted and never completed");
      continue;
    }
    if (!completed) continue;
    if (!accepted) {
      ++result.completed_unaccepted;
      errors.Record("request " + std::to_string(i) + " was refused and still called back");
    }
    if (s & internal::kTwice) {
      ++result.completed_twice;
      errors.Record("request " + std::to_string(i) + " completed more than once");
      continue;
    }
    const auto code = static_cast<StatusCode>(s & internal::kCodeMask);
    ++result.outcomes[std::string(StatusCodeName(code))];
    if (code != StatusCode::kOk && code != StatusCode::kCancelled &&
        code != StatusCode::kDeadlineExceeded) {
      ++result.unexpected_outcomes;
      errors.Record("request " + std::to_string(i) + " completed with " +
                    std::string(StatusCodeName(code)));
    }
    if ((s & internal::kCancelTrue) && code != StatusCode::kCancelled) {
      ++result.cancel_true_not_cancelled;
      errors.Record("request " + std::to_string(i) + ": Cancel returned true, yet it completed " +
                    std::string(StatusCodeName(code)));
    }
  }
  result.submit_refused = refused;
  result.creates = creates;
  result.forks = forks;
  result.frees = frees;
  result.busy_refusals = busy_refusals;
  result.churn_errors = churn_errors;
  result.cancels_true = cancels_true;
  result.requests_per_s = static_cast<double>(n) / result.elapsed_s;

  // RSS: at 20% of the requests, the largest after it, at the end.
  result.rss = samples;
  result.rss_end_kb = samples.back().rss_kb;
  for (const RssSample& s : samples) {
    result.rss_max_kb = std::max(result.rss_max_kb, s.rss_kb);
    if (s.fraction >= 0.2) {
      if (result.rss_at_20_kb == 0) result.rss_at_20_kb = s.rss_kb;
      result.rss_max_after_20_kb = std::max(result.rss_max_after_20_kb, s.rss_kb);
    }
  }
  if (result.rss_at_20_kb > 0) {
    result.rss_growth_after_20 =
        static_cast<double>(result.rss_max_after_20_kb - result.rss_at_20_kb) /
        static_cast<double>(result.rss_at_20_kb);
  }
  // Device memory: the same rule over the samples that have it.
  result.device_end = samples.back().device_bytes;
  for (const RssSample& s : samples) {
    if (s.device_bytes < 0 || s.fraction < 0.2) continue;
    if (result.device_at_20 < 0) result.device_at_20 = s.device_bytes;
    result.device_max_after_20 = std::max(result.device_max_after_20, s.device_bytes);
  }
  if (result.device_at_20 > 0) {
    result.device_growth_after_20 =
        static_cast<double>(result.device_max_after_20 - result.device_at_20) /
        static_cast<double>(result.device_at_20);
  }
  result.first_error = errors.text();
  result.errors = errors.count();
  return result;
}

inline void PrintSoak(std::FILE* out, const SoakConfig& config, const SoakResult& r) {
  std::fprintf(out, "soak: %s\n", r.passed() ? "PASS" : "FAIL");
  std::fprintf(out, "  requests            %" PRId64 " (threads %d, %d sequence records each, "
               "window %d per thread)\n", r.requests, config.threads,
               config.sequences_per_thread, config.max_outstanding_per_thread);
  std::fprintf(out, "  shape               L=%d H=%d Hkv=%d D=%d block=%d max_context=%d\n",
               config.shape.num_layers, config.shape.num_q_heads, config.shape.num_kv_heads,
               config.shape.head_dim, config.shape.block_size, config.shape.max_context);
  std::fprintf(out, "  time                %.1f s (%.0f requests/s)\n", r.elapsed_s,
               r.requests_per_s);
  std::fprintf(out, "  accepted            %" PRId64 "\n", r.accepted);
  for (const auto& [code, count] : r.submit_refused) {
    std::fprintf(out, "  refused at Submit   %s: %" PRId64 "\n", code.c_str(), count);
  }
  for (const auto& [code, count] : r.outcomes) {
    std::fprintf(out, "  completed           %s: %" PRId64 "\n", code.c_str(), count);
  }
  std::fprintf(out, "  exactly once        never %" PRId64 ", twice %" PRId64
               ", refused-yet-called %" PRId64 ", metrics completed+cancelled+timed out %" PRIu64 "\n",
               r.never_completed, r.completed_twice, r.completed_unaccepted, r.metrics_completed);
  std::fprintf(out, "  cancels             %" PRId64 " returned true, %" PRId64
               " of them not Cancelled\n", r.cancels_true, r.cancel_true_not_cancelled);
  std::fprintf(out, "  churn               creates %" PRId64 ", forks %" PRId64 ", frees %" PRId64
               ", busy frees refused %" PRId64 ", errors %" PRId64 "\n",
               r.creates, r.forks, r.frees, r.busy_refusals, r.churn_errors);
  std::fprintf(out, "  blocks              baseline %" PRId64 ", after freeing all %" PRId64
               ", sequences after %" PRId64 ", max in use %" PRId64 " of %" PRId64 "\n",
               r.blocks_baseline, r.blocks_after, r.sequences_after, r.blocks_max,
               r.blocks_total);
  std::fprintf(out, "  rss                 start %.1f MiB, at 20%% %.1f MiB, end %.1f MiB, "
               "max %.1f MiB, max after 20%% %.1f MiB\n",
               r.rss_start_kb / 1024.0, r.rss_at_20_kb / 1024.0, r.rss_end_kb / 1024.0,
               r.rss_max_kb / 1024.0, r.rss_max_after_20_kb / 1024.0);
  std::fprintf(out, "  rss flat            %s: growth after 20%% = %.2f%% (limit %.0f%%)\n",
               r.rss_flat() ? "yes" : "NO", 100.0 * r.rss_growth_after_20,
               100.0 * r.rss_flat_limit);
  if (r.device_sampled()) {
    std::fprintf(out, "  device memory       start %.1f MiB, at 20%% %.1f MiB, end %.1f MiB, "
                 "max after 20%% %.1f MiB\n",
                 r.device_start / 1048576.0, r.device_at_20 / 1048576.0,
                 r.device_end / 1048576.0, r.device_max_after_20 / 1048576.0);
    std::fprintf(out, "  device flat         %s: growth after 20%% = %.2f%% (limit %.0f%%)\n",
                 r.device_flat() ? "yes" : "NO", 100.0 * r.device_growth_after_20,
                 100.0 * r.rss_flat_limit);
  }
  std::fprintf(out, "  errors              %" PRId64 "%s%s\n", r.errors,
               r.first_error.empty() ? "" : ", first: ", r.first_error.c_str());
}

// ============================================================================================
// Overload
// ============================================================================================

struct OverloadConfig {
  // Heavier than the soak's, so the executor (not the arrival generator) is the bottleneck.
  ModelShape shape = [] {
    ModelShape s;
    s.num_layers = 1;
    s.num_q_heads = 8;
    s.num_kv_heads = 1;
    s.head_dim = 128;
    s.block_size = 16;
    s.max_context = 512;
    return s;
  }();
  int sequences = 256;     // request i decodes sequence i % sequences, layer (i / sequences) % L
  int prompt_tokens = 192; // per layer; sequences are recreated before every phase
  int max_batch_size = 32;
  int max_queue_size = 256;
  double capacity_seconds = 2;   // closed loop
  int capacity_window = 256;     // requests outstanding in the closed loop (at most Q)
  double phase_seconds = 3;      // each open-loop phase
  double normal_load = 0.5;      // of capacity
  double overload = 2.0;         // of capacity
  double monitor_interval_s = 0.02;
  std::uint64_t seed = 7;
  std::FILE* progress = stderr;
};

struct PhaseResult {
  std::string name;
  double offered_per_s = 0;
  std::int64_t offered = 0, admitted = 0, shed = 0, submit_errors = 0;
  std::int64_t ok = 0, failed = 0, never_completed = 0, completed_twice = 0;
  double completed_per_s = 0;   // ok / (first arrival .. last completion)
  double p50_ms = 0, p99_ms = 0, p999_ms = 0, max_ms = 0;  // admitted, from intended arrival
  double submit_p50_us = 0, submit_p99_us = 0, submit_max_us = 0;  // every Submit
  double shed_submit_p99_us = 0;  // Submits answered ResourceExhausted
  double drain_s = 0;             // last arrival .. last completion
  std::int64_t rss_max_kb = 0;
  std::int64_t pending_max = 0;   // attnrt_scheduler_pending_requests, sampled
  std::string first_error;
};

struct OverloadResult {
  double capacity_per_s = 0;
  std::int64_t capacity_completed = 0;
  PhaseResult normal, overload, recovery;
  double latency_bound_ms = 0;  // the stated bound on the overload phase's admitted p99
  double recovery_bound_ms = 0; // the recovery phase's p99 must stay within this
  std::int64_t rss_before_kb = 0;
  std::int64_t rss_growth_limit_kb = 64 * 1024;
  std::int64_t blocks_after = -1;
  std::string first_error;

  bool shed_promptly(double submit_p99_limit_us) const {
    return overload.shed > 0 && overload.submit_p99_us <= submit_p99_limit_us;
  }
  bool latency_bounded() const { return overload.p99_ms <= latency_bound_ms; }
  bool memory_bounded() const {
    return overload.rss_max_kb - rss_before_kb <= rss_growth_limit_kb;
  }
  bool recovered() const { return recovery.p99_ms <= recovery_bound_ms; }
  bool clean() const {
    for (const PhaseResult* p : {&normal, &overload, &recovery}) {
      if (p->submit_errors || p->failed || p->never_completed || p->completed_twice) return false;
    }
    return normal.shed == 0 && recovery.shed == 0 && blocks_after == 0 && first_error.empty();
  }
};

namespace internal {

inline double PercentileMs(const std::vector<std::int64_t>& sorted_ns, double p) {
  return tools::PercentileOfSorted(sorted_ns, p) * 1e-6;
}

class OverloadRun {
 public:
  OverloadRun(const OverloadConfig& config, Runtime* rt) : config_(config), rt_(rt) {
    const ModelShape& s = config.shape;
    std::mt19937_64 rng(config.seed);
    std::uniform_real_distribution<float> uniform(-1.f, 1.f);
    auto halves = [&](std::size_t count) {
      std::vector<Half> v(count);
      for (Half& h : v) h = FloatToHalf(uniform(rng));
      return v;
    };
    q_ = halves(static_cast<std::size_t>(s.num_q_heads) * s.head_dim);
    k_ = halves(static_cast<std::size_t>(s.kv_token_elems()));
    v_ = halves(k_.size());
    prompt_k_ = halves(k_.size() * config.prompt_tokens);
    prompt_v_ = halves(k_.size() * config.prompt_tokens);
  }

  // Frees and recreates every sequence with its prompt, so each phase decodes over the same
  // context lengths (per-request cost grows with them).
  Status ResetSequences() {
    for (int s = 0; s < config_.sequences; ++s) {
      const SequenceId id = static_cast<SequenceId>(s) + 1;
      Status f = rt_->FreeSequence(id);
      if (!f.ok() && f.code() != StatusCode::kNotFound) return f;
      ATTNRT_RETURN_IF_ERROR(rt_->CreateSequence(id));
      for (int l = 0; l < config_.shape.num_layers; ++l) {
        ATTNRT_RETURN_IF_ERROR(
            rt_->Prefill(id, l, config_.prompt_tokens, prompt_k_, prompt_v_));
      }
    }
    return Status::Ok();
  }

  DecodeRequest Request(std::int64_t i) const {
    DecodeRequest r;
    r.sequence_id = static_cast<SequenceId>(i % config_.sequences) + 1;
    r.layer = static_cast<int>((i / config_.sequences) % config_.shape.num_layers);
    r.q = q_;
    r.k = k_;
    r.v = v_;
    return r;
  }

  // Closed loop: `window` requests outstanding from one thread for `seconds`; completed/s over
  // the run after the first quarter (warm-up).
  StatusOr<double> MeasureCapacity(std::int64_t* completed_out) {
    ATTNRT_RETURN_IF_ERROR(ResetSequences());
    // Shared with the callbacks: the last one still touches it after the count reached zero.
    struct Counters {
      std::atomic<int> outstanding{0};
      std::atomic<std::int64_t> completed{0}, failed{0};
    };
    auto counters = std::make_shared<Counters>();
    std::atomic<int>& outstanding = counters->outstanding;
    std::atomic<std::int64_t>& completed = counters->completed;
    std::atomic<std::int64_t>& failed = counters->failed;
    const SoakClock::time_point start = SoakClock::now();
    const auto warm = start + std::chrono::duration_cast<SoakClock::duration>(
                                  std::chrono::duration<double>(config_.capacity_seconds / 4));
    const auto end = start + std::chrono::duration_cast<SoakClock::duration>(
                                 std::chrono::duration<double>(config_.capacity_seconds));
    std::int64_t at_warm = -1;
    SoakClock::time_point warm_seen;
    const int window = std::min(config_.capacity_window, config_.max_queue_size);
    for (std::int64_t i = 0; SoakClock::now() < end; ++i) {
      for (int cur = outstanding.load(); cur >= window;
           cur = outstanding.load()) {
        outstanding.wait(cur);
      }
      if (at_warm < 0 && SoakClock::now() >= warm) {
        at_warm = completed.load();
        warm_seen = SoakClock::now();
      }
      outstanding.fetch_add(1);
      auto sub = rt_->Submit(Request(i), [counters](DecodeResult r) {
        (r.status.ok() ? counters->completed : counters->failed).fetch_add(1);
        counters->outstanding.fetch_sub(1);
        counters->outstanding.notify_one();
      });
      if (!sub.ok()) {
        outstanding.fetch_sub(1);
        return sub.status();
      }
    }
    const std::int64_t at_end = completed.load();
    const double span = SecondsSince(warm_seen);
    for (int cur = outstanding.load(); cur != 0; cur = outstanding.load()) outstanding.wait(cur);
    if (failed.load() != 0) {
      return InternalError(std::to_string(failed.load()) + " requests failed in the closed loop");
    }
    *completed_out = completed.load();
    return static_cast<double>(at_end - at_warm) / span;
  }

  // Open loop: Poisson arrivals at `rate` for phase_seconds from one thread; each latency runs
  // from the intended arrival (no coordinated omission). Waits for every admitted request.
  PhaseResult OpenLoop(const std::string& name, double rate) {
    PhaseResult pr;
    pr.name = name;
    pr.offered_per_s = rate;
    Status reset = ResetSequences();
    if (!reset.ok()) {
      pr.first_error = "ResetSequences: " + reset.ToString();
      return pr;
    }
    std::mt19937_64 rng(config_.seed + static_cast<std::uint64_t>(rate));
    std::exponential_distribution<double> gap(rate);
    std::vector<std::int64_t> arrival_ns;
    for (double t = gap(rng); t < config_.phase_seconds; t += gap(rng)) {
      arrival_ns.push_back(static_cast<std::int64_t>(t * 1e9));
    }
    const std::size_t n = arrival_ns.size();
    pr.offered = static_cast<std::int64_t>(n);
    std::vector<std::int64_t> latency_ns(n, -1), submit_ns(n, 0);
    std::vector<std::uint8_t> intake(n, 0);  // 1 admitted, 2 shed, 3 other error
    std::vector<std::atomic<int>> completions(n);
    std::vector<std::uint8_t> ok(n, 0);
    std::atomic<std::int64_t> done{0};
    SoakFirstError first;

    std::atomic<bool> stop{false};
    std::int64_t rss_max = 0, pending_max = 0;
    std::thread monitor([&] {
      while (!stop.load()) {
        rss_max = std::max(rss_max, ReadRssKb());
        pending_max = std::max<std::int64_t>(
            pending_max, static_cast<std::int64_t>(MetricValue(
                             rt_->MetricsText(), "attnrt_scheduler_pending_requests")));
        std::this_thread::sleep_for(std::chrono::duration<double>(config_.monitor_interval_s));
      }
    });

    const SoakClock::time_point start = SoakClock::now();
    for (std::size_t i = 0; i < n; ++i) {
      const auto due = start + std::chrono::nanoseconds(arrival_ns[i]);
      if (SoakClock::now() < due) std::this_thread::sleep_until(due);
      const SoakClock::time_point t0 = SoakClock::now();
      auto sub = rt_->Submit(Request(static_cast<std::int64_t>(i)), [&, i, due](DecodeResult r) {
        latency_ns[i] = std::chrono::duration_cast<std::chrono::nanoseconds>(
                            SoakClock::now() - due).count();
        if (r.status.ok()) {
          ok[i] = 1;
        } else {
          first.Record(name + " request " + std::to_string(i) + ": " + r.status.ToString());
        }
        completions[i].fetch_add(1);
        done.fetch_add(1, std::memory_order_release);
      });
      submit_ns[i] = std::chrono::duration_cast<std::chrono::nanoseconds>(
                         SoakClock::now() - t0).count();
      if (sub.ok()) {
        intake[i] = 1;
      } else if (sub.status().code() == StatusCode::kResourceExhausted) {
        intake[i] = 2;
      } else {
        intake[i] = 3;
        first.Record(name + " Submit " + std::to_string(i) + ": " + sub.status().ToString());
      }
    }
    const SoakClock::time_point last_arrival = SoakClock::now();
    const std::int64_t admitted = std::count(intake.begin(), intake.end(), 1);
    // Every admitted request completes; a stall of 30 s is a failure, not a wait.
    std::int64_t seen = -1;
    SoakClock::time_point progress = SoakClock::now();
    while (done.load(std::memory_order_acquire) < admitted) {
      const std::int64_t d = done.load();
      if (d != seen) {
        seen = d;
        progress = SoakClock::now();
      } else if (SecondsSince(progress) > 30) {
        first.Record(name + ": no completion for 30 s with " + std::to_string(admitted - d) +
                     " admitted requests outstanding");
        break;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    const SoakClock::time_point end = SoakClock::now();
    stop = true;
    monitor.join();

    std::vector<std::int64_t> lat, sub_all, sub_shed;
    for (std::size_t i = 0; i < n; ++i) {
      sub_all.push_back(submit_ns[i]);
      if (intake[i] == 2) sub_shed.push_back(submit_ns[i]);
      if (intake[i] == 2) ++pr.shed;
      if (intake[i] == 3) ++pr.submit_errors;
      if (intake[i] != 1) continue;
      ++pr.admitted;
      const int c = completions[i].load();
      if (c == 0) {
        ++pr.never_completed;
      } else if (c > 1) {
        ++pr.completed_twice;
      } else if (ok[i]) {
        ++pr.ok;
        lat.push_back(latency_ns[i]);
      } else {
        ++pr.failed;
      }
    }
    std::sort(lat.begin(), lat.end());
    std::sort(sub_all.begin(), sub_all.end());
    std::sort(sub_shed.begin(), sub_shed.end());
    pr.p50_ms = PercentileMs(lat, 0.5);
    pr.p99_ms = PercentileMs(lat, 0.99);
    pr.p999_ms = PercentileMs(lat, 0.999);
    pr.max_ms = lat.empty() ? 0 : lat.back() * 1e-6;
    pr.submit_p50_us = PercentileMs(sub_all, 0.5) * 1e3;
    pr.submit_p99_us = PercentileMs(sub_all, 0.99) * 1e3;
    pr.submit_max_us = sub_all.empty() ? 0 : sub_all.back() * 1e-3;
    pr.shed_submit_p99_us = PercentileMs(sub_shed, 0.99) * 1e3;
    pr.completed_per_s = pr.ok / std::chrono::duration<double>(end - start).count();
    pr.drain_s = std::chrono::duration<double>(end - last_arrival).count();
    pr.rss_max_kb = rss_max;
    pr.pending_max = pending_max;
    pr.first_error = first.text();
    return pr;
  }

 private:
  const OverloadConfig& config_;
  Runtime* rt_;
  std::vector<Half> q_, k_, v_, prompt_k_, prompt_v_;
};

}  // namespace internal

inline void PrintPhase(std::FILE* out, const PhaseResult& p) {
  std::fprintf(out, "  %-9s offered %.0f/s (%" PRId64 "): admitted %" PRId64 ", shed %" PRId64
               " (%.1f%%), ok %" PRId64 ", failed %" PRId64 ", never %" PRId64 ", twice %" PRId64
               ", other Submit errors %" PRId64 "\n",
               p.name.c_str(), p.offered_per_s, p.offered, p.admitted, p.shed,
               p.offered ? 100.0 * p.shed / p.offered : 0.0, p.ok, p.failed, p.never_completed,
               p.completed_twice, p.submit_errors);
  std::fprintf(out, "  %-9s completed %.0f/s; latency of admitted p50 %.2f ms, p99 %.2f ms, "
               "p99.9 %.2f ms, max %.2f ms; drained %.3f s after the last arrival\n",
               "", p.completed_per_s, p.p50_ms, p.p99_ms, p.p999_ms, p.max_ms, p.drain_s);
  std::fprintf(out, "  %-9s Submit p50 %.1f us, p99 %.1f us, max %.1f us (shed ones: p99 %.1f us);"
               " queue depth max %" PRId64 "; rss max %.1f MiB\n",
               "", p.submit_p50_us, p.submit_p99_us, p.submit_max_us, p.shed_submit_p99_us,
               p.pending_max, p.rss_max_kb / 1024.0);
  if (!p.first_error.empty()) std::fprintf(out, "  %-9s first error: %s\n", "", p.first_error.c_str());
}

// The stated bounds, from the measured capacity C, the queue bound Q and the batch bound B:
// an admitted request waits behind at most Q queued and 2 batches in flight, then its own
// batch runs: (Q + 3B) / C. The overload phase's admitted p99 must stay within
// `latency_slack` times that plus `latency_floor_ms` (scheduling noise on a shared machine);
// the recovery phase's p99 within max(recovery_factor x normal p99, normal p99 + floor).
struct OverloadBounds {
  double latency_slack = 2.0;
  double latency_floor_ms = 20;
  double recovery_factor = 2.0;
  double recovery_floor_ms = 10;
};

inline OverloadResult RunOverload(const OverloadConfig& config, const OverloadBounds& bounds) {
  OverloadResult result;
#if defined(__linux__)
  prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);  // sleep_until precision of ~1 us, not 50 us
#endif
  RuntimeOptions options;
  options.shape = config.shape;
  options.device = DeviceKind::kCpu;
  options.max_batch_size = config.max_batch_size;
  options.max_queue_size = config.max_queue_size;
  // Every sequence may reach max_context: K and V, all layers, whole blocks.
  options.kv_cache_bytes = static_cast<std::size_t>(config.sequences) *
                           config.shape.max_blocks_per_sequence() * config.shape.num_layers * 2 *
                           config.shape.num_kv_heads * config.shape.block_size *
                           config.shape.head_dim * sizeof(Half);
  auto created = Runtime::Create(options);
  if (!created.ok()) {
    result.first_error = "Runtime::Create: " + created.status().ToString();
    return result;
  }
  std::unique_ptr<Runtime> rt = std::move(*created);
  internal::OverloadRun run(config, rt.get());
  result.rss_before_kb = ReadRssKb();

  auto say = [&](const char* what) {
    if (config.progress == nullptr) return;
    std::fprintf(config.progress, "[overload] %s\n", what);
    std::fflush(config.progress);
  };
  say("measuring capacity (closed loop)");
  StatusOr<double> capacity = run.MeasureCapacity(&result.capacity_completed);
  if (!capacity.ok()) {
    result.first_error = "capacity: " + capacity.status().ToString();
    return result;
  }
  result.capacity_per_s = *capacity;
  const double c = result.capacity_per_s;
  result.latency_bound_ms =
      bounds.latency_slack * 1e3 * (config.max_queue_size + 3.0 * config.max_batch_size) / c +
      bounds.latency_floor_ms;

  say("normal phase");
  result.normal = run.OpenLoop("normal", config.normal_load * c);
  say("overload phase");
  result.overload = run.OpenLoop("overload", config.overload * c);
  say("recovery phase");
  result.recovery = run.OpenLoop("recovery", config.normal_load * c);
  result.recovery_bound_ms = std::max(bounds.recovery_factor * result.normal.p99_ms,
                                      result.normal.p99_ms + bounds.recovery_floor_ms);
  for (int s = 0; s < config.sequences; ++s) {
    const Status f = rt->FreeSequence(static_cast<SequenceId>(s) + 1);
    if (!f.ok() && result.first_error.empty()) result.first_error = "free: " + f.ToString();
  }
  result.blocks_after = rt->kv_cache_usage().blocks_in_use;
  for (const PhaseResult* p : {&result.normal, &result.overload, &result.recovery}) {
    if (result.first_error.empty() && !p->first_error.empty()) result.first_error = p->first_error;
  }
  return result;
}

}  // namespace attnrt::bench
