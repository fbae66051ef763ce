// Probe (r3): what the executor's B=1 pack costs the host, by how it writes the pinned staging.
// Each iteration: the host copies 24 KB of q/k/v (ordinary memory, hot) into 24 KB of pinned
// staging, a kernel reads the staging over PCIe into device memory and writes 8 KB of outputs
// into pinned memory, stream sync, the host copies the 8 KB out. Timed on the host: the pack
// copy alone, the copy-out alone, and the whole iteration (p50 / p99). Variants of the pack:
//   memcpy      std::memcpy into cudaHostAlloc'd staging (what Pack does)
//   stream      16-byte non-temporal stores (movntdq) + sfence into the same staging
//   stream256   32-byte non-temporal stores (vmovntdq, AVX2) + sfence
//   wc-memcpy   std::memcpy into write-combined staging (cudaHostAllocWriteCombined)
// nvcc -O2 -std=c++20 -arch=sm_90 -Xcompiler -mavx2 pack_probe.cu -o pack_probe
#include <cuda_runtime.h>
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
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

__global__ void Step(const uint4* staging, uint4* dev, int in_words, uint4* out, int out_words) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < in_words; i += gridDim.x * blockDim.x)
    dev[i] = staging[i];
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < out_words; i += gridDim.x * blockDim.x)
    out[i] = dev[i];
}

void Stream128(void* dst, const void* src, std::size_t bytes) {
  auto* d = static_cast<__m128i*>(dst);
  const auto* s = static_cast<const __m128i*>(src);
  for (std::size_t i = 0; i < bytes / 16; ++i) _mm_stream_si128(d + i, _mm_loadu_si128(s + i));
  _mm_sfence();
}

void Stream256(void* dst, const void* src, std::size_t bytes) {
  auto* d = static_cast<__m256i*>(dst);
  const auto* s = static_cast<const __m256i*>(src);
  for (std::size_t i = 0; i < bytes / 32; ++i) _mm256_stream_si256(d + i, _mm256_loadu_si256(s + i));
  _mm_sfence();
}

int main() {
  const std::size_t in_bytes = 24 * 1024, out_bytes = 8 * 1024 + 128;
  unsigned char *staging, *wc_staging, *out, *dev;
  CK(cudaHostAlloc(&staging, in_bytes, cudaHostAllocMapped));
  CK(cudaHostAlloc(&wc_staging, in_bytes, cudaHostAllocMapped | cudaHostAllocWriteCombined));
  CK(cudaHostAlloc(&out, out_bytes, cudaHostAllocMapped));
  CK(cudaMalloc(&dev, in_bytes));
  std::vector<unsigned char> src(in_bytes), result(out_bytes);
  for (std::size_t i = 0; i < in_bytes; ++i) src[i] = static_cast<unsigned char>(i * 7);
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const char* names[4] = {"memcpy", "stream", "stream256", "wc-memcpy"};
  const int iters = 4000;
  auto p = [](std::vector<double> v, double q) {
    std::sort(v.begin(), v.end());
    return v[static_cast<std::size_t>(q * (v.size() - 1))];
  };
  for (int round = 0; round < 3; ++round) {
    for (int mode = 0; mode < 4; ++mode) {
      unsigned char* dst = mode == 3 ? wc_staging : staging;
      std::vector<double> pack_us, out_us, all_us;
      for (int i = 0; i < iters + 200; ++i) {
        src[0] = static_cast<unsigned char>(i);
        const Clock::time_point t0 = Clock::now();
        if (mode == 0 || mode == 3) std::memcpy(dst, src.data(), in_bytes);
        if (mode == 1) Stream128(dst, src.data(), in_bytes);
        if (mode == 2) Stream256(dst, src.data(), in_bytes);
        const Clock::time_point t1 = Clock::now();
        Step<<<12, 128, 0, s>>>(reinterpret_cast<const uint4*>(dst), reinterpret_cast<uint4*>(dev),
                                in_bytes / 16, reinterpret_cast<uint4*>(out), out_bytes / 16);
        CK(cudaStreamSynchronize(s));
        const Clock::time_point t2 = Clock::now();
        std::memcpy(result.data(), out, out_bytes);
        const Clock::time_point t3 = Clock::now();
        if (result[0] != static_cast<unsigned char>(i)) {
          std::printf("mode %s: stale output at %d\n", names[mode], i);
          return 1;
        }
        if (i >= 200) {
          pack_us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
          out_us.push_back(std::chrono::duration<double, std::micro>(t3 - t2).count());
          all_us.push_back(std::chrono::duration<double, std::micro>(t3 - t0).count());
        }
      }
      std::printf("round %d %-10s pack p50 %5.2f p99 %5.2f | copy-out p50 %5.2f | iteration p50 %6.2f p99 %6.2f us\n",
                  round, names[mode], p(pack_us, 0.5), p(pack_us, 0.99), p(out_us, 0.5),
                  p(all_us, 0.5), p(all_us, 0.99));
    }
  }
  return 0;
}
