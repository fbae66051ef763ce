// Probe (r2): why a graph launched before the pack, its first kernel waiting for a host word,
// ran ~9 us slower than pack-then-launch (r1). A bare B=1-sized step: copy kernel in (24 KB of
// mapped pinned staging -> device), a touch kernel, copy kernel out (8 KB), as one graph; the
// host's pack (24 KB memcpy into the staging) timed with it. Variants of the first kernel's wait:
//   0 acquire.sys poll, data by ld.global.cv (the library's kernel)
//   1 volatile poll, then fence.sc.sys, data by ld.global.cv
//   2 volatile poll, data by plain loads
//   3 no wait at all (launch first, data possibly stale: timing only)
//   4 acquire.sys poll, data by plain loads
// Per variant: p50 of the host window (launch .. sync, copy-out), and the kernel's own
// globaltimer span from entry to the word seen, and from the word seen to exit (CTA 0).
// nvcc -O2 -std=c++20 -arch=sm_90 release_probe.cu -o release_probe
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>

#define CK(x)                                                                  \
  do {                                                                         \
    cudaError_t err_ = (x);                                                       \
    if (err_ != cudaSuccess) {                                                 \
      std::printf("%s: %s\n", #x, cudaGetErrorString(err_));                      \
      std::exit(1);                                                            \
    }                                                                          \
  } while (0)
using Clock = std::chrono::steady_clock;

__device__ unsigned long long Now() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)::"memory");
  return t;
}

template <int kMode>
__global__ void CopyIn(const uint4* from, uint4* to, int words, unsigned* ready,
                       unsigned long long* stamps) {
  __shared__ int go;
  const unsigned long long t0 = Now();
  if (threadIdx.x == 0) {
    if (kMode == 0 || kMode == 4) {
      unsigned v = 0;
      do {
        asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(ready) : "memory");
      } while (v == 0);
    } else if (kMode == 1 || kMode == 2) {
      while (*reinterpret_cast<volatile unsigned*>(ready) == 0) {
      }
      if (kMode == 1) asm volatile("fence.sc.sys;" ::: "memory");
    }
    go = 1;
  }
  __syncthreads();
  const unsigned long long t1 = Now();
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < words; i += gridDim.x * blockDim.x) {
    to[i] = (kMode == 0 || kMode == 1) ? __ldcv(from + i) : from[i];
  }
  __syncthreads();
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    stamps[0] = t1 - t0;
    stamps[1] = Now() - t1;
  }
}

__global__ void Touch(const uint4* in, uint4* out, int words) {
  for (int i = threadIdx.x; i < words; i += blockDim.x) out[i] = in[i];
}

__global__ void CopyOut(const uint4* from, uint4* to, int words) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < words; i += gridDim.x * blockDim.x)
    to[i] = from[i];
}

int main() {
  const int in_words = 24 * 1024 / 16, out_words = 8 * 1024 / 16;
  uint4 *staging, *h_out, *d_in, *d_out;
  unsigned* ready;
  unsigned long long* stamps;
  CK(cudaHostAlloc(&staging, in_words * 16, cudaHostAllocMapped));
  CK(cudaHostAlloc(&h_out, out_words * 16, cudaHostAllocMapped));
  CK(cudaHostAlloc(&ready, 64, cudaHostAllocMapped));
  CK(cudaHostAlloc(&stamps, 64, cudaHostAllocMapped));
  CK(cudaMalloc(&d_in, in_words * 16));
  CK(cudaMalloc(&d_out, out_words * 16));
  std::vector<unsigned char> src(in_words * 16, 7), out_seen(out_words * 16);
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  auto build = [&](auto kernel) {
    cudaGraph_t g;
    cudaGraphExec_t e;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    kernel<<<12, 128, 0, s>>>(staging, d_in, in_words, ready, stamps);
    Touch<<<1, 128, 0, s>>>(d_in, d_out, out_words);
    CopyOut<<<4, 128, 0, s>>>(d_out, h_out, out_words);
    CK(cudaStreamEndCapture(s, &g));
    CK(cudaGraphInstantiate(&e, g, 0));
    return e;
  };
  cudaGraphExec_t execs[5] = {build(CopyIn<0>), build(CopyIn<1>), build(CopyIn<2>),
                              build(CopyIn<3>), build(CopyIn<4>)};
  const int iters = 3000;
  for (int round = 0; round < 2; ++round) {
    for (int mode = 0; mode < 5; ++mode) {
      for (int first : {0, 1}) {
        std::vector<double> us, wait_us, copy_us;
        for (int i = 0; i < iters + 200; ++i) {
          std::atomic_ref<unsigned>(*ready).store(first ? 0 : 1, std::memory_order_relaxed);
          const Clock::time_point t0 = Clock::now();
          if (first) CK(cudaGraphLaunch(execs[mode], s));
          std::memcpy(staging, src.data(), src.size());
          if (first) {
            std::atomic_ref<unsigned>(*ready).store(1, std::memory_order_release);
          } else {
            CK(cudaGraphLaunch(execs[mode], s));
          }
          CK(cudaStreamSynchronize(s));
          std::memcpy(out_seen.data(), h_out, out_seen.size());
          const double t = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
          if (i >= 200) {
            us.push_back(t);
            wait_us.push_back(stamps[0] / 1000.0);
            copy_us.push_back(stamps[1] / 1000.0);
          }
        }
        auto p = [](std::vector<double> v, double q) {
          std::sort(v.begin(), v.end());
          return v[static_cast<std::size_t>(q * (v.size() - 1))];
        };
        std::printf("round %d mode %d %-22s p50 %6.2f p99 %6.2f us | kernel: wait %5.2f copy %5.2f us\n",
                    round, mode, first ? "launch, pack, release" : "pack, launch", p(us, 0.5),
                    p(us, 0.99), p(wait_us, 0.5), p(copy_us, 0.5));
      }
    }
  }
  return 0;
}
