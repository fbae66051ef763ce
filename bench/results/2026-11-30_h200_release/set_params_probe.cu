// Probe (r4): what it costs the host to give a graph's kernel node new parameters before each
// launch (cudaGraphExecKernelNodeSetParams), for parameter blocks of 64 B to 8 KB: the price of
// handing a B=1 step's length, layer and block-table row to the decode kernel in its parameters
// instead of through memory the kernel must read after the copy-in kernel (bench/NOTES.md).
// Per size: p50/p99 of SetParams alone, of launch + sync, and of SetParams + launch + sync; the
// kernel checks that it saw this iteration's parameters.
// nvcc -O2 -std=c++20 -arch=sm_90 set_params_probe.cu -o set_params_probe
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CK(x)                                                         \
  do {                                                                \
    cudaError_t err_ = (x);                                           \
    if (err_ != cudaSuccess) {                                        \
      std::printf("%s: %s\n", #x, cudaGetErrorString(err_));         \
      std::exit(1);                                                   \
    }                                                                 \
  } while (0)
using Clock = std::chrono::steady_clock;

template <int kWords>
struct Params {
  int words[kWords];
};

template <int kWords>
__global__ void Consume(const Params<kWords> p, int* seen) {
  if (threadIdx.x == 0 && blockIdx.x == 0) seen[0] = p.words[0] + p.words[kWords - 1];
}

template <int kWords>
void Measure(cudaStream_t s, int* seen) {
  Params<kWords> params{};
  void* args[2] = {&params, &seen};
  cudaKernelNodeParams np{};
  np.func = reinterpret_cast<void*>(Consume<kWords>);
  np.gridDim = dim3(128);
  np.blockDim = dim3(256);
  np.kernelParams = args;
  cudaGraph_t g;
  CK(cudaGraphCreate(&g, 0));
  cudaGraphNode_t node;
  CK(cudaGraphAddKernelNode(&node, g, nullptr, 0, &np));
  cudaGraphExec_t e;
  CK(cudaGraphInstantiate(&e, g, 0));
  const int iters = 3000;
  std::vector<double> set_us, plain_us, both_us;
  for (int i = 0; i < iters + 200; ++i) {
    const bool set = i % 2 == 0;
    params.words[0] = i;
    params.words[kWords - 1] = 1;
    const Clock::time_point t0 = Clock::now();
    if (set) CK(cudaGraphExecKernelNodeSetParams(e, node, &np));
    const Clock::time_point t1 = Clock::now();
    CK(cudaGraphLaunch(e, s));
    CK(cudaStreamSynchronize(s));
    const Clock::time_point t2 = Clock::now();
    if (set && *reinterpret_cast<volatile int*>(seen) != i + 1) {
      std::printf("%d words: iteration %d saw %d\n", kWords, i, *seen);
      std::exit(1);
    }
    if (i >= 200) {
      auto us = [](Clock::time_point a, Clock::time_point b) {
        return std::chrono::duration<double, std::micro>(b - a).count();
      };
      if (set) {
        set_us.push_back(us(t0, t1));
        both_us.push_back(us(t0, t2));
      } else {
        plain_us.push_back(us(t1, t2));
      }
    }
  }
  auto p = [](std::vector<double> v, double q) {
    std::sort(v.begin(), v.end());
    return v[static_cast<std::size_t>(q * (v.size() - 1))];
  };
  std::printf("%5zu B params: SetParams p50 %5.2f p99 %5.2f | launch+sync p50 %6.2f | SetParams+launch+sync p50 %6.2f p99 %6.2f us\n",
              sizeof(Params<kWords>), p(set_us, 0.5), p(set_us, 0.99), p(plain_us, 0.5),
              p(both_us, 0.5), p(both_us, 0.99));
  CK(cudaGraphExecDestroy(e));
  CK(cudaGraphDestroy(g));
}

int main() {
  int* seen;
  CK(cudaHostAlloc(&seen, 64, cudaHostAllocMapped));
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  for (int round = 0; round < 2; ++round) {
    Measure<16>(s, seen);
    Measure<64>(s, seen);
    Measure<256>(s, seen);
    Measure<1024>(s, seen);
    Measure<2048>(s, seen);
  }
  return 0;
}
