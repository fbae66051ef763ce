// The host's cost of one cudaGraphLaunch into an idle stream, by what the graph holds: kernel
// nodes, the event wait and record nodes that order the executor's computes across its
// pipeline buffers, and a host-to-device copy of the step's metadata (a memcpy node). Each
// iteration times the launch call alone on the host's steady clock, then waits for the stream
// (untimed), so every launch finds the GPU idle, as a lone piece's does.
//
//   runtime_graph_launch_bench [--benchmark_format=json ...]
//
// Needs a CUDA device; without one every benchmark reports an error and is skipped.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include <benchmark/benchmark.h>
#include <cuda_runtime.h>

namespace {

__global__ void EmptyKernel(int* sink) {
  if (sink != nullptr && threadIdx.x == 0 && blockIdx.x == 0) *sink = 1;
}

// A kernel parameter the size of a decode step's batch view and plan.
struct BigParams {
  int* sink;
  long long words[95];
};
__global__ void BigParamsKernel(BigParams p) {
  if (threadIdx.x == 0 && blockIdx.x == 0) *p.sink = static_cast<int>(p.words[94]);
}

#define PROBE_CHECK(call)                                                         \
  do {                                                                            \
    const cudaError_t e_ = (call);                                                \
    if (e_ != cudaSuccess) {                                                      \
      state.SkipWithError((std::string(#call) + ": " + cudaGetErrorString(e_)).c_str()); \
      return;                                                                     \
    }                                                                             \
  } while (0)

struct Shape {
  int kernels = 1;             // a chain of empty kernels
  bool wait_node = false;      // an event wait node before the first kernel
  bool record_node = false;    // an event record node after the last kernel
  std::size_t copy_bytes = 0;  // a pinned host -> device memcpy node before the kernels
  int grid = 1;                // each kernel's CTAs
  bool programmatic = false;   // kernels chained by programmatic edges (PDL) instead of full ones
  bool big_params = false;     // 768-byte kernel parameters
};

void Launch(benchmark::State& state, const Shape& shape) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    state.SkipWithError("no CUDA device");
    return;
  }
  cudaStream_t stream = nullptr;
  PROBE_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaEvent_t waited = nullptr, recorded = nullptr;
  PROBE_CHECK(cudaEventCreateWithFlags(&waited, cudaEventDisableTiming));
  PROBE_CHECK(cudaEventCreateWithFlags(&recorded, cudaEventDisableTiming));
  PROBE_CHECK(cudaEventRecord(waited, stream));
  void* host = nullptr;
  void* device = nullptr;
  if (shape.copy_bytes > 0) {
    PROBE_CHECK(cudaMallocHost(&host, shape.copy_bytes));
    PROBE_CHECK(cudaMalloc(&device, shape.copy_bytes));
  }
  int* sink = nullptr;
  PROBE_CHECK(cudaMalloc(&sink, sizeof(int)));

  cudaGraph_t graph = nullptr;
  PROBE_CHECK(cudaGraphCreate(&graph, 0));
  cudaGraphNode_t last = nullptr;
  auto deps = [&] { return last == nullptr ? 0u : 1u; };
  if (shape.wait_node) {
    cudaGraphNode_t node = nullptr;
    PROBE_CHECK(cudaGraphAddEventWaitNode(&node, graph, nullptr, 0, waited));
    last = node;
  }
  if (shape.copy_bytes > 0) {
    cudaGraphNode_t node = nullptr;
    PROBE_CHECK(cudaGraphAddMemcpyNode1D(&node, graph, &last, deps(), device, host,
                                         shape.copy_bytes, cudaMemcpyHostToDevice));
    last = node;
  }
  BigParams big{};
  big.sink = sink;
  for (int k = 0; k < shape.kernels; ++k) {
    cudaKernelNodeParams params{};
    void* args[] = {&sink};
    void* big_args[] = {&big};
    params.func = shape.big_params ? reinterpret_cast<void*>(BigParamsKernel)
                                   : reinterpret_cast<void*>(EmptyKernel);
    params.gridDim = dim3(shape.grid);
    params.blockDim = dim3(128);
    params.kernelParams = shape.big_params ? big_args : args;
    cudaGraphNode_t node = nullptr;
    const bool after_kernel = k > 0;
    PROBE_CHECK(cudaGraphAddKernelNode(&node, graph, nullptr, 0, &params));
    if (last != nullptr) {
      cudaGraphEdgeData edge{};
      if (shape.programmatic && after_kernel) {
        edge.type = cudaGraphDependencyTypeProgrammatic;
        edge.from_port = cudaGraphKernelNodePortProgrammatic;
      }
      PROBE_CHECK(cudaGraphAddDependencies(graph, &last, &node, &edge, 1));
    }
    last = node;
  }
  if (shape.record_node) {
    cudaGraphNode_t node = nullptr;
    PROBE_CHECK(cudaGraphAddEventRecordNode(&node, graph, &last, deps(), recorded));
    last = node;
  }
  cudaGraphExec_t exec = nullptr;
  PROBE_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  PROBE_CHECK(cudaGraphUpload(exec, stream));
  for (int i = 0; i < 50; ++i) PROBE_CHECK(cudaGraphLaunch(exec, stream));  // warm-up
  PROBE_CHECK(cudaStreamSynchronize(stream));

  std::vector<double> launches;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    const cudaError_t e = cudaGraphLaunch(exec, stream);
    const auto t1 = std::chrono::steady_clock::now();
    if (e != cudaSuccess) {
      state.SkipWithError(cudaGetErrorString(e));
      break;
    }
    const double seconds = std::chrono::duration<double>(t1 - t0).count();
    state.SetIterationTime(seconds);
    launches.push_back(seconds * 1e6);
    if (cudaStreamSynchronize(stream) != cudaSuccess) {
      state.SkipWithError("cudaStreamSynchronize failed");
      break;
    }
  }
  if (!launches.empty()) {
    std::sort(launches.begin(), launches.end());
    state.counters["launch_p50_us"] = launches[launches.size() / 2];
    state.counters["launch_p99_us"] = launches[launches.size() * 99 / 100];
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaFree(sink);
  if (device != nullptr) cudaFree(device);
  if (host != nullptr) cudaFreeHost(host);
  cudaEventDestroy(recorded);
  cudaEventDestroy(waited);
  cudaStreamDestroy(stream);
}

void BM_OneKernel(benchmark::State& state) { Launch(state, {}); }
void BM_Kernels(benchmark::State& state) {
  Launch(state, {.kernels = static_cast<int>(state.range(0))});
}
void BM_OneKernelWide(benchmark::State& state) {
  Launch(state, {.grid = static_cast<int>(state.range(0))});
}
void BM_KernelAndEventWait(benchmark::State& state) { Launch(state, {.wait_node = true}); }
void BM_KernelAndEventRecord(benchmark::State& state) { Launch(state, {.record_node = true}); }
void BM_EventWaitKernelsRecord(benchmark::State& state) {
  Launch(state, {.kernels = static_cast<int>(state.range(0)), .wait_node = true,
                 .record_node = true});
}
void BM_CopyAndKernel(benchmark::State& state) {
  Launch(state, {.copy_bytes = static_cast<std::size_t>(state.range(0))});
}

void BM_ProgrammaticKernels(benchmark::State& state) {
  Launch(state, {.kernels = static_cast<int>(state.range(0)), .programmatic = true});
}
void BM_BigParamsKernels(benchmark::State& state) {
  Launch(state, {.kernels = static_cast<int>(state.range(0)), .big_params = true});
}
// As the executor's in-place device-memory graph: the metadata copy, the wait for the previous
// buffer's compute, append + decode + merge chained by programmatic edges, the record.
void BM_LikeTheStep(benchmark::State& state) {
  Launch(state, {.kernels = 3, .wait_node = true, .record_node = true,
                 .copy_bytes = static_cast<std::size_t>(state.range(0)), .grid = 1056,
                 .programmatic = true, .big_params = true});
}

#define PROBE_ARGS UseManualTime()->Iterations(3000)->Unit(benchmark::kMicrosecond)
BENCHMARK(BM_OneKernel)->PROBE_ARGS;
BENCHMARK(BM_Kernels)->Arg(2)->Arg(4)->Arg(8)->PROBE_ARGS;
BENCHMARK(BM_OneKernelWide)->Arg(132)->Arg(1056)->PROBE_ARGS;
BENCHMARK(BM_KernelAndEventWait)->PROBE_ARGS;
BENCHMARK(BM_KernelAndEventRecord)->PROBE_ARGS;
BENCHMARK(BM_EventWaitKernelsRecord)->Arg(1)->Arg(3)->PROBE_ARGS;
BENCHMARK(BM_CopyAndKernel)->Arg(4 << 10)->Arg(64 << 10)->Arg(1 << 20)->PROBE_ARGS;
BENCHMARK(BM_ProgrammaticKernels)->Arg(2)->Arg(3)->PROBE_ARGS;
BENCHMARK(BM_BigParamsKernels)->Arg(1)->Arg(3)->PROBE_ARGS;
BENCHMARK(BM_LikeTheStep)->Arg(22 << 10)->Arg(89 << 10)->PROBE_ARGS;

}  // namespace

BENCHMARK_MAIN();
