// Paged decode attention (every path in the variant table, the GEMM path included) on the issue's
// shapes, timed as CUDA-graph replays with CUDA events (manual time): each graph runs `steps`
// runs of one plan (optionally append + decode) cycling over several input sets whose total
// exceeds L2, so no step reads K/V left in L2 by the previous one. Reports µs per step, achieved
// TB/s (K/V bytes once per kv head + q + out) and the ratio to a device read ceiling measured in
// this process (a read-only 16-byte-load reduction over a 4 GiB buffer, best of 10). Shapes
// "*_append" plan DecodeStep::kAppendAndDecode (fused in split_kv, the append kernel first in the
// other paths); "skew_*" batches give row 0 its own (long) context. Each shape also runs as
// BM_Decode/<shape>/default: the production default dispatch (DefaultDecodeVariant), whatever
// entry that is, beside every entry by name. The shape names are bench/sdpa_compare.py's. Use
// --benchmark_repetitions and the median aggregate (the registrations below ask for 5
// repetitions).
#include <benchmark/benchmark.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <numeric>
#include <string>
#include <string_view>
#include <vector>

#include "bench/gpu_bench_util.h"
#include "api/internal/cuda_check.h"
#include "kernels/decode.h"
#include "tests/support/device_paged_batch.h"
#include "tests/support/random_fp16.h"

namespace attnrt::kernels {
namespace {

using testing::DeviceArray;

constexpr std::size_t kRotationBytes = 256ull << 20;  // > 5x the H100's 50 MB L2
constexpr int kMinSteps = 20;

void FillRandom(Half* p, std::size_t n, std::uint32_t seed) {
  if (n == 0) return;
  bench::FillNormal(reinterpret_cast<__half*>(p), static_cast<std::int64_t>(n), seed, nullptr);
}

struct Ceilings {
  double read_tbps = 0.0;
  double copy_tbps = 0.0;  // D2D cudaMemcpy, bytes read + written (for reference)
};

// Measured once per process, before any case, so every ratio uses the same ceilings.
const Ceilings& MeasureCeilings() {
  static const Ceilings c{bench::MeasureReadBandwidth() / 1e12,
                          bench::MeasureCopyBandwidth(nullptr) / 1e12};
  return c;
}

struct BenchShape {
  const char* name;
  int batch, q_heads, kv_heads, context, head_dim, block_size;
  bool with_append;
  int max_context;
  int first_context = 0;  // > 0: row 0 attends this many tokens (a skewed batch); others `context`
};

// Tokens row `row` of the batch attends.
int RowContext(const BenchShape& s, int row) {
  return row == 0 && s.first_context > 0 ? s.first_context : s.context;
}
int LongestContext(const BenchShape& s) { return std::max(s.context, s.first_context); }

// The issue's table (H100, FP16, D=128 unless said), then the shapes it adds: D 64 and 256, GQA
// 32/4, GQA at blocks 32 and 64, B=8 T=16384, B=128 T=1024, one 32K sequence among 31 of 512.
const BenchShape kShapes[] = {
    {"mha_b32_h32_t4096_bs16", 32, 32, 32, 4096, 128, 16, false, 4096},
    {"mha_b32_h32_t4096_bs32", 32, 32, 32, 4096, 128, 32, false, 4096},
    {"mha_b32_h32_t4096_bs64", 32, 32, 32, 4096, 128, 64, false, 4096},
    {"b1_h32_t4096", 1, 32, 32, 4096, 128, 16, false, 4096},
    {"b1_h32_t65536", 1, 32, 32, 65536, 128, 16, false, 65536},
    {"gqa32_8_b32_t4096", 32, 32, 8, 4096, 128, 16, false, 4096},
    {"gqa64_8_b32_t4096", 32, 64, 8, 4096, 128, 16, false, 4096},
    {"b32_h8_t128_d64", 32, 8, 8, 128, 64, 16, false, 4096},
    {"b32_h8_t128_d64_append", 32, 8, 8, 128, 64, 16, true, 4096},
    {"mha_b32_h32_t4096_d64", 32, 32, 32, 4096, 64, 16, false, 4096},
    {"gqa16_8_b32_t4096_d256", 32, 16, 8, 4096, 256, 16, false, 4096},
    {"gqa32_4_b32_t4096", 32, 32, 4, 4096, 128, 16, false, 4096},
    {"gqa32_8_b32_t4096_bs32", 32, 32, 8, 4096, 128, 32, false, 4096},
    {"gqa32_8_b32_t4096_bs64", 32, 32, 8, 4096, 128, 64, false, 4096},
    {"b8_h32_t16384", 8, 32, 32, 16384, 128, 16, false, 16384},
    {"b128_h32_t1024", 128, 32, 32, 1024, 128, 16, false, 1024},
    {"skew_b32_h32_1x32768_31x512", 32, 32, 32, 512, 128, 16, false, 32768, 32768},
};

ModelShape ToModelShape(const BenchShape& s) {
  ModelShape m;
  m.num_layers = 1;
  m.num_q_heads = s.q_heads;
  m.num_kv_heads = s.kv_heads;
  m.head_dim = s.head_dim;
  m.block_size = s.block_size;
  m.max_context = s.max_context;
  return m;
}

// Bytes one decode step must move: K and V once per kv head, q read, out written.
double StepBytes(const BenchShape& s) {
  double tokens = 0.0;
  for (int row = 0; row < s.batch; ++row) tokens += RowContext(s, row);
  const double kv = 2.0 * s.kv_heads * tokens * s.head_dim * 2;
  const double qo = 2.0 * s.batch * s.q_heads * s.head_dim * 2;
  return kv + qo;
}

// Device-side input sets for one shape, shared by all variants (built once per shape).
struct InputSet {
  DeviceArray<Half> k_pool, v_pool, q, k_new, v_new, out;
  DeviceArray<std::int32_t> lengths, layers, tables;
  DeviceArray<float> lse;
  int num_blocks = 0, max_blocks = 0;
};

struct Fixture {
  const BenchShape* shape = nullptr;
  std::vector<std::unique_ptr<InputSet>> sets;
};

Fixture& FixtureFor(const BenchShape& s) {
  static Fixture f;
  if (f.shape == &s) return f;
  f.sets.clear();
  f.shape = &s;
  const ModelShape m = ToModelShape(s);
  const std::size_t set_bytes = static_cast<std::size_t>(StepBytes(s));
  const int n_sets = static_cast<int>(std::max<std::size_t>(2, (kRotationBytes + set_bytes - 1) / set_bytes));
  std::vector<int> blocks_of_row(s.batch);
  for (int row = 0; row < s.batch; ++row) {
    blocks_of_row[row] = (RowContext(s, row) + s.block_size - 1) / s.block_size;
  }
  const int blocks_total = std::accumulate(blocks_of_row.begin(), blocks_of_row.end(), 0);
  std::vector<std::int32_t> lengths(s.batch);
  for (int row = 0; row < s.batch; ++row) lengths[row] = RowContext(s, row);
  testing::NormalRng rng(42);
  for (int k = 0; k < n_sets; ++k) {
    auto in = std::make_unique<InputSet>();
    in->max_blocks = m.max_blocks_per_sequence();
    in->num_blocks = blocks_total;
    const std::size_t pool = static_cast<std::size_t>(in->num_blocks) * m.kv_token_elems() * s.block_size;
    bench::CheckOk(in->k_pool.Allocate(pool), "in->k_pool.Allocate");
    bench::CheckOk(in->v_pool.Allocate(pool), "in->v_pool.Allocate");
    FillRandom(in->k_pool.get(), pool, 1000 + 2 * k);
    FillRandom(in->v_pool.get(), pool, 1001 + 2 * k);
    const std::size_t qn = static_cast<std::size_t>(s.batch) * s.q_heads * s.head_dim;
    const std::size_t kvn = static_cast<std::size_t>(s.batch) * s.kv_heads * s.head_dim;
    bench::CheckOk(in->q.Allocate(qn), "in->q.Allocate");
    bench::CheckOk(in->out.Allocate(qn), "in->out.Allocate");
    bench::CheckOk(in->k_new.Allocate(kvn), "in->k_new.Allocate");
    bench::CheckOk(in->v_new.Allocate(kvn), "in->v_new.Allocate");
    bench::CheckOk(in->lse.Allocate(static_cast<std::size_t>(s.batch) * s.q_heads),
                   "in->lse.Allocate");
    FillRandom(in->q.get(), qn, 77 + k);
    FillRandom(in->k_new.get(), kvn, 88 + k);
    FillRandom(in->v_new.get(), kvn, 99 + k);
    // Shuffled block ids: pages of one sequence are scattered over the pool, as in serving.
    std::vector<std::int32_t> ids(in->num_blocks);
    std::iota(ids.begin(), ids.end(), 0);
    for (int i = in->num_blocks - 1; i > 0; --i) std::swap(ids[i], ids[rng.NextInt(0, i)]);
    std::vector<std::int32_t> tables(static_cast<std::size_t>(s.batch) * in->max_blocks, -1);
    int next = 0;
    for (int b = 0; b < s.batch; ++b) {
      for (int j = 0; j < blocks_of_row[b]; ++j) {
        tables[static_cast<std::size_t>(b) * in->max_blocks + j] = ids[next++];
      }
    }
    bench::CheckOk(in->tables.Upload(tables), "in->tables.Upload");
    bench::CheckOk(in->lengths.Upload(lengths), "in->lengths.Upload");
    bench::CheckOk(in->layers.Upload(std::vector<std::int32_t>(s.batch, 0)), "in->layers.Upload");
    f.sets.push_back(std::move(in));
  }
  bench::Check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  return f;
}

void BM_Decode(benchmark::State& state, const BenchShape* s, const DecodeVariant* v) {
  const ModelShape m = ToModelShape(*s);
  if (const Status supported = v->supports(m); !supported.ok()) {
    state.SkipWithError(supported.ToString().c_str());
    return;
  }
  const Ceilings& ceil = MeasureCeilings();
  Fixture& f = FixtureFor(*s);
  const int n_sets = static_cast<int>(f.sets.size());
  const int steps = (kMinSteps + n_sets - 1) / n_sets * n_sets;
  // One plan serves every input set (same shape and capacity); the GEMM path's Tpad bucket is
  // the one the executor would pick for this context.
  const DecodePlan plan =
      bench::PlanOrExit(*v, m, s->batch,
                        s->with_append ? DecodeStep::kAppendAndDecode : DecodeStep::kDecode,
                        LongestContext(*s));
  DeviceArray<char> ws_storage;
  bench::CheckOk(ws_storage.Allocate(plan.workspace_bytes), "ws_storage.Allocate");
  const DecodeWorkspace ws{ws_storage.get(), plan.workspace_bytes};
  cublasHandle_t cublas = nullptr;
  if (plan.uses_cublas) bench::Check(cublasCreate(&cublas), "cublasCreate");

  auto views = [&](const InputSet& in) {
    KvPoolView p;
    p.k = in.k_pool.get();
    p.v = in.v_pool.get();
    p.num_layers = 1;
    p.num_blocks = in.num_blocks;
    p.num_kv_heads = s->kv_heads;
    p.block_size = s->block_size;
    p.head_dim = s->head_dim;
    DecodeBatchView b;
    b.capacity = s->batch;
    b.num_q_heads = s->q_heads;
    b.max_blocks_per_seq = in.max_blocks;
    b.kv_lengths = in.lengths.get();
    b.layers = in.layers.get();
    b.block_tables = in.tables.get();
    b.q = in.q.get();
    b.k_new = in.k_new.get();
    b.v_new = in.v_new.get();
    b.out = in.out.get();
    b.lse = in.lse.get();
    b.scale = m.scale();
    return std::make_pair(p, b);
  };

  cudaStream_t stream;
  bench::Check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  const DecodeRunContext context{stream, cublas};
  {
    // One eager run before capture: module loading and cuBLAS's kernel choice stay out of it.
    const auto [pools, batch] = views(*f.sets[0]);
    bench::CheckOk(v->run(plan, batch, pools, ws, context), "warm-up run");
    bench::Check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  }
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  bench::Check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
  for (int i = 0; i < steps; ++i) {
    const auto [pools, batch] = views(*f.sets[i % n_sets]);
    bench::CheckOk(v->run(plan, batch, pools, ws, context), "v->run");
  }
  bench::Check(cudaStreamEndCapture(stream, &graph), "cudaStreamEndCapture");
  bench::Check(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
  cudaEvent_t a, b;
  bench::Check(cudaEventCreate(&a), "cudaEventCreate");
  bench::Check(cudaEventCreate(&b), "cudaEventCreate");
  for (int w = 0; w < 3; ++w) bench::Check(cudaGraphLaunch(exec, stream), "cudaGraphLaunch");  // warm-up
  bench::Check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  std::vector<double> step_s;
  for (auto _ : state) {
    bench::Check(cudaEventRecord(a, stream), "cudaEventRecord");
    bench::Check(cudaGraphLaunch(exec, stream), "cudaGraphLaunch");
    bench::Check(cudaEventRecord(b, stream), "cudaEventRecord");
    bench::Check(cudaEventSynchronize(b), "cudaEventSynchronize");
    float ms = 0;
    bench::Check(cudaEventElapsedTime(&ms, a, b), "cudaEventElapsedTime");
    step_s.push_back(ms * 1e-3 / steps);
    state.SetIterationTime(step_s.back());
  }
  // Median step time of this repetition (Google Benchmark then reports the median over
  // repetitions as well).
  std::nth_element(step_s.begin(), step_s.begin() + step_s.size() / 2, step_s.end());
  const double t = step_s[step_s.size() / 2];
  const double bytes = StepBytes(*s);
  state.counters["us"] = t * 1e6;
  state.counters["TBps"] = bytes / t / 1e12;
  state.counters["ratio_to_read_ceiling"] = bytes / t / 1e12 / ceil.read_tbps;
  state.counters["ceiling_TBps"] = ceil.read_tbps;
  state.counters["d2d_copy_TBps"] = ceil.copy_tbps;
  state.counters["bytes"] = bytes;
  state.counters["rotation_sets"] = n_sets;
  state.SetLabel(std::string(v->name) + (s->with_append ? " append+decode" : " decode") +
                 (s->first_context > 0 ? " (ragged: row 0 at " + std::to_string(s->first_context) +
                                             ", the rest at " + std::to_string(s->context) + ")"
                                       : std::string()));
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
  if (cublas != nullptr) cublasDestroy(cublas);
}

void BM_ReadCeiling(benchmark::State& state) {
  const Ceilings& c = MeasureCeilings();
  for (auto _ : state) state.SetIterationTime(1.0);
  state.counters["read_TBps"] = c.read_tbps;
  state.counters["d2d_copy_TBps"] = c.copy_tbps;
}

int RegisterAll() {
  benchmark::RegisterBenchmark("BM_ReadCeiling", BM_ReadCeiling)->UseManualTime()->Iterations(1);
  for (const BenchShape& s : kShapes) {
    auto add = [&](std::string_view row, const DecodeVariant* v) {
      benchmark::RegisterBenchmark(("BM_Decode/" + std::string(s.name) + "/" + std::string(row)).c_str(),
                                   BM_Decode, &s, v)
          ->UseManualTime()
          ->Unit(benchmark::kMicrosecond)
          ->MinTime(0.02)
          ->Repetitions(5)
          ->ReportAggregatesOnly(true);
    };
    for (const DecodeVariant& v : DecodeVariants()) add(v.name, &v);
    add("default", &DefaultDecodeVariant());  // its label names the entry it resolved to
  }
  return 0;
}
const int kRegistered = RegisterAll();

}  // namespace
}  // namespace attnrt::kernels

BENCHMARK_MAIN();
