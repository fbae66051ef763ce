// The GEMM decode path against its baselines and the fused kernel (targets: strided path >= 50x
// the iterative loop in wall clock at B=8 H=32 T=4096; within 1.3x of the fused kernel at B=32
// H=32 T=4096), and study 3: roofline and stage breakdown of the GEMM path.
//   path/<kv>/B:b/T:t/<method>   methods: strided (eager), strided_graph (graph replay),
//                                iterative (per query head), iterative_kv (per kv head),
//                                pointer_batched, big_gemm, fused, fused_graph
//   stages/B:b/T:t/<stage>       each GEMM-path stage alone, plus total and fused
//   chunked/<kv>/B:b/T:t/budget_MiB:m   the path (graph replay) planned within a workspace
//                                budget (0: none, one piece): chunks/slices, modelled bytes with
//                                the merge traffic; checked once against the one-piece run
//   copy_bandwidth               device-to-device copy (read + write bytes / s): the ceiling
// path/ and stages/ plan one piece (no budget): the studies compare ways of issuing one layout.
// Every batch row attends its full length T (Tpad = T); Llama-3.1-8B heads (H 32, Hkv 8, D 128,
// block 16) unless the name says mha (Hkv 32).
#include <benchmark/benchmark.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "bench/gpu_bench_util.h"
#include "kernels/decode.h"
#include "kernels/gemm_baselines.h"
#include "kernels/gemm_path.h"

namespace attnrt::bench {
namespace {

using kernels::DecodeWorkspace;
using kernels::GemmPathPlan;

struct Context {
  cudaStream_t stream = nullptr;
  cublasHandle_t cublas = nullptr;
  double copy_bw = 0.0;
};
Context& Ctx() {
  static Context c = [] {
    Context x;
    Check(cudaStreamCreateWithFlags(&x.stream, cudaStreamNonBlocking), "stream");
    Check(cublasCreate(&x.cublas), "cublasCreate");
    x.copy_bw = MeasureCopyBandwidth(x.stream);
    return x;
  }();
  return c;
}

ModelShape Shape(int kv_heads, int t) {
  ModelShape s;
  s.num_q_heads = 32;
  s.num_kv_heads = kv_heads;
  s.head_dim = 128;
  s.block_size = 16;
  s.max_context = t;
  return s;
}

// One workspace per benchmark; freed at scope exit.
struct DeviceAlloc {
  void* p = nullptr;
  std::size_t bytes = 0;
  explicit DeviceAlloc(std::size_t n) : bytes(n) {
    if (n) Check(cudaMalloc(&p, n), "malloc workspace");
  }
  ~DeviceAlloc() { cudaFree(p); }
  DecodeWorkspace ws() const { return {p, bytes}; }
};

// Captures `enqueue` on the stream into an executable graph.
struct Graph {
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  Graph(cudaStream_t stream, const std::function<void()>& enqueue) {
    Check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "begin capture");
    enqueue();
    Check(cudaStreamEndCapture(stream, &graph), "end capture");
    Check(cudaGraphInstantiate(&exec, graph, 0), "instantiate");
  }
  ~Graph() {
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
  }
};

enum class PathMethod {
  kStrided, kStridedGraph, kIterative, kIterativeKv, kPointerBatched, kBigGemm, kFused,
  kFusedGraph
};
const char* PathMethodName(PathMethod m) {
  switch (m) {
    case PathMethod::kStrided: return "strided";
    case PathMethod::kStridedGraph: return "strided_graph";
    case PathMethod::kIterative: return "iterative";
    case PathMethod::kIterativeKv: return "iterative_kv";
    case PathMethod::kPointerBatched: return "pointer_batched";
    case PathMethod::kBigGemm: return "big_gemm";
    case PathMethod::kFused: return "fused";
    case PathMethod::kFusedGraph: return "fused_graph";
  }
  return "?";
}

void RunPath(benchmark::State& state, int kv_heads, int b, int t, PathMethod method) {
  Context& ctx = Ctx();
  const ModelShape shape = Shape(kv_heads, t);
  const std::unique_ptr<DeviceDecodeBatch> made =
      MakeDeviceDecodeBatch(shape, std::vector<int>(b, t), ctx.stream);
  const DeviceDecodeBatch& data = *made;
  std::function<void()> enqueue;
  std::unique_ptr<DeviceAlloc> ws, arrays;
  GemmPathPlan plan;
  kernels::DecodePlan fused_plan;
  if (method == PathMethod::kFused || method == PathMethod::kFusedGraph) {
    const kernels::DecodeVariant& v = kernels::DefaultDecodeVariant();
    fused_plan = PlanOrExit(v, shape, b, kernels::DecodeStep::kDecode);
    ws = std::make_unique<DeviceAlloc>(fused_plan.workspace_bytes);
    CheckOk(kernels::PrepareDecodeWorkspace(fused_plan, ws->ws(), ctx.stream), "prepare");
    enqueue = [&, run = v.run] {
      CheckOk(run(fused_plan, data.batch, data.pools, ws->ws(), {ctx.stream, nullptr}),
              "fused run");
    };
  } else {
    auto p = kernels::PlanGemmPath(shape, b, t, SIZE_MAX);  // one piece: the baselines need it
    CheckOk(p, "PlanGemmPath");
    plan = *p;
    ws = std::make_unique<DeviceAlloc>(plan.workspace_bytes);
    CheckOk(kernels::PrepareGemmPathWorkspace(plan, ws->ws(), ctx.stream), "prepare");
    switch (method) {
      case PathMethod::kStrided:
      case PathMethod::kStridedGraph:
        enqueue = [&] {
          CheckOk(kernels::RunGemmPath(plan, shape, data.batch, data.pools, ws->ws(), ctx.cublas,
                                       ctx.stream),
                  "RunGemmPath");
        };
        break;
      case PathMethod::kIterative:
      case PathMethod::kIterativeKv: {
        const auto grain = method == PathMethod::kIterative
                               ? kernels::GemmIterationGrain::kQueryHead
                               : kernels::GemmIterationGrain::kKvHead;
        enqueue = [&, grain] {
          CheckOk(kernels::RunGemmIterative(plan, shape, data.batch, data.pools, data.kv_lengths,
                                            ws->ws(), ctx.cublas, ctx.stream, grain),
                  "RunGemmIterative");
        };
        break;
      }
      case PathMethod::kPointerBatched:
        arrays = std::make_unique<DeviceAlloc>(kernels::GemmPointerArrayBytes(plan));
        CheckOk(kernels::PrepareGemmPointerArrays(plan, data.batch, ws->ws(), arrays->ws()),
                "PrepareGemmPointerArrays");
        enqueue = [&] {
          CheckOk(kernels::RunGemmPointerBatched(plan, shape, data.batch, data.pools, ws->ws(),
                                                 arrays->ws(), ctx.cublas, ctx.stream),
                  "RunGemmPointerBatched");
        };
        break;
      case PathMethod::kBigGemm:
        enqueue = [&] {
          CheckOk(kernels::RunGemmBigGemm(plan, shape, data.batch, data.pools, ws->ws(),
                                          ctx.cublas, ctx.stream),
                  "RunGemmBigGemm");
        };
        break;
      default:
        break;
    }
  }
  std::unique_ptr<Graph> graph;
  if (method == PathMethod::kStridedGraph || method == PathMethod::kFusedGraph) {
    enqueue();  // warm-up outside capture (cuBLAS kernel selection, module load)
    Check(cudaStreamSynchronize(ctx.stream), "sync");
    graph = std::make_unique<Graph>(ctx.stream, enqueue);
    enqueue = [&] { Check(cudaGraphLaunch(graph->exec, ctx.stream), "graph launch"); };
  }
  GpuTimer timer(ctx.stream);
  MeasureInto(state, timer, enqueue);
  const double kv = data.kv_bytes();
  state.counters["B"] = b;
  state.counters["T"] = t;
  state.counters["Hkv"] = kv_heads;
  state.counters["kv_bytes"] = kv;
  state.counters["kv_bw_frac"] = kv / (state.counters["gpu_us"].value * 1e-6) / ctx.copy_bw;
}

// ---- study 3: stages ----------------------------------------------------------------------
void RunStages(benchmark::State& state, int b, int t, const std::string& which) {
  Context& ctx = Ctx();
  const ModelShape shape = Shape(8, t);
  const std::unique_ptr<DeviceDecodeBatch> made =
      MakeDeviceDecodeBatch(shape, std::vector<int>(b, t), ctx.stream);
  const DeviceDecodeBatch& data = *made;
  const int h = shape.num_q_heads;
  const double d = shape.head_dim;
  const double rows = static_cast<double>(b) * h;
  const double kv = data.kv_bytes();  // K+V of the live tokens
  double bytes = 0.0, flops = 0.0;
  std::function<void()> enqueue;
  std::unique_ptr<DeviceAlloc> ws;
  GemmPathPlan plan;
  kernels::DecodePlan fused_plan;
  if (which == "fused") {
    const kernels::DecodeVariant& v = kernels::DefaultDecodeVariant();
    fused_plan = PlanOrExit(v, shape, b, kernels::DecodeStep::kDecode);
    ws = std::make_unique<DeviceAlloc>(fused_plan.workspace_bytes);
    CheckOk(kernels::PrepareDecodeWorkspace(fused_plan, ws->ws(), ctx.stream), "prepare");
    enqueue = [&, run = v.run] {
      CheckOk(run(fused_plan, data.batch, data.pools, ws->ws(), {ctx.stream, nullptr}),
              "fused run");
    };
    bytes = kv + 2 * rows * d * 2;
    flops = 4.0 * rows * t * d;
  } else {
    plan = *kernels::PlanGemmPath(shape, b, t, SIZE_MAX);  // one piece: stages in run order
    ws = std::make_unique<DeviceAlloc>(plan.workspace_bytes);
    CheckOk(kernels::PrepareGemmPathWorkspace(plan, ws->ws(), ctx.stream), "prepare");
    CheckOk(kernels::RunGemmPath(plan, shape, data.batch, data.pools, ws->ws(), ctx.cublas,
                                 ctx.stream),
            "RunGemmPath");  // every buffer holds this batch's data before a stage runs alone
    const double ws_kv = static_cast<double>(plan.kv_workspace_bytes());
    const double scores = rows * plan.t_pad * 4, probs = rows * plan.t_pad * 2;
    if (which == "total") {
      enqueue = [&] {
        CheckOk(kernels::RunGemmPath(plan, shape, data.batch, data.pools, ws->ws(), ctx.cublas,
                                     ctx.stream),
                "RunGemmPath");
      };
      bytes = kv + 2 * ws_kv + scores * 2 + probs * 2 + rows * d * (2 + 4 + 4 + 2);
      flops = 4.0 * rows * plan.t_pad * d + 5.0 * rows * plan.t_pad;
    } else {
      kernels::GemmPathStage stage = kernels::GemmPathStage::kGather;
      for (kernels::GemmPathStage s : kernels::kGemmPathStages) {
        if (which == kernels::GemmPathStageName(s)) stage = s;
      }
      enqueue = [&, stage] {
        CheckOk(kernels::RunGemmPathStage(stage, plan, shape, data.batch, data.pools, ws->ws(),
                                          ctx.cublas, ctx.stream),
                "RunGemmPathStage");
      };
      switch (stage) {
        case kernels::GemmPathStage::kGather: bytes = kv + ws_kv; break;
        case kernels::GemmPathStage::kScores:
          bytes = ws_kv / 2 + rows * d * 2 + scores;
          flops = 2.0 * rows * plan.t_pad * d;
          break;
        case kernels::GemmPathStage::kSoftmax:
          bytes = scores + probs;  // one read of the scores (the second pass may hit L2)
          flops = 5.0 * rows * plan.t_pad;
          break;
        case kernels::GemmPathStage::kPv:
          bytes = ws_kv / 2 + probs + rows * d * 4;
          flops = 2.0 * rows * plan.t_pad * d;
          break;
        case kernels::GemmPathStage::kFinalize: bytes = rows * d * (4 + 2); break;
      }
    }
  }
  GpuTimer timer(ctx.stream);
  MeasureInto(state, timer, enqueue);
  const double s = state.counters["gpu_us"].value * 1e-6;
  state.counters["B"] = b;
  state.counters["T"] = t;
  state.counters["bytes"] = bytes;
  state.counters["flops"] = flops;
  state.counters["ai"] = bytes > 0 ? flops / bytes : 0.0;
  state.counters["bw_frac"] = bytes / s / ctx.copy_bw;
  state.counters["copy_bw"] = ctx.copy_bw;
}

// ---- the chunked path: one piece vs pieces within a budget --------------------------------
void RunChunked(benchmark::State& state, int kv_heads, int b, int t, int budget_mib) {
  Context& ctx = Ctx();
  const ModelShape shape = Shape(kv_heads, t);
  const std::unique_ptr<DeviceDecodeBatch> made =
      MakeDeviceDecodeBatch(shape, std::vector<int>(b, t), ctx.stream);
  const DeviceDecodeBatch& data = *made;
  const std::size_t budget = budget_mib > 0 ? std::size_t(budget_mib) << 20 : SIZE_MAX;
  const GemmPathPlan plan = *kernels::PlanGemmPath(shape, b, t, budget);
  DeviceAlloc ws(plan.workspace_bytes);
  CheckOk(kernels::PrepareGemmPathWorkspace(plan, ws.ws(), ctx.stream), "prepare");
  auto enqueue = [&] {
    CheckOk(kernels::RunGemmPath(plan, shape, data.batch, data.pools, ws.ws(), ctx.cublas,
                                 ctx.stream),
            "RunGemmPath");
  };
  // Checked once before timing: the pieces' merged output against the one-piece run's.
  const std::size_t out_elems = static_cast<std::size_t>(b) * shape.num_q_heads * shape.head_dim;
  std::vector<__half> got(out_elems), want(out_elems);
  enqueue();
  Check(cudaMemcpyAsync(got.data(), data.out, out_elems * 2, cudaMemcpyDeviceToHost, ctx.stream),
        "download");
  if (plan.pieces() > 1) {
    const GemmPathPlan whole = *kernels::PlanGemmPath(shape, b, t, SIZE_MAX);
    DeviceAlloc whole_ws(whole.workspace_bytes);
    CheckOk(kernels::RunGemmPath(whole, shape, data.batch, data.pools, whole_ws.ws(), ctx.cublas,
                                 ctx.stream),
            "RunGemmPath (one piece)");
    Check(cudaMemcpyAsync(want.data(), data.out, out_elems * 2, cudaMemcpyDeviceToHost,
                          ctx.stream),
          "download");
  }
  Check(cudaStreamSynchronize(ctx.stream), "sync");
  double max_diff = 0.0;
  for (std::size_t i = 0; plan.pieces() > 1 && i < out_elems; ++i) {
    const double d = std::abs(__half2float(got[i]) - __half2float(want[i]));
    max_diff = std::isfinite(d) ? std::max(max_diff, d) : INFINITY;
  }
  if (!(max_diff <= 2e-3)) {
    state.SkipWithError(("pieces disagree with the one-piece run: max |diff| = " +
                         std::to_string(max_diff)).c_str());
    return;
  }
  Check(cudaStreamSynchronize(ctx.stream), "sync");
  Graph graph(ctx.stream, enqueue);
  GpuTimer timer(ctx.stream);
  MeasureInto(state, timer, [&] { Check(cudaGraphLaunch(graph.exec, ctx.stream), "launch"); });

  // Model (every row at T): KV read once from the pages, written to the workspace and read back
  // by the GEMMs (over n*C >= T tokens); FP32 scores written and read, FP16 weights written and
  // read; per chunk after the first, its FP32 partial output written by PV and read by the merge
  // with the running one (written back except by the last, which writes FP16 out).
  const double rows = static_cast<double>(b) * shape.num_q_heads;
  const double d = shape.head_dim;
  const double padded = static_cast<double>(plan.num_chunks) * plan.chunk_tokens;
  const double n = plan.num_chunks;
  const double merge_bytes = (n - 1) * rows * d * 4 * 3 + (n > 2 ? (n - 2) * rows * d * 4 : 0);
  const double bytes = data.kv_bytes() + 2.0 * plan.kv_workspace_bytes() + rows * padded * 12 +
                       rows * d * (4 + 2) + merge_bytes;
  const double s = state.counters["gpu_us"].value * 1e-6;
  state.counters["B"] = b;
  state.counters["T"] = t;
  state.counters["Hkv"] = kv_heads;
  state.counters["budget_MiB"] = budget_mib;
  state.counters["workspace_MiB"] = static_cast<double>(plan.workspace_bytes) / (1 << 20);
  state.counters["chunks"] = plan.num_chunks;
  state.counters["slices"] = plan.num_slices;
  state.counters["bytes"] = bytes;
  state.counters["merge_bytes"] = merge_bytes;
  state.counters["flops"] = 4.0 * rows * padded * d + 5.0 * rows * padded;
  state.counters["bw_frac"] = bytes / s / ctx.copy_bw;
  state.counters["max_diff"] = max_diff;
}

}  // namespace
}  // namespace attnrt::bench

int main(int argc, char** argv) {
  using namespace attnrt::bench;
  const PathMethod methods[] = {PathMethod::kStrided,        PathMethod::kStridedGraph,
                                PathMethod::kIterative,      PathMethod::kIterativeKv,
                                PathMethod::kPointerBatched,
                                PathMethod::kBigGemm,        PathMethod::kFused,
                                PathMethod::kFusedGraph};
  for (int kv_heads : {8, 32}) {
    for (int b : {8, 32}) {
      for (PathMethod m : methods) {
        const std::string name = std::string("path/") + (kv_heads == 8 ? "gqa" : "mha") +
                                 "/B:" + std::to_string(b) + "/T:4096/" + PathMethodName(m);
        benchmark::RegisterBenchmark(name.c_str(), [=](benchmark::State& s) {
          RunPath(s, kv_heads, b, 4096, m);
        })->UseManualTime()->Iterations(5)->Unit(benchmark::kMicrosecond);
      }
    }
  }
  for (int b : {1, 8, 32}) {
    for (int t : {1024, 4096, 16384}) {
      for (const char* which : {"gather", "qk", "softmax", "pv", "finalize", "total", "fused"}) {
        const std::string name = "stages/B:" + std::to_string(b) + "/T:" + std::to_string(t) +
                                 "/" + which;
        benchmark::RegisterBenchmark(name.c_str(), [=](benchmark::State& s) {
          RunStages(s, b, t, which);
        })->UseManualTime()->Iterations(5)->Unit(benchmark::kMicrosecond);
      }
    }
  }
  struct ChunkedCase {
    int kv_heads, b, t;
    std::vector<int> budgets_mib;
  };
  // Issue 12's first batch (MHA, bucket 8, Tpad 12416) and a GQA batch at T 16384.
  for (const ChunkedCase& c : {ChunkedCase{32, 8, 12416, {0, 1024, 256, 64}},
                               ChunkedCase{8, 32, 16384, {0, 1024, 256}}}) {
    for (int budget : c.budgets_mib) {
      const std::string name = std::string("chunked/") + (c.kv_heads == 8 ? "gqa" : "mha") +
                               "/B:" + std::to_string(c.b) + "/T:" + std::to_string(c.t) +
                               "/budget_MiB:" + std::to_string(budget);
      benchmark::RegisterBenchmark(name.c_str(), [=](benchmark::State& s) {
        RunChunked(s, c.kv_heads, c.b, c.t, budget);
      })->UseManualTime()->Iterations(5)->Unit(benchmark::kMicrosecond);
    }
  }
  benchmark::RegisterBenchmark("copy_bandwidth", [](benchmark::State& s) {
    for (auto _ : s) s.SetIterationTime(1e-6);
    s.counters["copy_bw"] = Ctx().copy_bw;
  })->UseManualTime()->Iterations(1);
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
