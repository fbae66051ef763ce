// The CPU reference decode (kernels/reference.cc): time per batch and KV bytes read per second,
// FP32 and FP64 accumulation. It is the CPU executor's kernel, so this bounds what the runtime
// does on a machine without a GPU.
#include <benchmark/benchmark.h>

#include <vector>

#include "kernels/reference.h"
#include "tests/support/paged_batch.h"

namespace attnrt::kernels {
namespace {

void BM_ReferenceDecode(benchmark::State& state) {
  ModelShape shape;
  shape.num_layers = 1;
  shape.num_q_heads = static_cast<int>(state.range(1));
  shape.num_kv_heads = static_cast<int>(state.range(2));
  shape.head_dim = 128;
  shape.block_size = 16;
  const int batch = static_cast<int>(state.range(0));
  const int length = static_cast<int>(state.range(3));
  shape.max_context = length;
  const auto precision =
      state.range(4) ? ReferencePrecision::kFloat64 : ReferencePrecision::kFloat32;
  std::vector<int> lengths(batch, length);
  testing::PagedBatchOptions options;
  options.random_layers = false;
  testing::PagedBatch b = testing::MakePagedBatch(shape, lengths, options);
  ReferenceAppendKv(b.view(), b.pools());
  for (auto _ : state) {
    ReferenceDecode(b.view(), b.pools(), precision);
    benchmark::DoNotOptimize(b.out.data());
  }
  const double kv_bytes = 2.0 * batch * shape.num_kv_heads * double(length) * shape.head_dim * 2;
  state.counters["kv_GB_per_s"] =
      benchmark::Counter(kv_bytes * state.iterations() / 1e9, benchmark::Counter::kIsRate);
  state.counters["requests_per_s"] =
      benchmark::Counter(double(batch) * state.iterations(), benchmark::Counter::kIsRate);
  state.SetLabel(precision == ReferencePrecision::kFloat64 ? "fp64" : "fp32");
}

// {batch, H, Hkv, T, fp64}
BENCHMARK(BM_ReferenceDecode)
    ->Args({1, 32, 32, 512, 0})
    ->Args({8, 32, 8, 512, 0})
    ->Args({8, 32, 8, 512, 1})
    ->Args({1, 32, 8, 4096, 0})
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace attnrt::kernels

BENCHMARK_MAIN();
