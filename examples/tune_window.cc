// tune_window: picks the batching window for a deployment. Drives the scheduler over the real
// executor (CUDA when a GPU is present, else the CPU executor) with open-loop Poisson load at
// each offered rate, for every (max_queue_delay, max_batch_size) pair, prints achieved batch
// size, p50/p99/p999 latency and throughput, and recommends, per rate, the setting with the
// lowest p99 among those that keep up with the rate and meet the latency objective (ties within
// 10% go to the fuller batch). Optional JSON output for records. With --criteria B it also
// measures the executor's kernel-only capacity at batch B and checks the scheduler against it
// (throughput at saturation, p99 at 70% load).
// Exit codes: 0 done; 1 a run failed, requests included (any request that does not complete OK
// with a plausible output, tools/open_loop.h; load shed by Submit with ResourceExhausted under
// overload is expected, reported and never recommended): the tool says why and recommends
// nothing; 2 bad flags; 3 a criterion missed.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <attnrt/version.h>  // ATTNRT_WITH_CUDA
#include "api/internal/cuda_device.h"
#include "kvcache/kvcache.h"
#include "runtime/cpu_executor.h"
#include "runtime/cuda_executor.h"
#include "tools/flags.h"
#include "tools/open_loop.h"

namespace {

using attnrt::Half;

struct ToolOptions {
  std::string device = "auto";
  std::vector<double> rates = {2000, 10000, 50000};
  std::vector<int> windows_us = {0, 50, 200, 1000};
  std::vector<int> max_batches = {8, 32, 128};
  double duration_s = 0.5;
  double p99_slo_us = 2000;
  int max_queue_size = attnrt::tools::OpenLoopConfig{}.max_queue_size;
  int heads = 32, kv_heads = 8, head_dim = 128, block_size = 16;
  int context = 512;
  int sequences = 1024;
  std::string json;
  // Issue-6 criteria at one batch size (0 = off): capacity, saturation and 70%-load checks.
  int criteria_batch = 0;
  int criteria_window_us = 200;
  bool sweep = true;
  int buffers = attnrt::runtime::CudaExecutorOptions{}.num_buffers;
  // Enough submitting threads that the load generator is not the bottleneck on a GPU host,
  // without taking the cores a CPU executor computes on.
  bool staging_memory = false;
  int producers = std::clamp(static_cast<int>(std::thread::hardware_concurrency()) / 4, 1, 4);
  // Testing only: see FailureInjectingExecutor.
  int inject_failures_every = 0;
  std::string inject_failure_kind = "error";
};

// Parses the flags into *o; returns FlagSet::kContinue or the exit code.
int Parse(int argc, char** argv, ToolOptions* o) {
  attnrt::tools::FlagSet flags(
      "tune_window", "tune_window: sweep the batching window under open-loop load and recommend a setting.");
  flags.Choice("--device", &o->device, attnrt::tools::DeviceChoices(),
               "executor (auto: CUDA when a GPU is present)");
  flags.List("--rates", &o->rates, "offered loads in requests/s");
  flags.List("--windows-us", &o->windows_us, "max_queue_delay values in us");
  flags.List("--max-batches", &o->max_batches, "max_batch_size values");
  flags.Double("--duration", &o->duration_s, "seconds of arrivals per point", 0.001, 3600);
  flags.Double("--p99-slo-us", &o->p99_slo_us, "latency objective for the recommendation");
  flags.Int("--max-queue-size", &o->max_queue_size,
            "max_queue_size: requests queued past it are shed (Submit answers "
            "ResourceExhausted; expected under overload, never recommended)",
            1, 1 << 30);
  flags.Int("--heads", &o->heads, "query heads H", 1, 1024);
  flags.Int("--kv-heads", &o->kv_heads, "KV heads Hkv", 1, 1024);
  flags.Int("--head-dim", &o->head_dim, "head dim: 64, 128 or 256");
  flags.Int("--block-size", &o->block_size, "KV block size: 8, 16, 32 or 64");
  flags.Int("--context", &o->context, "prompt tokens prefilled per sequence", 1, 1 << 20);
  flags.Int("--sequences", &o->sequences, "sequences the load cycles through", 1, 1 << 20);
  flags.String("--json", &o->json, "also write every point as JSON to this file");
  flags.Int("--criteria", &o->criteria_batch,
            "also check at max batch B: kernel-only capacity, throughput at saturation "
            "(>= 0.9x), p99 at 70% load (<= window + 2 x step); 0 = off",
            0, 1 << 16);
  flags.Int("--criteria-window-us", &o->criteria_window_us, "window for the criteria runs");
  flags.Int("--producers", &o->producers,
            "threads submitting the Poisson arrivals (each with its own scheduler Producer)", 1, 64);
  flags.Bool("--staging-memory", &o->staging_memory,
             "CUDA executor: the scheduler stages requests in the executor's mapped staging "
             "memory, read and written in place by the graph (CudaExecutorOptions::"
             "offer_staging_memory), instead of copying through its pinned staging");
  flags.Int("--buffers", &o->buffers,
            "CUDA executor: pipeline buffers, i.e. pieces in flight, each with its own staging "
            "(CudaExecutorOptions::num_buffers)",
            2, 16);
  bool no_sweep = false;
  flags.Bool("--no-sweep", &no_sweep, "skip the sweep (criteria only)");
  flags.Int("--inject-failures-every", &o->inject_failures_every,
            "testing only: every Nth request the executor runs fails (--inject-failure-kind), "
            "to exercise the failed-request path; 0 = off",
            0, 1 << 30);
  flags.Choice("--inject-failure-kind", &o->inject_failure_kind, {"error", "output"},
               "testing only: how an injected failure shows (error: InternalError; output: "
               "OK, with its output overwritten by NaN)");
  const int rc = flags.Parse(argc, argv);
  o->sweep = !no_sweep;
  return rc;
}

// One open-loop run at (rate, window, max batch) with the tool's duration and sequences.
attnrt::StatusOr<attnrt::tools::OpenLoopResult> RunPoint(const ToolOptions& o,
                                                         attnrt::runtime::Executor* executor,
                                                         double rate, int window_us,
                                                         int max_batch) {
  attnrt::tools::OpenLoopConfig c;
  c.rate_per_s = rate;
  c.window = std::chrono::microseconds(window_us);
  c.max_batch = max_batch;
  c.duration_s = o.duration_s;
  c.num_sequences = o.sequences;
  c.max_queue_size = o.max_queue_size;
  c.producers = o.producers;
  c.check_outputs = true;  // the prefill below holds values in [-1, 1]
  return attnrt::tools::RunOpenLoop(c, executor);
}

// True, after printing why, when requests of the run `what` failed: its numbers are no result.
bool ReportFailedRequests(const attnrt::tools::OpenLoopResult& r, const std::string& what) {
  if (r.failures() == 0) return false;
  std::fprintf(stderr,
               "tune_window: FAILED: requests failed in the run at %s: %lld failed, %lld "
               "refused by Submit (not as shed load), %lld lost, %lld completed twice, %lld "
               "wrong outputs, of %lld offered; first: %s\n",
               what.c_str(), static_cast<long long>(r.failed),
               static_cast<long long>(r.submit_errors), static_cast<long long>(r.lost),
               static_cast<long long>(r.duplicated), static_cast<long long>(r.wrong_outputs),
               static_cast<long long>(r.offered), r.first_error.c_str());
  return true;
}

// Testing only (--inject-failures-every N): every Nth request the inner executor runs fails,
// as a device error would (InternalError) or as a broken kernel would (OK, with a NaN output),
// so that tests can prove failed requests fail the tool. The requests still run.
class FailureInjectingExecutor final : public attnrt::runtime::Executor {
 public:
  FailureInjectingExecutor(std::unique_ptr<Executor> inner, int every, bool wrong_output)
      : inner_(std::move(inner)), every_(every), wrong_output_(wrong_output) {}

  const attnrt::ModelShape& shape() const override { return inner_->shape(); }
  int max_batch_size() const override { return inner_->max_batch_size(); }
  std::vector<int> buckets() const override { return inner_->buckets(); }
  int max_in_flight() const override { return inner_->max_in_flight(); }
  attnrt::runtime::StagingMemory* staging_memory() override { return inner_->staging_memory(); }
  attnrt::Status Submit(attnrt::runtime::Batch batch,
                        attnrt::runtime::BatchDoneFn done) override {
    std::vector<std::pair<std::size_t, Half*>> doomed;  // (position, output)
    for (std::size_t j = 0; j < batch.requests.size(); ++j) {
      if (++requests_ % every_ == 0) doomed.push_back({j, batch.requests[j].out});
    }
    const std::size_t out_elems =
        static_cast<std::size_t>(shape().num_q_heads) * shape().head_dim;
    return inner_->Submit(std::move(batch), [wrong_output = wrong_output_, done = std::move(done),
                                             doomed, out_elems](
                                                std::vector<attnrt::Status> statuses) {
      for (const auto& [j, out] : doomed) {
        if (wrong_output) {
          std::fill(out, out + out_elems, Half{0x7e00});  // NaN
        } else {
          statuses[j] = attnrt::InternalError("injected failure (--inject-failures-every)");
        }
      }
      done(std::move(statuses));
    });
  }
  void Wait() override { inner_->Wait(); }
  attnrt::Status CreateSequence(attnrt::runtime::SequenceId id) override {
    return inner_->CreateSequence(id);
  }
  attnrt::Status ForkSequence(attnrt::runtime::SequenceId parent,
                              attnrt::runtime::SequenceId child) override {
    return inner_->ForkSequence(parent, child);
  }
  attnrt::Status FreeSequence(attnrt::runtime::SequenceId id) override {
    return inner_->FreeSequence(id);
  }
  attnrt::Status Prefill(attnrt::runtime::SequenceId id, int layer, int num_tokens,
                         const Half* k, const Half* v) override {
    return inner_->Prefill(id, layer, num_tokens, k, v);
  }
  attnrt::StatusOr<int> SequenceLength(attnrt::runtime::SequenceId id, int layer) const override {
    return inner_->SequenceLength(id, layer);
  }
  attnrt::runtime::ExecutorStats stats() const override { return inner_->stats(); }

 private:
  std::unique_ptr<Executor> inner_;
  const int every_;
  const bool wrong_output_;
  std::int64_t requests_ = 0;  // Submit runs on one thread at a time
};

struct Point {
  double rate;
  int window_us, max_batch;
  attnrt::tools::OpenLoopResult r;
};

}  // namespace

int main(int argc, char** argv) {
  ToolOptions o;
  if (const int rc = Parse(argc, argv, &o); rc != attnrt::tools::FlagSet::kContinue) return rc;

  int max_batch = 0;
  for (int b : o.max_batches) max_batch = std::max(max_batch, b);
  double tokens_per_seq = 0;  // every point appends rate * duration / sequences tokens
  for (double rate : o.rates) tokens_per_seq += rate * o.duration_s / o.sequences;
  tokens_per_seq *= o.sweep ? o.windows_us.size() * o.max_batches.size() : 0;
  // Criteria runs: capacity, saturation (1.5x) and 70% load, at most ~1M requests/s each.
  if (o.criteria_batch > 0) tokens_per_seq += 3 * 1.0e6 * o.duration_s / o.sequences;
  max_batch = std::max(max_batch, o.criteria_batch);

  attnrt::ModelShape shape;
  shape.num_layers = 1;
  shape.num_q_heads = o.heads;
  shape.num_kv_heads = o.kv_heads;
  shape.head_dim = o.head_dim;
  shape.block_size = o.block_size;
  shape.max_context = o.context + static_cast<int>(tokens_per_seq * 1.5) + 64;
  if (auto st = shape.Validate(); !st.ok()) {
    std::fprintf(stderr, "tune_window: %s\n", st.ToString().c_str());
    return 2;
  }
  const std::int32_t blocks_needed =
      o.sequences * (shape.max_blocks_per_sequence() + 1) + 64;

  std::unique_ptr<attnrt::runtime::Executor> executor;
  std::string device;
  const bool cuda = o.device == "cuda" || (o.device == "auto" && attnrt::CudaDeviceAvailable());
  if (cuda) {
#if ATTNRT_WITH_CUDA
    attnrt::runtime::CudaExecutorOptions co;
    co.shape = shape;
    co.num_blocks = blocks_needed;
    co.max_batch_size = max_batch;
    co.num_buffers = o.buffers;
    co.offer_staging_memory = o.staging_memory;
    auto e = attnrt::runtime::CreateCudaExecutor(co);
    if (!e.ok()) {
      std::fprintf(stderr, "tune_window: %s\n", e.status().ToString().c_str());
      return 1;
    }
    executor = std::move(*e);
    device = "CUDA executor";
#else
    std::fprintf(stderr, "tune_window: --device cuda: %s\n",
                 attnrt::NoCudaDeviceReason().c_str());
    return 1;
#endif
  } else {
    attnrt::runtime::CpuExecutorOptions co;
    co.shape = shape;
    co.num_blocks = blocks_needed;
    co.max_batch_size = max_batch;
    auto e = attnrt::runtime::CpuExecutor::Create(co);
    if (!e.ok()) {
      std::fprintf(stderr, "tune_window: %s\n", e.status().ToString().c_str());
      return 1;
    }
    executor = std::move(*e);
    device = "CPU executor";
  }
  if (o.inject_failures_every > 0) {
    executor = std::make_unique<FailureInjectingExecutor>(
        std::move(executor), o.inject_failures_every, o.inject_failure_kind == "output");
    device += " (injecting failures: testing only)";
  }

  std::printf("tune_window on the %s: H=%d Hkv=%d D=%d block %d, %d sequences x %d tokens\n",
              device.c_str(), o.heads, o.kv_heads, o.head_dim, o.block_size, o.sequences,
              o.context);
  std::printf("prefilling...\n");
  {
    // Values in [-1, 1], as the open-loop runs' output check needs (RunPoint).
    std::mt19937_64 rng(12345);
    const std::vector<Half> kv = attnrt::tools::UniformHalves(
        rng, static_cast<std::size_t>(o.context) * shape.kv_token_elems());
    for (int s = 0; s < o.sequences; ++s) {
      attnrt::Status st = executor->CreateSequence(s);
      if (st.ok()) st = executor->Prefill(s, 0, o.context, kv.data(), kv.data());
      if (!st.ok()) {
        std::fprintf(stderr, "tune_window: sequence %d: %s\n", s, st.ToString().c_str());
        return 1;
      }
    }
  }

  std::vector<Point> points;
  const std::size_t total = o.rates.size() * o.windows_us.size() * o.max_batches.size();
  if (o.sweep) {
    std::printf("\n%10s %9s %9s %10s %9s %9s %9s %9s %8s %8s\n", "rate/s", "window_us",
                "max_batch", "thru/s", "batch", "p50_us", "p99_us", "p999_us", "rejected",
                "failed");
  }
  for (double rate : o.sweep ? o.rates : std::vector<double>{}) {
    for (int b : o.max_batches) {
      for (int w : o.windows_us) {
        auto r = RunPoint(o, executor.get(), rate, w, b);
        if (!r.ok()) {
          std::fprintf(stderr, "tune_window: FAILED: rate %.0f window %d batch %d: %s\n", rate,
                       w, b, r.status().ToString().c_str());
          return 1;
        }
        points.push_back({rate, w, b, *r});
        std::printf("%10.0f %9d %9d %10.0f %9.1f %9.0f %9.0f %9.0f %8lld %8lld   [%zu/%zu]\n",
                    rate, w, b, r->throughput_per_s, r->batch_mean, r->p50_us, r->p99_us,
                    r->p999_us, static_cast<long long>(r->rejected),
                    static_cast<long long>(r->failures()), points.size(), total);
        std::fflush(stdout);
        std::ostringstream what;
        what << "rate " << rate << " window " << w << " us max batch " << b;
        if (ReportFailedRequests(*r, what.str())) return 1;
      }
    }
  }

  if (o.sweep) {
    std::printf("\nrecommendation (p99 <= %.0f us, keeps up with the offered rate):\n",
                o.p99_slo_us);
  }
  for (double rate : o.sweep ? o.rates : std::vector<double>{}) {
    const Point* best = nullptr;
    for (const Point& p : points) {
      if (p.rate != rate || p.r.rejected > 0) continue;
      if (p.r.p99_us > o.p99_slo_us || p.r.throughput_per_s < 0.9 * rate) continue;
      // Among settings that keep up and meet the objective, the lowest p99 wins; within 10% of
      // it, the fuller batch (more GPU headroom for bursts).
      const bool clearly_faster = best && p.r.p99_us < 0.9 * best->r.p99_us;
      const bool as_fast_and_fuller = best && p.r.p99_us < 1.1 * best->r.p99_us &&
                                      p.r.batch_mean > best->r.batch_mean;
      if (!best || clearly_faster || as_fast_and_fuller) best = &p;
    }
    if (best) {
      std::printf("  %8.0f req/s: max_queue_delay %d us, max_batch_size %d (batch %.1f, p99 %.0f us)\n",
                  rate, best->window_us, best->max_batch, best->r.batch_mean, best->r.p99_us);
    } else {
      std::printf("  %8.0f req/s: no setting meets the objective on this device\n", rate);
    }
  }

  int criteria_failures = 0;
  if (o.criteria_batch > 0) {
    const int b = o.criteria_batch;
    const int w = o.criteria_window_us;
    auto cap = attnrt::tools::MeasureExecutorCapacity(executor.get(), b, o.sequences, o.duration_s);
    if (!cap.ok()) {
      std::fprintf(stderr, "tune_window: FAILED: capacity run: %s\n",
                   cap.status().ToString().c_str());
      return 1;
    }
    std::printf("\ncriteria at max batch %d, window %d us\n", b, w);
    std::printf("  kernel-only capacity: %.0f req/s (%lld batches of %d, step %.1f us)\n",
                cap->throughput_per_s, static_cast<long long>(cap->batches), b, cap->step_us);
    auto saturated = RunPoint(o, executor.get(), 1.5 * cap->throughput_per_s, w, b);
    auto loaded = RunPoint(o, executor.get(), 0.7 * cap->throughput_per_s, w, b);
    if (!saturated.ok() || !loaded.ok()) {
      std::fprintf(stderr, "tune_window: FAILED: criteria run: %s\n",
                   (!saturated.ok() ? saturated.status() : loaded.status()).ToString().c_str());
      return 1;
    }
    if (ReportFailedRequests(*saturated, "saturation (criteria)") ||
        ReportFailedRequests(*loaded, "70% load (criteria)")) {
      return 1;
    }
    const double ratio = saturated->throughput_per_s / cap->throughput_per_s;
    const bool sat_ok = ratio >= 0.9;
    const double bound = w + 2 * cap->step_us;
    // Shed load at 70% of capacity means the scheduler does not keep up: the p99 of the
    // accepted requests alone would flatter it.
    const bool p99_ok = loaded->p99_us <= bound && loaded->rejected == 0;
    criteria_failures = !sat_ok + !p99_ok;
    std::printf("  saturation (offered 1.5x): %.0f req/s = %.3f x capacity (>= 0.9): %s "
                "(mean batch %.1f)\n",
                saturated->throughput_per_s, ratio, sat_ok ? "PASS" : "FAIL",
                saturated->batch_mean);
    std::printf("  70%% load (%.0f req/s): p99 %.0f us <= window + 2 x step = %.0f us: %s "
                "(p50 %.0f, p999 %.0f, mean batch %.1f, %lld rejected)\n",
                0.7 * cap->throughput_per_s, loaded->p99_us, bound, p99_ok ? "PASS" : "FAIL",
                loaded->p50_us, loaded->p999_us, loaded->batch_mean,
                static_cast<long long>(loaded->rejected));
    // Where the time went (scheduler metrics): submit -> dispatch, and executor Submit -> done
    // per batch (which includes waiting behind the batches already in flight).
    for (const auto& [name, r] : {std::pair<const char*, const attnrt::tools::OpenLoopResult*>{
                                      "saturation", &*saturated},
                                  {"70% load", &*loaded}}) {
      std::printf("    %-10s queue delay p50 %.0f / p99 %.0f us, executor time per batch p50 %.0f us\n",
                  name, r->queue_delay_p50_us, r->queue_delay_p99_us, r->executor_p50_us);
    }
  }

  if (!o.json.empty()) {
    FILE* f = std::fopen(o.json.c_str(), "w");
    if (!f) {
      std::fprintf(stderr, "tune_window: cannot write %s\n", o.json.c_str());
      return 1;
    }
    std::fprintf(f, "{\"device\": \"%s\", \"points\": [\n", device.c_str());
    for (std::size_t i = 0; i < points.size(); ++i) {
      const Point& p = points[i];
      std::fprintf(f,
                   "  {\"rate\": %.0f, \"window_us\": %d, \"max_batch\": %d, \"throughput\": %.1f, "
                   "\"batch_mean\": %.2f, \"p50_us\": %.1f, \"p99_us\": %.1f, \"p999_us\": %.1f, "
                   "\"exec_p50_us\": %.1f, \"rejected\": %lld, \"failed\": %lld}%s\n",
                   p.rate, p.window_us, p.max_batch, p.r.throughput_per_s, p.r.batch_mean,
                   p.r.p50_us, p.r.p99_us, p.r.p999_us, p.r.executor_p50_us,
                   static_cast<long long>(p.r.rejected), static_cast<long long>(p.r.failures()),
                   i + 1 < points.size() ? "," : "");
    }
    std::fprintf(f, "]}\n");
    std::fclose(f);
  }
  return criteria_failures == 0 ? 0 : 3;
}
