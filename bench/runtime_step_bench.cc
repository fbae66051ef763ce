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

#include "kernels/cuda_check.h"
#include "runtime/cuda_executor.h"
#include "runtime/cuda_resources.h"
#include "tests/support/random_fp16.h"

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
  int seqs = 16;  // the stage runs' sequences
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

double Median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

void BM_Step(benchmark::State& state, const ShapeCase& sc, LaunchMode mode, MemoryKind memory,
             int b, unsigned disabled_stages = 0) {
  std::string error;
  ExecutorCase* c = GetCase(sc, mode, &error);
  const int key = disabled_stages != 0 || b < 0 ? -std::abs(b) : b;
  b = std::abs(b);
  BatchInputs* in = c ? GetInputs(*c, sc, b, key, &error) : nullptr;
  if (in == nullptr) {
    state.SkipWithError(error.c_str());
    return;
  }
  CudaExecutor& ex = *c->ex;
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
    // Stage costs of one graph step as differences (outputs of these runs are garbage; they run
    // first, on sequences of their own batch size + 1000 so later runs read written tokens).
    if (&sc == &kShapes[0]) {
      const struct {
        const char* name;
        unsigned mask;
      } masks[] = {
          {"full", 0},
          {"no_compute", CudaExecutor::kStageCompute},
          {"compute_only", CudaExecutor::kStageH2D | CudaExecutor::kStageD2H},
          {"h2d_only", CudaExecutor::kStageCompute | CudaExecutor::kStageD2H},
          {"d2h_only", CudaExecutor::kStageCompute | CudaExecutor::kStageH2D},
          {"empty", CudaExecutor::kStageH2D | CudaExecutor::kStageCompute |
                        CudaExecutor::kStageD2H},
      };
      for (const auto& m : masks) {
        for (int b : {1, 8}) {
          const std::string name = std::string("Stages/") + sc.name + "/graph/host/" + m.name +
                                   "/B" + std::to_string(b);
          const unsigned mask = m.mask;
          benchmark::RegisterBenchmark(name.c_str(),
                                       [&sc, mask, b](benchmark::State& st) {
                                         // -b: the stage runs' own sequences
                                         BM_Step(st, sc, LaunchMode::kGraph, MemoryKind::kHost,
                                                 -b, mask);
                                       })
              ->UseManualTime()
              ->Iterations(64)
              ->Unit(benchmark::kMicrosecond);
        }
      }
    }
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
  }
  benchmark::RunSpecifiedBenchmarks();
  Cases().clear();
  benchmark::Shutdown();
  return 0;
}
