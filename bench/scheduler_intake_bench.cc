// Scheduler intake throughput and per-request host overhead: 1, 2, 4, 8 producer threads submit
// as fast as they can into a Scheduler over a FakeExecutor that does no work (no step time, no
// output writes), so what is measured is the scheduler alone: validation, the copy into staging,
// the lock-free enqueue, batching, completion on the Asio pool.
//
// Reported per configuration (manual time = wall time until every producer has submitted):
//   items_per_second      accepted requests per second of intake (200k requests per round)
//   submit_cpu_ns         producer CPU time per accepted request (thread CPU clock): the host
//                         overhead a caller pays per Submit
//   submit_wall_ns        wall time per Submit of one producer (= 1 / its rate)
//   all_cpu_ns            CPU time of every thread of the process (producers, batching thread,
//                         fake executor, completion thread) per request, start to last result
//   e2e_per_s             requests per second until every result was delivered
//   batch_mean            requests per dispatched batch
//   full_retries          Submits per round refused with ResourceExhausted (max_queue_size
//                         65536; the producer yields and retries)
// One scheduler serves every round of a configuration; an untimed warm-up round first grows the
// request-record pool, so the timed rounds measure the steady state rather than first-touch page
// faults.
// Shapes: "small" H=4 Hkv=2 D=64 (q+k+v = 1 KiB copied per request); "8b" H=32 Hkv=8 D=128
// (Llama-3-8B-like, 12 KiB copied per request); "mha" H=32 Hkv=32 D=128 (the B=1 rows of
// api_host_path_bench, 24 KiB).
//
// BM_DecodeInline: one caller's Scheduler::Decode over a FakeExecutor that runs the batch on the
// calling thread at once (run_inline, outputs written), so the time per call is what Decode adds
// around a CUDA executor's Run (validation with and without check_finite, the sequence lookup,
// the inline route's counters and metrics, the result's output or the caller's), beside
// `run_ns`, the fake's Run of the same one-request batch alone.
#include <benchmark/benchmark.h>

#include <pthread.h>
#include <time.h>

#include <atomic>
#include <barrier>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "scheduler/scheduler.h"
#include "tests/support/fake_executor.h"

namespace attnrt::scheduler {
namespace {

constexpr int kRequestsPerRound = 200'000;
constexpr int kQueueSize = 4096;  // SchedulerOptions default
constexpr int kSequences = 4096;

double ThreadCpuNs() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e9 + ts.tv_nsec;
}

ModelShape ShapeFor(int which) {
  ModelShape s;
  s.num_layers = 4;
  if (which == 0) {
    s.num_q_heads = 4;
    s.num_kv_heads = 2;
    s.head_dim = 64;
  } else {
    s.num_q_heads = 32;
    s.num_kv_heads = which == 2 ? 32 : 8;
    s.head_dim = 128;
  }
  return s;
}

double ProcessCpuNs() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e9 + ts.tv_nsec;
}

// The scheduler over `executor`, or null with the benchmark skipped and the reason given.
std::unique_ptr<Scheduler> CreateOrSkip(benchmark::State& state, const SchedulerOptions& o,
                                        runtime::Executor* executor) {
  auto created = Scheduler::Create(o, executor);
  if (!created.ok()) {
    state.SkipWithError(created.status().ToString().c_str());
    return nullptr;
  }
  return std::move(created).value();
}

// One request's q, k and v for `shape`, constant (the scheduler never looks at the values).
struct RequestTensors {
  explicit RequestTensors(const ModelShape& shape)
      : q(static_cast<std::size_t>(shape.num_q_heads) * shape.head_dim, FloatToHalf(0.5f)),
        k(static_cast<std::size_t>(shape.num_kv_heads) * shape.head_dim, FloatToHalf(0.25f)),
        v(k.size(), FloatToHalf(-0.25f)) {}
  std::vector<Half> q, k, v;
};

struct RoundResult {
  double intake_s = 0;        // slowest producer's submit loop
  double e2e_s = 0;           // start until every result was delivered
  double submit_cpu_ns = 0;   // summed producer thread CPU
  double process_cpu_ns = 0;  // every thread of the process
  std::int64_t retries = 0;
};

// Args: producers, use producer tokens (0/1), shape (0 small, 1 8b), result by future (0/1).
void BM_Intake(benchmark::State& state) {
  const int producers = static_cast<int>(state.range(0));
  const bool tokens = state.range(1) != 0;
  const ModelShape shape = ShapeFor(static_cast<int>(state.range(2)));
  const bool futures = state.range(3) != 0;

  testing::FakeExecutorOptions eo;
  eo.shape = shape;
  eo.record = false;
  eo.write_outputs = false;
  eo.max_sequences = kSequences;
  eo.buckets = {1, 2, 4, 8, 16, 32, 64, 128};
  eo.max_batch_size = 128;
  eo.max_in_flight = 2;
  testing::FakeExecutor executor(eo);
  if (!executor.CreateSequences(kSequences).ok()) {
    state.SkipWithError("CreateSequences failed");
    return;
  }
  SchedulerOptions o;
  o.max_batch_size = 128;
  o.max_queue_delay = std::chrono::microseconds(100);
  o.max_queue_size = kQueueSize;
  o.completion_threads = 1;
  std::unique_ptr<Scheduler> scheduler = CreateOrSkip(state, o, &executor);
  if (scheduler == nullptr) return;

  const RequestTensors tensors(shape);
  const std::vector<Half>& q = tensors.q;
  const std::vector<Half>& k = tensors.k;
  const std::vector<Half>& v = tensors.v;
  const int per_producer = kRequestsPerRound / producers;
  const std::int64_t per_round = static_cast<std::int64_t>(per_producer) * producers;
  // Results are counted (and their staging released) on the completion thread; the output is
  // written straight to a caller-given destination, as a serving loop would.
  std::vector<Half> out(q.size());
  std::atomic<std::int64_t> delivered{0};

  auto round = [&]() {
    RoundResult result;
    const std::int64_t delivered_before = delivered.load();
    std::atomic<std::int64_t> cpu_ns{0}, wall_max_ns{0}, retries{0};
    std::barrier start(producers + 1);
    std::vector<std::thread> threads;
    for (int p = 0; p < producers; ++p) {
      threads.emplace_back([&, p] {
        std::unique_ptr<Scheduler::Producer> producer;
        if (tokens) producer = scheduler->CreateProducer();
        std::vector<ResultFuture> held;
        if (futures) held.reserve(per_producer);
        DecodeRequest r;
        r.q = q;
        r.k = k;
        r.v = v;
        r.out = out.data();  // no result copy; the fake writes nothing into it (no work)
        start.arrive_and_wait();
        const double cpu0 = ThreadCpuNs();
        const auto wall0 = std::chrono::steady_clock::now();
        std::int64_t local_retries = 0;
        for (int i = 0; i < per_producer; ++i) {
          r.sequence_id = static_cast<runtime::SequenceId>((p * per_producer + i) % kSequences);
          r.layer = i & 3;
          while (true) {
            bool ok;
            if (futures) {
              auto s = tokens ? producer->Submit(r) : scheduler->Submit(r);
              ok = s.ok();
              if (ok) held.push_back(std::move(s->result));
            } else {
              auto done = [&delivered](DecodeResult) {
                delivered.fetch_add(1, std::memory_order_relaxed);
              };
              auto s = tokens ? producer->Submit(r, done) : scheduler->Submit(r, done);
              ok = s.ok();
            }
            if (ok) break;
            ++local_retries;  // queue full: back off like a client would
            std::this_thread::yield();
          }
        }
        const std::int64_t wall = std::chrono::duration_cast<std::chrono::nanoseconds>(
                                      std::chrono::steady_clock::now() - wall0)
                                      .count();
        std::int64_t seen = wall_max_ns.load();
        while (wall > seen && !wall_max_ns.compare_exchange_weak(seen, wall)) {
        }
        cpu_ns.fetch_add(static_cast<std::int64_t>(ThreadCpuNs() - cpu0));
        retries.fetch_add(local_retries);
        for (auto& f : held) {
          f.wait();
          delivered.fetch_add(1, std::memory_order_relaxed);
        }
      });
    }
    start.arrive_and_wait();
    const double process0 = ProcessCpuNs();
    const auto t0 = std::chrono::steady_clock::now();
    for (auto& t : threads) t.join();
    while (delivered.load() - delivered_before < per_round) {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    result.e2e_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    result.process_cpu_ns = ProcessCpuNs() - process0;
    result.intake_s = static_cast<double>(wall_max_ns.load()) * 1e-9;
    result.submit_cpu_ns = static_cast<double>(cpu_ns.load());
    result.retries = retries.load();
    return result;
  };

  round();  // warm-up: grows the request-record pool and the queues' blocks to their working size
  RoundResult total;
  for (auto _ : state) {
    const RoundResult r = round();
    state.SetIterationTime(r.intake_s);
    total.intake_s += r.intake_s;
    total.e2e_s += r.e2e_s;
    total.submit_cpu_ns += r.submit_cpu_ns;
    total.process_cpu_ns += r.process_cpu_ns;
    total.retries += r.retries;
  }
  const MetricsSnapshot m = scheduler->Metrics();
  scheduler->Drain();
  const double requests = static_cast<double>(per_round) * state.iterations();
  state.SetItemsProcessed(static_cast<std::int64_t>(requests));
  state.counters["submit_cpu_ns"] = total.submit_cpu_ns / requests;
  state.counters["submit_wall_ns"] = total.intake_s * 1e9 / (requests / producers);
  state.counters["all_cpu_ns"] = total.process_cpu_ns / requests;
  state.counters["e2e_per_s"] = requests / total.e2e_s;
  state.counters["batch_mean"] = m.batch_size.Mean();
  state.counters["full_retries"] = static_cast<double>(total.retries) / state.iterations();
  state.SetLabel(std::string(state.range(2) ? "8b" : "small") + (tokens ? "/token" : "/plain") +
                 (futures ? "/future" : "/callback"));
}

BENCHMARK(BM_Intake)
    ->ArgNames({"producers", "token", "shape", "future"})
    ->ArgsProduct({{1, 2, 4, 8}, {0, 1}, {0}, {0}})
    ->Args({1, 0, 0, 1})
    ->Args({8, 1, 0, 1})
    ->Args({1, 0, 1, 0})
    ->Args({8, 1, 1, 0})
    ->UseManualTime()
    ->Iterations(5)
    ->Unit(benchmark::kMillisecond);

// Args: check_finite (0/1), shape (0 small, 1 8b, 2 mha), output to the caller's `out` (0:
// DecodeResult::output, allocated and zeroed per call; 1: DecodeRequest::out).
void BM_DecodeInline(benchmark::State& state) {
  const bool check_finite = state.range(0) != 0;
  const ModelShape shape = ShapeFor(static_cast<int>(state.range(1)));
  const bool callers_out = state.range(2) != 0;
  constexpr int kDecodeSequences = 4;
  testing::FakeExecutorOptions eo;
  eo.shape = shape;
  eo.record = false;
  eo.run_inline = true;
  eo.max_sequences = kDecodeSequences;
  testing::FakeExecutor executor(eo);
  if (!executor.CreateSequences(kDecodeSequences).ok()) {
    state.SkipWithError("CreateSequences failed");
    return;
  }
  SchedulerOptions o;
  o.check_finite = check_finite;
  std::unique_ptr<Scheduler> scheduler = CreateOrSkip(state, o, &executor);
  if (scheduler == nullptr) return;
  const RequestTensors t(shape);
  std::vector<Half> out(t.q.size()), callers(t.q.size());
  auto request = [&](std::int64_t i) {
    DecodeRequest r;
    if (callers_out) r.out = callers.data();
    r.sequence_id = static_cast<std::uint64_t>(i % kDecodeSequences);
    r.layer = static_cast<int>((i / kDecodeSequences) % shape.num_layers);
    r.q = t.q;
    r.k = t.k;
    r.v = t.v;
    return r;
  };
  // The fake's Run alone, for the same one-request batch (the executor's share of each call).
  constexpr int kRunCalls = 20000;
  const auto run_start = std::chrono::steady_clock::now();
  for (int i = 0; i < kRunCalls; ++i) {
    runtime::Batch batch;
    batch.requests.push_back({.sequence_id = static_cast<std::uint64_t>(i % kDecodeSequences),
                              .layer = (i / kDecodeSequences) % shape.num_layers,
                              .q = t.q.data(), .k = t.k.data(), .v = t.v.data(),
                              .out = out.data()});
    auto statuses = executor.Run(std::move(batch));
    if (!statuses.ok() || !(*statuses)[0].ok()) {
      state.SkipWithError("Run failed");
      return;
    }
  }
  const double run_ns = std::chrono::duration<double, std::nano>(
                            std::chrono::steady_clock::now() - run_start).count() / kRunCalls;
  std::int64_t i = 0;
  for (auto _ : state) {
    DecodeResult r = scheduler->Decode(request(i++));
    if (!r.status.ok()) {
      state.SkipWithError(r.status.ToString().c_str());
      return;
    }
    benchmark::DoNotOptimize(r.output.data());
    benchmark::DoNotOptimize(callers.data());
  }
  if (scheduler->Metrics().decoded_inline != static_cast<std::uint64_t>(i)) {
    state.SkipWithError("a Decode did not run inline");
    return;
  }
  state.counters["run_ns"] = run_ns;
}

BENCHMARK(BM_DecodeInline)
    ->ArgNames({"check_finite", "shape", "out"})
    ->ArgsProduct({{0, 1}, {0, 2}, {0, 1}})
    ->Unit(benchmark::kNanosecond);

}  // namespace
}  // namespace attnrt::scheduler

BENCHMARK_MAIN();
