// Shared by the GPU benchmarks and studies: GPU time vs wall-clock time of a piece of enqueued
// work, device-side random fills, a device-resident paged decode batch, decode plans on this
// device, medians, and the bandwidth ceilings (read-only and copy) measured in the same process.
//
// GPU time: a blocker kernel holds the stream (spinning on a pinned host flag) while the host
// enqueues the work between two events, then the flag is released; the events then bracket only
// the device's execution of back-to-back queued work, not the host's launch cost. If enqueueing
// outruns the device's launch queue the host would stall behind the blocker: the blocker gives up
// after kBlockerTimeoutNs, and that measurement is reported as `blocked = false` (events then
// include host gaps). Wall time: host steady clock from before the first enqueue to after the
// stream synchronises.
#pragma once

#include <benchmark/benchmark.h>
#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <string>
#include <vector>

#include <attnrt/config.h>
#include <attnrt/half.h>
#include <attnrt/status.h>
#include "api/internal/fp8_e4m3.h"
#include "kernels/decode.h"
#include "kernels/views.h"
#include "tools/percentile.h"

namespace attnrt::bench {

inline void Check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) {
    std::fprintf(stderr, "CUDA error in %s: %s\n", what, cudaGetErrorString(err));
    std::exit(2);
  }
}
inline void Check(cublasStatus_t err, const char* what) {
  if (err != CUBLAS_STATUS_SUCCESS) {
    std::fprintf(stderr, "cuBLAS error in %s: %s\n", what, cublasGetStatusString(err));
    std::exit(2);
  }
}
inline void CheckOk(const Status& status, const char* what) {
  if (!status.ok()) {
    std::fprintf(stderr, "%s failed: %s\n", what, status.ToString().c_str());
    std::exit(2);
  }
}
template <typename T>
void CheckOk(const StatusOr<T>& status, const char* what) {
  CheckOk(status.status(), what);
}

// `variant`'s plan for (shape, capacity) on the current device (exits naming the failure).
inline kernels::DecodePlan PlanOrExit(const kernels::DecodeVariant& variant, const ModelShape& shape,
                                      int capacity, kernels::DecodeStep step,
                                      int max_kv_length = 0) {
  const StatusOr<kernels::DecodeDevice> device = kernels::CurrentDecodeDevice();
  CheckOk(device, "CurrentDecodeDevice");
  StatusOr<kernels::DecodePlan> plan =
      variant.plan({shape, capacity, max_kv_length, step, *device});
  CheckOk(plan, std::string(variant.name).append(" plan").c_str());
  return *plan;
}

using attnrt::tools::Median;

constexpr long long kBlockerTimeoutNs = 500'000'000;  // 0.5 s

__global__ void BlockerKernel(volatile int* release, int* timed_out, long long timeout_ns) {
  long long start;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  while (*release == 0) {
    long long now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    if (now - start > timeout_ns) {
      *timed_out = 1;
      return;
    }
  }
}

class GpuTimer {
 public:
  explicit GpuTimer(cudaStream_t stream) : stream_(stream) {
    Check(cudaHostAlloc(&flags_, 2 * sizeof(int), cudaHostAllocMapped), "cudaHostAlloc");
    Check(cudaEventCreate(&start_), "event");
    Check(cudaEventCreate(&stop_), "event");
  }
  ~GpuTimer() {
    cudaEventDestroy(start_);
    cudaEventDestroy(stop_);
    cudaFreeHost(flags_);
  }
  GpuTimer(const GpuTimer&) = delete;
  GpuTimer& operator=(const GpuTimer&) = delete;

  struct Sample {
    double us = 0.0;
    bool blocked = true;  // false: the blocker timed out; the figure includes host launch gaps
  };

  template <typename F>
  Sample GpuUs(F&& enqueue) {
    Check(cudaStreamSynchronize(stream_), "sync");
    volatile int* release = flags_;
    release[0] = 0;
    flags_[1] = 0;
    BlockerKernel<<<1, 1, 0, stream_>>>(flags_, flags_ + 1, kBlockerTimeoutNs);
    Check(cudaGetLastError(), "blocker launch");
    Check(cudaEventRecord(start_, stream_), "record");
    enqueue();
    Check(cudaEventRecord(stop_, stream_), "record");
    release[0] = 1;
    Check(cudaStreamSynchronize(stream_), "sync");
    float ms = 0.0f;
    Check(cudaEventElapsedTime(&ms, start_, stop_), "elapsed");
    return Sample{ms * 1e3, flags_[1] == 0};
  }

  template <typename F>
  double WallUs(F&& enqueue) {
    Check(cudaStreamSynchronize(stream_), "sync");
    const auto t0 = std::chrono::steady_clock::now();
    enqueue();
    Check(cudaStreamSynchronize(stream_), "sync");
    const auto t1 = std::chrono::steady_clock::now();
    return std::chrono::duration<double, std::micro>(t1 - t0).count();
  }

 private:
  cudaStream_t stream_;
  int* flags_ = nullptr;
  cudaEvent_t start_ = nullptr;
  cudaEvent_t stop_ = nullptr;
};

// Runs `enqueue` `warmup` times, then `reps` times for GPU time and `reps` times for wall time;
// reports medians as counters gpu_us / wall_us (and `blocked` = 1 if every GPU sample was taken
// behind the blocker) and the GPU median as the benchmark's manual time.
template <typename F>
void MeasureInto(benchmark::State& state, GpuTimer& timer, F&& enqueue, int warmup = 2) {
  for (int i = 0; i < warmup; ++i) timer.WallUs(enqueue);
  std::vector<double> gpu, wall;
  bool blocked = true;
  for (auto _ : state) {
    const GpuTimer::Sample s = timer.GpuUs(enqueue);
    blocked = blocked && s.blocked;
    gpu.push_back(s.us);
    wall.push_back(timer.WallUs(enqueue));
    state.SetIterationTime(s.us * 1e-6);
  }
  state.counters["gpu_us"] = Median(gpu);
  state.counters["wall_us"] = Median(wall);
  state.counters["blocked"] = blocked ? 1 : 0;
}

// ---- device random fills -----------------------------------------------------------------
__device__ inline std::uint64_t SplitMix(std::uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// N(0,1) * scale by Box-Muller from a counter-based hash: independent of launch shape.
template <typename T>
__global__ void FillNormalKernel(T* out, std::int64_t n, std::uint64_t seed, float scale) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::uint64_t r = SplitMix(seed * 0x100000001B3ull + static_cast<std::uint64_t>(i));
    const float u1 = (static_cast<float>(r >> 40) + 1.0f) * (1.0f / 16777216.0f);
    const float u2 = static_cast<float>((r >> 16) & 0xFFFFFF) * (1.0f / 16777216.0f);
    const float z = sqrtf(-2.0f * logf(u1)) * cospif(2.0f * u2) * scale;
    if constexpr (sizeof(T) == 1) {
      out[i] = QuantizeE4M3(z, 1.0f);  // an E4M3 code (scale 1.0)
    } else if constexpr (sizeof(T) == 2) {
      out[i] = __float2half_rn(z);
    } else {
      out[i] = z;
    }
  }
}

template <typename T>
void FillNormal(T* out, std::int64_t n, std::uint64_t seed, cudaStream_t stream,
                float scale = 1.0f) {
  FillNormalKernel<<<1024, 256, 0, stream>>>(out, n, seed, scale);
  Check(cudaGetLastError(), "fill");
}

// ---- device-resident paged decode batch (benchmarks; random data, shuffled blocks) ----------
struct DeviceDecodeBatch {
  ModelShape shape;
  int capacity = 0;
  int num_blocks = 0;
  std::vector<std::int32_t> kv_lengths;  // host copy
  void* k_pool = nullptr;
  void* v_pool = nullptr;
  std::int32_t* d_lengths = nullptr;
  std::int32_t* d_layers = nullptr;
  std::int32_t* d_tables = nullptr;
  Half* q = nullptr;
  Half* out = nullptr;
  float* lse = nullptr;
  float* d_scales = nullptr;  // FP8 cache: K's then V's scale per kv head (1.0)
  kernels::KvPoolView pools{};
  kernels::DecodeBatchView batch{};

  DeviceDecodeBatch(const ModelShape& s, const std::vector<int>& lengths, cudaStream_t stream,
                    std::uint64_t seed = 1)
      : shape(s), capacity(static_cast<int>(lengths.size())) {
    const int bs = s.block_size;
    const int max_blocks = s.max_blocks_per_sequence();
    for (int len : lengths) num_blocks += (len + bs - 1) / bs;
    num_blocks = std::max(num_blocks, 1);
    // Shuffled block ids (a fixed LCG; the order only has to be non-contiguous).
    std::vector<std::int32_t> ids(num_blocks);
    std::iota(ids.begin(), ids.end(), 0);
    std::uint64_t x = seed * 6364136223846793005ull + 1;
    for (int i = num_blocks - 1; i > 0; --i) {
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      std::swap(ids[i], ids[static_cast<int>((x >> 33) % static_cast<std::uint64_t>(i + 1))]);
    }
    std::vector<std::int32_t> tables(static_cast<std::size_t>(capacity) * max_blocks, 0);
    int next = 0;
    for (int i = 0; i < capacity; ++i) {
      for (int j = 0; j < (lengths[i] + bs - 1) / bs; ++j) {
        tables[static_cast<std::size_t>(i) * max_blocks + j] = ids[next++];
      }
    }
    kv_lengths.assign(lengths.begin(), lengths.end());
    const std::vector<std::int32_t> layers(capacity, 0);

    const std::int64_t pool_elems =
        static_cast<std::int64_t>(num_blocks) * s.num_kv_heads * bs * s.head_dim;
    const std::int64_t q_elems = static_cast<std::int64_t>(capacity) * s.num_q_heads * s.head_dim;
    Check(cudaMalloc(&k_pool, pool_elems * 2), "malloc k");
    Check(cudaMalloc(&v_pool, pool_elems * 2), "malloc v");
    Check(cudaMalloc(&q, q_elems * 2), "malloc q");
    Check(cudaMalloc(&out, q_elems * 2), "malloc out");
    Check(cudaMalloc(&lse, static_cast<std::size_t>(capacity) * s.num_q_heads * 4), "malloc lse");
    Check(cudaMalloc(&d_lengths, capacity * 4), "malloc lengths");
    Check(cudaMalloc(&d_layers, capacity * 4), "malloc layers");
    Check(cudaMalloc(&d_tables, tables.size() * 4), "malloc tables");
    Check(cudaMemcpy(d_lengths, kv_lengths.data(), capacity * 4, cudaMemcpyHostToDevice), "copy");
    Check(cudaMemcpy(d_layers, layers.data(), capacity * 4, cudaMemcpyHostToDevice), "copy");
    Check(cudaMemcpy(d_tables, tables.data(), tables.size() * 4, cudaMemcpyHostToDevice), "copy");
    if (fp8()) {  // one E4M3 code per element, scales 1.0
      FillNormal(static_cast<std::uint8_t*>(k_pool), pool_elems, seed * 3 + 0, stream);
      FillNormal(static_cast<std::uint8_t*>(v_pool), pool_elems, seed * 3 + 1, stream);
      const std::vector<float> ones(2 * s.num_kv_heads, 1.0f);
      Check(cudaMalloc(&d_scales, ones.size() * sizeof(float)), "malloc scales");
      Check(cudaMemcpy(d_scales, ones.data(), ones.size() * sizeof(float), cudaMemcpyHostToDevice),
            "copy");
    } else {
      FillNormal(static_cast<__half*>(k_pool), pool_elems, seed * 3 + 0, stream);
      FillNormal(static_cast<__half*>(v_pool), pool_elems, seed * 3 + 1, stream);
    }
    FillNormal(reinterpret_cast<__half*>(q), q_elems, seed * 3 + 2, stream);
    Check(cudaStreamSynchronize(stream), "sync");

    pools.k = static_cast<Half*>(k_pool);
    pools.v = static_cast<Half*>(v_pool);
    pools.num_layers = 1;
    pools.num_blocks = num_blocks;
    pools.num_kv_heads = s.num_kv_heads;
    pools.block_size = bs;
    pools.head_dim = s.head_dim;
    pools.scales = d_scales;
    batch.capacity = capacity;
    batch.num_q_heads = s.num_q_heads;
    batch.max_blocks_per_seq = max_blocks;
    batch.kv_lengths = d_lengths;
    batch.layers = d_layers;
    batch.block_tables = d_tables;
    batch.q = q;
    batch.k_new = nullptr;
    batch.v_new = nullptr;
    batch.out = out;
    batch.lse = lse;
    batch.scale = s.scale();
  }
  ~DeviceDecodeBatch() {
    for (void* p : {k_pool, v_pool, static_cast<void*>(d_lengths), static_cast<void*>(d_layers),
                    static_cast<void*>(d_tables), static_cast<void*>(q), static_cast<void*>(out),
                    static_cast<void*>(lse), static_cast<void*>(d_scales)}) {
      cudaFree(p);
    }
  }
  DeviceDecodeBatch(const DeviceDecodeBatch&) = delete;
  DeviceDecodeBatch& operator=(const DeviceDecodeBatch&) = delete;

  bool fp8() const { return shape.kv_cache_type == KvCacheType::kFp8E4M3; }
  // Bytes of K and V the live rows attend (each read once: the fused kernel's floor).
  double kv_bytes() const {
    double tokens = 0;
    for (int len : kv_lengths) tokens += len;
    return tokens * shape.num_kv_heads * shape.head_dim * 2.0 * (fp8() ? 1.0 : 2.0);
  }
};

// Device-to-device copy bandwidth (bytes read + written per second), the measured ceiling.
inline double MeasureCopyBandwidth(cudaStream_t stream, std::size_t bytes = std::size_t{1} << 30) {
  void* a = nullptr;
  void* b = nullptr;
  Check(cudaMalloc(&a, bytes), "malloc");
  Check(cudaMalloc(&b, bytes), "malloc");
  Check(cudaMemsetAsync(a, 1, bytes, stream), "memset");
  GpuTimer timer(stream);
  auto copy = [&] { Check(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, stream), "copy"); };
  for (int i = 0; i < 3; ++i) timer.WallUs(copy);
  std::vector<double> us;
  for (int i = 0; i < 7; ++i) us.push_back(timer.GpuUs(copy).us);
  cudaFree(a);
  cudaFree(b);
  return 2.0 * bytes / (Median(us) * 1e-6);
}

// Read ceiling: every byte of a large buffer read once with 16-byte loads, 4 in flight per thread.
__global__ void ReadReduceKernel(const uint4* __restrict__ p, std::size_t n, unsigned* out) {
  unsigned acc = 0;
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  for (; i + 3 * stride < n; i += 4 * stride) {
    uint4 a = p[i], b = p[i + stride], c = p[i + 2 * stride], d = p[i + 3 * stride];
    acc ^= a.x ^ a.y ^ a.z ^ a.w ^ b.x ^ b.y ^ b.z ^ b.w ^ c.x ^ c.y ^ c.z ^ c.w ^ d.x ^ d.y ^ d.z ^ d.w;
  }
  for (; i < n; i += stride) acc ^= p[i].x ^ p[i].y ^ p[i].z ^ p[i].w;
  if (acc == 0x12345678u) out[0] = acc;  // keeps the loads alive; practically never stores
}

// Device read bandwidth (bytes/s): best of 10 timed reductions over a 4 GiB buffer.
inline double MeasureReadBandwidth(std::size_t bytes = std::size_t{4} << 30) {
  void* buf = nullptr;
  unsigned* out = nullptr;
  Check(cudaMalloc(&buf, bytes), "malloc");
  Check(cudaMalloc(&out, sizeof(unsigned)), "malloc");
  Check(cudaMemset(buf, 1, bytes), "memset");
  int dev = 0, sms = 0;
  Check(cudaGetDevice(&dev), "device");
  Check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev), "attr");
  cudaEvent_t a, b;
  Check(cudaEventCreate(&a), "event");
  Check(cudaEventCreate(&b), "event");
  float best = 1e30f;
  for (int it = 0; it < 11; ++it) {
    Check(cudaEventRecord(a), "record");
    ReadReduceKernel<<<sms * 8, 512>>>(static_cast<const uint4*>(buf), bytes / 16, out);
    Check(cudaEventRecord(b), "record");
    Check(cudaEventSynchronize(b), "sync");
    float ms = 0.0f;
    Check(cudaEventElapsedTime(&ms, a, b), "elapsed");
    if (it > 0) best = std::min(best, ms);  // the first run warms up
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  cudaFree(buf);
  cudaFree(out);
  return bytes / (best * 1e-3);
}

inline int SmCount() {
  int dev = 0;
  int sms = 0;
  Check(cudaGetDevice(&dev), "device");
  Check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev), "attr");
  return sms;
}

}  // namespace attnrt::bench
