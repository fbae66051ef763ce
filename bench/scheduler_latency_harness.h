// Registers the open-loop latency grid (tools/open_loop.h) as Google Benchmarks: used by
// bench/scheduler_latency_bench.cc with the FakeExecutor; a GPU benchmark registers the same grid
// with a CUDA executor factory (RegisterLatencyGrid).
#pragma once

#include <benchmark/benchmark.h>

#include <string>
#include <vector>

#include "tools/open_loop.h"

namespace attnrt::bench {

// Registers one Google Benchmark per (rate, window, max batch): name
// "<prefix>/rate:<r>/window_us:<w>/max_batch:<b>", one iteration each, manual time = elapsed.
inline void RegisterLatencyGrid(const std::string& prefix, tools::ExecutorFactory factory,
                                std::vector<double> rates, std::vector<int> windows_us,
                                std::vector<int> max_batches, double duration_s) {
  for (int b : max_batches) {
    for (int w : windows_us) {
      for (double rate : rates) {
        const std::string name = prefix + "/rate:" + std::to_string(static_cast<long>(rate)) +
                                 "/window_us:" + std::to_string(w) +
                                 "/max_batch:" + std::to_string(b);
        benchmark::RegisterBenchmark(
            name.c_str(),
            [=](benchmark::State& state) {
              tools::OpenLoopConfig config;
              config.rate_per_s = rate;
              config.window = std::chrono::microseconds(w);
              config.max_batch = b;
              config.duration_s = duration_s;
              std::shared_ptr<runtime::Executor> executor =
                  factory(b, config.num_sequences);
              for (auto _ : state) {
                auto r = tools::RunOpenLoop(config, executor.get());
                if (!r.ok()) {
                  state.SkipWithError(r.status().ToString().c_str());
                  return;
                }
                state.SetIterationTime(r->elapsed_s);
                state.counters["offered_per_s"] = rate;
                state.counters["throughput_per_s"] = r->throughput_per_s;
                state.counters["batch_mean"] = r->batch_mean;
                state.counters["p50_us"] = r->p50_us;
                state.counters["p99_us"] = r->p99_us;
                state.counters["p999_us"] = r->p999_us;
                state.counters["max_us"] = r->max_us;
                state.counters["qdelay_p50_us"] = r->queue_delay_p50_us;
                state.counters["qdelay_p99_us"] = r->queue_delay_p99_us;
                state.counters["exec_p50_us"] = r->executor_p50_us;
                state.counters["rejected"] = static_cast<double>(r->rejected);
                state.counters["failed"] = static_cast<double>(r->failed);
              }
            })
            ->Iterations(1)
            ->UseManualTime()
            ->Unit(benchmark::kMillisecond);
      }
    }
  }
}

}  // namespace attnrt::bench
