// One decode step through the CUDA executor, graph replay vs eager launches, host-memory and
// device-memory requests: GPU time from an event before the launch to the completion event
// (manual time), end-to-end time from Submit() to the done callback, Submit()'s host time and
// its parts (plan, pack, launch). Shapes: B = 1..128 at H = Hkv = 32, D = 128, T = 512, and
// B = 32, H = Hkv = 8, D = 64, T = 128. Each (seq, layer) starts at T and gains one token per
// step; layers rotate so that small batches read more KV than L2 holds (t_mean reports the
// mean context over the run). Also prints each executor's graph/workspace memory and capture
// time per bucket.
#include <benchmark/benchmark.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "api/internal/cuda_check.h"
#include "kernels/decode.h"
#include "kernels/batch_io.h"
#include "runtime/cuda_executor.h"
#include "runtime/cuda_resources.h"
#include "tests/support/random_fp16.h"
#include "tools/percentile.h"

namespace attnrt::runtime {
namespace {

using Clock = std::chrono::steady_clock;

struct ShapeCase {
  const char* name;
  int heads, head_dim, context;
  std::vector<int> batches;
};

const ShapeCase kShapes[] = {
    {"H32_D128_T512", 32, 128, 512, {1, 2, 4, 8, 32, 128}},
    {"H8_D64_T128", 8, 64, 128, {32}},
};

int LayersFor(int b) { return b <= 2 ? 8 : b <= 8 ? 4 : 2; }
int IterationsFor(int b) { return b <= 8 ? 128 : 64; }

ModelShape ShapeOf(const ShapeCase& c) {
  ModelShape s;
  s.num_layers = 8;
  s.num_q_heads = c.heads;
  s.num_kv_heads = c.heads;
  s.head_dim = c.head_dim;
  s.block_size = 16;
  s.max_context = c.context + 512;
  return s;
}

// Requests of one batch size: host buffers and device copies, random N(0,1) inputs.
struct BatchInputs {
  std::vector<SequenceId> ids;
  int layers = 1;
  std::vector<std::vector<Half>> q, k, v, out;
  std::vector<std::vector<float>> lse;
  std::vector<DeviceBuffer> dev;  // per request: q, k, v, out, lse
};

struct ExecutorCase {
  std::unique_ptr<CudaExecutor> ex;
  std::map<int, BatchInputs> inputs;  // by batch size
  SequenceId next_id = 1;
};

std::map<std::string, ExecutorCase>& Cases() {
  static std::map<std::string, ExecutorCase> cases;
  return cases;
}

ExecutorCase* GetCase(const ShapeCase& sc, LaunchMode mode, std::string* error) {
  const std::string key = std::string(sc.name) + (mode == LaunchMode::kGraph ? "/graph" : "/eager");
  auto it = Cases().find(key);
  if (it != Cases().end()) return &it->second;
  // One executor at a time: free the previous shape's before making this one.
  for (auto i = Cases().begin(); i != Cases().end();) {
    i = (i->first.rfind(sc.name, 0) == 0) ? std::next(i) : Cases().erase(i);
  }
  CudaExecutorOptions o;
  o.shape = ShapeOf(sc);
  o.mode = mode;
  o.record_timings = true;
  // Every decode variant, production default first (the one the Step runs use).
  o.paths = {std::string(kernels::DefaultDecodeVariant().name)};
  for (const kernels::DecodeVariant& v : kernels::DecodeVariants()) {
    if (v.name != o.paths[0]) o.paths.emplace_back(v.name);
  }
  int seqs = 32;  // the stage and path runs' sequences
  for (int b : sc.batches) seqs += b;
  o.num_blocks = seqs * ((sc.context + 256) / o.shape.block_size + 2);
  auto ex = CreateCudaExecutor(o);
  if (!ex.ok()) {
    *error = ex.status().ToString();
    return nullptr;
  }
  std::printf("[%s] memory: %s", key.c_str(), (*ex)->memory().ToString().c_str());
  ExecutorCase& c = Cases()[key];
  c.ex = std::move(ex).value();
  return &c;
}

// Inputs of batch size `b`, kept under `key` (stage runs use their own sequences).
BatchInputs* GetInputs(ExecutorCase& c, const ShapeCase& sc, int b, int key, std::string* error) {
  auto it = c.inputs.find(key);
  if (it != c.inputs.end()) return &it->second;
  BatchInputs in;
  const ModelShape& shape = c.ex->shape();
  in.layers = LayersFor(b);
  testing::NormalRng rng(1000 + b);
  const std::size_t q_elems = static_cast<std::size_t>(shape.num_q_heads) * shape.head_dim;
  const std::size_t kv_elems = shape.kv_token_elems();
  std::vector<Half> prompt_k(sc.context * kv_elems), prompt_v(prompt_k.size());
  for (int i = 0; i < b; ++i) {
    const SequenceId id = c.next_id++;
    Status s = c.ex->CreateSequence(id);
    for (int l = 0; l < in.layers && s.ok(); ++l) {
      testing::FillNormal(prompt_k, rng);
      testing::FillNormal(prompt_v, rng);
      s = c.ex->Prefill(id, l, sc.context, prompt_k.data(), prompt_v.data());
    }
    if (!s.ok()) {
      *error = s.ToString();
      return nullptr;
    }
    in.ids.push_back(id);
    in.q.push_back(testing::RandomNormalHalf(q_elems, rng.NextU64()));
    in.k.push_back(testing::RandomNormalHalf(kv_elems, rng.NextU64()));
    in.v.push_back(testing::RandomNormalHalf(kv_elems, rng.NextU64()));
    in.out.emplace_back(q_elems);
    in.lse.emplace_back(shape.num_q_heads);
    for (std::size_t bytes : {q_elems * 2, kv_elems * 2, kv_elems * 2, q_elems * 2,
                              static_cast<std::size_t>(shape.num_q_heads) * 4}) {
      auto d = DeviceBuffer::Create(bytes);
      if (!d.ok()) {
        *error = d.status().ToString();
        return nullptr;
      }
      in.dev.push_back(std::move(d).value());
    }
    const std::size_t base = static_cast<std::size_t>(i) * 5;
    cudaMemcpy(in.dev[base].data(), in.q.back().data(), q_elems * 2, cudaMemcpyHostToDevice);
    cudaMemcpy(in.dev[base + 1].data(), in.k.back().data(), kv_elems * 2, cudaMemcpyHostToDevice);
    cudaMemcpy(in.dev[base + 2].data(), in.v.back().data(), kv_elems * 2, cudaMemcpyHostToDevice);
  }
  return &c.inputs.emplace(key, std::move(in)).first->second;
}

using attnrt::tools::Median;

// `key` picks the input set (sequences): runs that must not grow the main runs' sequences use
// their own. `path` empty: the production default.
void BM_Step(benchmark::State& state, const ShapeCase& sc, LaunchMode mode, MemoryKind memory,
             int b, unsigned disabled_stages = 0, int key = 0, const std::string& path = "") {
  std::string error;
  ExecutorCase* c = GetCase(sc, mode, &error);
  BatchInputs* in = c ? GetInputs(*c, sc, b, key == 0 ? b : key, &error) : nullptr;
  if (in == nullptr) {
    state.SkipWithError(error.c_str());
    return;
  }
  CudaExecutor& ex = *c->ex;
  const std::string default_path(ex.active_path());
  if (!path.empty() && !ex.SelectPath(path).ok()) {
    state.SkipWithError(("no path " + path).c_str());
    return;
  }
  ex.SetDisabledStagesForBenchmark(disabled_stages);
  std::vector<double> gpu, e2e, submit, plan, pack, launch;
  double t_sum = 0;
  int step = 0;
  (void)ex.TakeTimings();
  for (auto _ : state) {
    const int layer = step++ % in->layers;
    Batch batch;
    for (int i = 0; i < b; ++i) {
      BatchRequest r;
      r.sequence_id = in->ids[i];
      r.layer = layer;
      r.memory = memory;
      if (memory == MemoryKind::kHost) {
        r.q = in->q[i].data();
        r.k = in->k[i].data();
        r.v = in->v[i].data();
        r.out = in->out[i].data();
        r.lse = in->lse[i].data();
      } else {
        DeviceBuffer* d = &in->dev[static_cast<std::size_t>(i) * 5];
        r.q = d[0].as<Half>();
        r.k = d[1].as<Half>();
        r.v = d[2].as<Half>();
        r.out = d[3].as<Half>();
        r.lse = d[4].as<float>();
      }
      batch.requests.push_back(r);
    }
    t_sum += *ex.SequenceLength(in->ids[0], layer) + 1;
    std::atomic<bool> fired{false};
    bool ok = true;
    const Clock::time_point t0 = Clock::now();
    const Status s = ex.Submit(std::move(batch), [&](std::vector<Status> st) {
      for (const Status& x : st) ok = ok && x.ok();
      fired.store(true, std::memory_order_release);
    });
    const Clock::time_point t1 = Clock::now();
    if (!s.ok()) {
      state.SkipWithError(s.ToString().c_str());
      break;
    }
    while (!fired.load(std::memory_order_acquire)) {
    }
    const Clock::time_point t2 = Clock::now();
    if (!ok) {
      state.SkipWithError("a request failed");
      break;
    }
    std::vector<PieceTimings> t = ex.TakeTimings();
    double g = 0, pl = 0, pk = 0, la = 0;
    for (const PieceTimings& p : t) {
      g += p.gpu_us;
      pl += p.plan_us;
      pk += p.pack_us;
      la += p.launch_us;
    }
    gpu.push_back(g);
    plan.push_back(pl);
    pack.push_back(pk);
    launch.push_back(la);
    submit.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    e2e.push_back(std::chrono::duration<double, std::micro>(t2 - t0).count());
    state.SetIterationTime(g * 1e-6);
  }
  ex.SetDisabledStagesForBenchmark(0);
  (void)ex.SelectPath(default_path);
  state.counters["gpu_us_med"] = Median(gpu);
  state.counters["e2e_us_med"] = Median(e2e);
  state.counters["submit_us_med"] = Median(submit);
  state.counters["plan_us_med"] = Median(plan);
  state.counters["pack_us_med"] = Median(pack);
  state.counters["launch_us_med"] = Median(launch);
  state.counters["pack_us_per_req"] = Median(pack) / b;
  state.counters["plan_pack_us_per_req"] = (Median(plan) + Median(pack)) / b;
  state.counters["t_mean"] = step ? t_sum / step : 0.0;
}

// ---- floors: the same graph building blocks alone ------------------------------------------
// launch-to-completion of graphs made of the step's pieces without the executor around them:
// one no-op kernel (the gather kernel on an all-padding batch row), one H2D or D2H memcpy node
// from or to pinned memory, and the chain H2D -> kernel(s) -> D2H, with and without `disabled`
// extra kernel nodes (what the executor's toggled-off gather/scatter cost).
struct RawGraph {
  Graph graph;
  GraphExec exec;
};

void BM_RawGraph(benchmark::State& state, std::size_t h2d_bytes, int kernels, int disabled,
                 std::size_t d2h_bytes, bool eager) {
  auto stream = Stream::Create();
  auto start = Event::Create(true);
  auto end = Event::Create(true);
  auto host_in = PinnedBuffer::Create(std::max<std::size_t>(h2d_bytes, 64));
  auto host_out = PinnedBuffer::Create(std::max<std::size_t>(d2h_bytes, 64));
  auto dev = DeviceBuffer::Create(std::max<std::size_t>(std::max(h2d_bytes, d2h_bytes), 64) + 64);
  auto graph = Graph::Create();
  if (!stream.ok() || !start.ok() || !end.ok() || !host_in.ok() || !host_out.ok() || !dev.ok() ||
      !graph.ok()) {
    state.SkipWithError("allocation failed");
    return;
  }
  cudaMemset(dev->data(), 0, dev->bytes());
  kernels::BatchIoArgs io;  // one padding row: the kernel reads kv_lengths[0] == 0 and exits
  io.capacity = 1;
  io.kv_lengths = dev->as<std::int32_t>(dev->bytes() - 64);
  cudaGraph_t g = graph->get();
  cudaGraphNode_t last = nullptr;
  auto add = [&](Status s) {
    if (!s.ok()) state.SkipWithError(s.ToString().c_str());
  };
  if (h2d_bytes > 0) {
    cudaGraphAddMemcpyNode1D(&last, g, nullptr, 0, dev->data(), host_in->data(), h2d_bytes,
                             cudaMemcpyHostToDevice);
  }
  std::vector<cudaGraphNode_t> off;
  for (int i = 0; i < kernels + disabled; ++i) {
    cudaGraphNode_t node = nullptr;
    add(kernels::AddGatherNode(g, last ? &last : nullptr, last ? 1 : 0, io, &node));
    last = node;
    if (i >= kernels) off.push_back(node);
  }
  if (d2h_bytes > 0) {
    cudaGraphNode_t node = nullptr;
    cudaGraphAddMemcpyNode1D(&node, g, last ? &last : nullptr, last ? 1 : 0, host_out->data(),
                             dev->data(), d2h_bytes, cudaMemcpyDeviceToHost);
  }
  if (eager) {  // the same pieces as stream-ordered launches
    std::vector<double> gpu, host;
    for (auto _ : state) {
      cudaEventRecord(start->get(), stream->get());
      const Clock::time_point t0 = Clock::now();
      if (h2d_bytes > 0) {
        cudaMemcpyAsync(dev->data(), host_in->data(), h2d_bytes, cudaMemcpyHostToDevice,
                        stream->get());
      }
      for (int i = 0; i < kernels; ++i) add(kernels::LaunchGather(io, stream->get()));
      if (d2h_bytes > 0) {
        cudaMemcpyAsync(host_out->data(), dev->data(), d2h_bytes, cudaMemcpyDeviceToHost,
                        stream->get());
      }
      const Clock::time_point t1 = Clock::now();
      cudaEventRecord(end->get(), stream->get());
      cudaEventSynchronize(end->get());
      float ms = 0;
      cudaEventElapsedTime(&ms, start->get(), end->get());
      gpu.push_back(ms * 1e3);
      host.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
      state.SetIterationTime(ms * 1e-3);
    }
    state.counters["gpu_us_med"] = Median(gpu);
    state.counters["launch_us_med"] = Median(host);
    return;
  }
  auto exec = GraphExec::Instantiate(*graph);
  if (!exec.ok()) {
    state.SkipWithError(exec.status().ToString().c_str());
    return;
  }
  for (cudaGraphNode_t n : off) cudaGraphNodeSetEnabled(exec->get(), n, 0);
  cudaGraphUpload(exec->get(), stream->get());
  for (int i = 0; i < 10; ++i) cudaGraphLaunch(exec->get(), stream->get());
  cudaStreamSynchronize(stream->get());
  std::vector<double> gpu, host;
  for (auto _ : state) {
    cudaEventRecord(start->get(), stream->get());
    const Clock::time_point t0 = Clock::now();
    cudaGraphLaunch(exec->get(), stream->get());
    const Clock::time_point t1 = Clock::now();
    cudaEventRecord(end->get(), stream->get());
    cudaEventSynchronize(end->get());
    float ms = 0;
    cudaEventElapsedTime(&ms, start->get(), end->get());
    gpu.push_back(ms * 1e3);
    host.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    state.SetIterationTime(ms * 1e-3);
  }
  if (cudaGetLastError() != cudaSuccess) state.SkipWithError("CUDA error");
  state.counters["gpu_us_med"] = Median(gpu);
  state.counters["launch_us_med"] = Median(host);
}

void RegisterRawFloors() {
  const struct {
    const char* name;
    std::size_t h2d;
    int kernels, disabled;
    std::size_t d2h;
  } cases[] = {
      {"kernel", 0, 1, 0, 0},
      {"h2d_25KB", 25 << 10, 0, 0, 0},
      {"d2h_8KB", 0, 0, 0, 8 << 10},
      {"h2d_25KB_kernel_d2h_8KB", 25 << 10, 1, 0, 8 << 10},
      {"h2d_25KB_3kernels_d2h_8KB", 25 << 10, 3, 0, 8 << 10},
      {"h2d_25KB_3kernels_2disabled_d2h_8KB", 25 << 10, 3, 2, 8 << 10},
  };
  for (bool eager : {false, true}) {
    for (const auto& c : cases) {
      if (eager && c.disabled > 0) continue;
      benchmark::RegisterBenchmark(
          (std::string(eager ? "Floor/eager/" : "Floor/graph/") + c.name).c_str(),
          [c, eager](benchmark::State& st) {
            BM_RawGraph(st, c.h2d, c.kernels, c.disabled, c.d2h, eager);
          })
          ->UseManualTime()
          ->Iterations(200)
          ->Unit(benchmark::kMicrosecond);
    }
  }
}

}  // namespace
}  // namespace attnrt::runtime

int main(int argc, char** argv) {
  using namespace attnrt::runtime;
  benchmark::Initialize(&argc, argv);
  if (!attnrt::CudaDeviceAvailable()) {
    std::fprintf(stderr, "runtime_step_bench: no CUDA device; nothing to measure\n");
    return 0;
  }
  for (const ShapeCase& sc : kShapes) {
    for (LaunchMode mode : {LaunchMode::kGraph, LaunchMode::kEager}) {
      for (MemoryKind mem : {MemoryKind::kHost, MemoryKind::kDevice}) {
        for (int b : sc.batches) {
          const std::string name = std::string("Step/") + sc.name + "/" +
                                   (mode == LaunchMode::kGraph ? "graph" : "eager") + "/" +
                                   (mem == MemoryKind::kHost ? "host" : "device") + "/B" +
                                   std::to_string(b);
          benchmark::RegisterBenchmark(name.c_str(),
                                       [&sc, mode, mem, b](benchmark::State& st) {
                                         BM_Step(st, sc, mode, mem, b);
                                       })
              ->UseManualTime()
              ->Iterations(IterationsFor(b))
              ->Unit(benchmark::kMicrosecond);
        }
      }
    }
    // Stage costs of one graph step as differences (outputs of these runs are garbage; they run
    // on sequences of their own).
    if (&sc == &kShapes[0]) {
      const struct {
        const char* name;
        unsigned mask;
      } masks[] = {
          {"full", 0},
          {"no_compute", CudaExecutor::kStageCompute},
          {"meta_h2d_compute", CudaExecutor::kStageH2DInputs | CudaExecutor::kStageD2H},
          {"full_h2d_only", CudaExecutor::kStageCompute | CudaExecutor::kStageD2H},
          {"meta_h2d_d2h", CudaExecutor::kStageCompute | CudaExecutor::kStageH2DInputs},
          {"meta_h2d_only", CudaExecutor::kStageH2DInputs | CudaExecutor::kStageCompute |
                                CudaExecutor::kStageD2H},
      };
      for (const auto& m : masks) {
        for (int b : {1, 8}) {
          const std::string name = std::string("Stages/") + sc.name + "/graph/host/" + m.name +
                                   "/B" + std::to_string(b);
          const unsigned mask = m.mask;
          benchmark::RegisterBenchmark(name.c_str(),
                                       [&sc, mask, b](benchmark::State& st) {
                                         BM_Step(st, sc, LaunchMode::kGraph, MemoryKind::kHost,
                                                 b, mask, /*key=*/-b);
                                       })
              ->UseManualTime()
              ->Iterations(64)
              ->Unit(benchmark::kMicrosecond);
        }
      }
    }
    // Every decode variant at small batches, graph and eager (own sequences).
    if (&sc == &kShapes[0]) {
      for (const attnrt::kernels::DecodeVariant& v : attnrt::kernels::DecodeVariants()) {
        for (LaunchMode mode : {LaunchMode::kGraph, LaunchMode::kEager}) {
          for (int b : {1, 8}) {
            const std::string path(v.name);
            const std::string name = std::string("Path/") + sc.name + "/" + path + "/" +
                                     (mode == LaunchMode::kGraph ? "graph" : "eager") +
                                     "/host/B" + std::to_string(b);
            benchmark::RegisterBenchmark(name.c_str(),
                                         [&sc, mode, b, path](benchmark::State& st) {
                                           BM_Step(st, sc, mode, MemoryKind::kHost, b, 0,
                                                   /*key=*/-100 - b, path);
                                         })
                ->UseManualTime()
                ->Iterations(64)
                ->Unit(benchmark::kMicrosecond);
          }
        }
      }
    }
  }
  RegisterRawFloors();
  benchmark::RunSpecifiedBenchmarks();
  Cases().clear();
  benchmark::Shutdown();
  return 0;
}
