// Shared by the GPU benchmarks and studies: GPU time vs wall-clock time of a piece of enqueued
// work, device-side random fills and a device-resident paged decode batch (tools/
// device_decode.cuh, shared with attnrt-check), decode plans on this device, medians, and the
// bandwidth ceilings (read-only: kernels/read_ceiling.h; copy) measured in the same process.
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
#include <memory>
#include <string>
#include <vector>

#include <attnrt/config.h>
#include <attnrt/half.h>
#include <attnrt/status.h>
#include "kernels/decode.h"
#include "kernels/read_ceiling.h"
#include "kernels/views.h"
#include "tools/device_decode.cuh"
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

// ---- device random fills and paged decode batches (tools/device_decode.cuh) -----------------
using tools::DeviceDecodeBatch;

template <typename T>
void FillNormal(T* out, std::int64_t n, std::uint64_t seed, cudaStream_t stream,
                float scale = 1.0f) {
  CheckOk(tools::FillNormalAsync(out, n, seed, stream, scale), "FillNormal");
}

// A device batch (random data, shuffled blocks unless `order` says otherwise) for `lengths`
// rows, or exit.
inline std::unique_ptr<DeviceDecodeBatch> MakeDeviceDecodeBatch(
    const ModelShape& shape, const std::vector<int>& lengths, cudaStream_t stream,
    std::uint64_t seed = 1, tools::BlockOrder order = tools::BlockOrder::kShuffled) {
  StatusOr<std::unique_ptr<DeviceDecodeBatch>> batch =
      DeviceDecodeBatch::Create(shape, lengths, stream, seed, order);
  CheckOk(batch, "DeviceDecodeBatch::Create");
  return std::move(batch).value();
}

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

// Device read bandwidth (bytes/s), the ceiling every decode ratio is taken to:
// kernels::MeasureReadBandwidth (kernels/read_ceiling.h, shared with attnrt-check), or exit.
inline double MeasureReadBandwidth(std::size_t bytes = kernels::kReadCeilingBytes) {
  StatusOr<double> bw = kernels::MeasureReadBandwidth(bytes);
  CheckOk(bw, "MeasureReadBandwidth");
  return *bw;
}

inline int SmCount() {
  int dev = 0;
  int sms = 0;
  Check(cudaGetDevice(&dev), "device");
  Check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev), "attr");
  return sms;
}

}  // namespace attnrt::bench
