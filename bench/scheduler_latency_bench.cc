// Latency/throughput curves of the scheduler under open-loop Poisson load, over a FakeExecutor
// that models a device: batches run one after another, each taking 20 us + 2 us per request of
// its padded bucket (a CPU stand-in for a decode step; capacity at full batches: 8 -> 222k req/s,
// 32 -> 381k req/s, 128 -> 464k req/s). Grid: rates {20k, 100k, 200k, 300k req/s} x windows
// {0, 50, 200, 1000 us} x max batch {8, 32, 128}; 0.25 s of arrivals each (about 15 s in all). Shape H=32 Hkv=8 D=128 (12 KiB of q/k/v copied per request).
// The same grid runs on a GPU by registering RegisterLatencyGrid with a CUDA executor factory.
#include <benchmark/benchmark.h>

#include "bench/scheduler_latency_harness.h"
#include "tests/support/fake_executor.h"

namespace {

std::shared_ptr<attnrt::runtime::Executor> MakeFakeDevice(int /*max_batch*/, int num_sequences) {
  attnrt::testing::FakeExecutorOptions o;
  o.shape.num_layers = 1;
  o.shape.num_q_heads = 32;
  o.shape.num_kv_heads = 8;
  o.shape.head_dim = 128;
  o.max_batch_size = 128;
  o.buckets = {1, 2, 4, 8, 16, 32, 64, 128};
  o.max_in_flight = 2;
  o.record = false;
  o.max_sequences = num_sequences;
  o.step_time = [](int bucket) {
    return std::chrono::nanoseconds(20'000 + 2'000 * static_cast<std::int64_t>(bucket));
  };
  return std::make_shared<attnrt::testing::FakeExecutor>(o);
}

}  // namespace

int main(int argc, char** argv) {
  attnrt::bench::RegisterLatencyGrid("fake_device", MakeFakeDevice, {20'000, 100'000, 200'000, 300'000},
                                     {0, 50, 200, 1000}, {8, 32, 128}, /*duration_s=*/0.25);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
