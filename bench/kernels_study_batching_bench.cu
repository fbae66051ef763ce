// Study 2 (after an L4 study: per-query latency of an FP16 flash kernel falling 40.9x from
// B x H = 1 to 256, max diff < 0.002 vs PyTorch): the same (B, H) table on an H100 for the fused
// decode kernel and the GEMM path, D = 64, MHA (Hkv = H), every batch row at context T (128 as in
// the seed, and 4096). Per-query latency = time / (B x H); CTAs vs SMs; max |out - ref| against the
// FP64 CPU reference on the same random inputs. PyTorch SDPA: bench/studies/sdpa_batching.py.
//   batching/T:t/B:b/H:h/<fused|gemm>
#include <benchmark/benchmark.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "bench/gpu_bench_util.h"
#include "kernels/decode.h"
#include "kernels/decode_internal.h"
#include "kernels/gemm_path.h"
#include "tests/support/gemm_device_batch.h"
#include "tests/support/paged_batch.h"

namespace attnrt::bench {
namespace {

struct Context {
  cudaStream_t stream = nullptr;
  cublasHandle_t cublas = nullptr;
};
Context& Ctx() {
  static Context c = [] {
    Context x;
    Check(cudaStreamCreateWithFlags(&x.stream, cudaStreamNonBlocking), "stream");
    Check(cublasCreate(&x.cublas), "cublasCreate");
    return x;
  }();
  return c;
}

void RunBatching(benchmark::State& state, int t, int b, int h, bool fused) {
  Context& ctx = Ctx();
  ModelShape shape;
  shape.num_q_heads = h;
  shape.num_kv_heads = h;
  shape.head_dim = 64;
  shape.block_size = 16;
  shape.max_context = t;
  testing::PagedBatchOptions opts;
  opts.seed = 7 + b * 131 + h * 7 + t;
  opts.random_layers = false;
  testing::PagedBatch host = testing::MakePagedBatch(shape, std::vector<int>(b, t), opts);
  kernels::ReferenceAppendKv(host.view(), host.pools());
  testing::DeviceBatch dev(host);

  std::function<void()> enqueue;
  void* ws = nullptr;
  std::size_t ws_bytes = 0;
  kernels::GemmPathPlan plan;
  kernels::DecodePlan fused_plan;
  double ctas = 0.0;
  const double sms = SmCount();
  if (fused) {
    const kernels::DecodeVariant& v = kernels::DefaultDecodeVariant();
    fused_plan = PlanOrExit(v, shape, b, kernels::DecodeStep::kDecode);
    ws_bytes = fused_plan.workspace_bytes;
    // CTAs that do work: per (batch row, kv head), the splits the row's length uses.
    ctas = static_cast<double>(b) * shape.num_kv_heads *
           kernels::SplitRow(t, fused_plan.split_kv).num_splits;
    if (ws_bytes) Check(cudaMalloc(&ws, ws_bytes), "malloc ws");
    CheckOk(kernels::PrepareDecodeWorkspace(fused_plan, {ws, ws_bytes}, ctx.stream), "prepare");
    enqueue = [&, run = v.run] {
      CheckOk(run(fused_plan, dev.batch_view, dev.pools_view, {ws, ws_bytes}, {ctx.stream, nullptr}),
              "fused run");
    };
  } else {
    plan = *kernels::PlanGemmPath(shape, b, *kernels::ChooseGemmPathTpad(shape, t));
    ws_bytes = plan.workspace_bytes;
    Check(cudaMalloc(&ws, ws_bytes), "malloc ws");
    CheckOk(kernels::PrepareGemmPathWorkspace(plan, {ws, ws_bytes}, ctx.stream), "prepare");
    // The gather's CTAs (one per 64 tokens of a (batch row, kv head) at D = 64); the GEMMs' grids
    // are cuBLAS's choice.
    ctas = static_cast<double>(b) * shape.num_kv_heads * plan.t_pad / 64;
    enqueue = [&] {
      CheckOk(kernels::RunGemmPath(plan, shape, dev.batch_view, dev.pools_view, {ws, ws_bytes},
                                   ctx.cublas, ctx.stream),
              "RunGemmPath");
    };
  }
  // Correctness on this exact batch: one run, then max |out - ref| over live outputs.
  dev.Poison();
  enqueue();
  Check(cudaStreamSynchronize(ctx.stream), "sync");
  std::vector<float> ref(host.out.size());
  std::vector<Half> ref_out(host.out.size());
  kernels::DecodeBatchView ref_view = host.view();
  ref_view.out = ref_out.data();
  ref_view.lse = nullptr;
  kernels::ReferenceDecode(ref_view, host.pools(), kernels::ReferencePrecision::kFloat64,
                           ref.data());
  const testing::OutputError err = testing::CompareOutput(host, dev.DownloadOut(), ref);

  GpuTimer timer(ctx.stream);
  MeasureInto(state, timer, enqueue);
  const double queries = static_cast<double>(b) * h;
  state.counters["B"] = b;
  state.counters["H"] = h;
  state.counters["T"] = t;
  state.counters["BxH"] = queries;
  state.counters["per_query_gpu_us"] = state.counters["gpu_us"].value / queries;
  state.counters["per_query_wall_us"] = state.counters["wall_us"].value / queries;
  state.counters["ctas"] = ctas;
  state.counters["ctas_per_sm"] = ctas / sms;
  state.counters["max_diff"] = err.non_finite ? INFINITY : err.max_abs;
  state.counters["rel_l2"] = err.rel_l2;
  cudaFree(ws);
}

}  // namespace
}  // namespace attnrt::bench

int main(int argc, char** argv) {
  using namespace attnrt::bench;
  const std::pair<int, int> configs[] = {{1, 1}, {2, 4}, {8, 4}, {16, 8}, {32, 8}};  // the seed's
  for (int t : {128, 4096}) {
    for (auto [b, h] : configs) {
      for (bool fused : {true, false}) {
        const std::string name = "batching/T:" + std::to_string(t) + "/B:" + std::to_string(b) +
                                 "/H:" + std::to_string(h) + "/" + (fused ? "fused" : "gemm");
        benchmark::RegisterBenchmark(name.c_str(), [=](benchmark::State& s) {
          RunBatching(s, t, b, h, fused);
        })->UseManualTime()->Iterations(7)->Unit(benchmark::kMicrosecond);
      }
    }
  }
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
