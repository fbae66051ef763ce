// The measured read ceiling (read_ceiling.h): the read-only reduction the decode benchmarks
// used to carry in bench/gpu_bench_util.h, moved here unchanged so attnrt-check can share it.
#include "kernels/read_ceiling.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "api/internal/cuda_check.h"

namespace attnrt::kernels {
namespace {

constexpr int kCtasPerSm = 8;
constexpr int kThreads = 512;
constexpr int kTimedRuns = 10;  // after one warm-up run

// Every 16-byte word of p[0, n) read once, 4 loads in flight per thread.
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

// Every 16-byte word of p[0, num_chunks * chunk_words) read once, chunk by chunk in the order
// order[0, num_chunks): a warp reads one whole chunk (consecutive lanes, consecutive words) at a
// time, up to 4 loads in flight per lane.
__global__ void ReadChunksKernel(const uint4* __restrict__ p, const int* __restrict__ order,
                                 int num_chunks, int chunk_words, unsigned* out) {
  unsigned acc = 0;
  const int lane = threadIdx.x % 32;
  const int warps = gridDim.x * (blockDim.x / 32);
  for (int w = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32; w < num_chunks; w += warps) {
    const uint4* chunk = p + static_cast<std::size_t>(order[w]) * chunk_words;
    int i = lane;
    for (; i + 96 < chunk_words; i += 128) {
      uint4 a = chunk[i], b = chunk[i + 32], c = chunk[i + 64], d = chunk[i + 96];
      acc ^= a.x ^ a.y ^ a.z ^ a.w ^ b.x ^ b.y ^ b.z ^ b.w ^ c.x ^ c.y ^ c.z ^ c.w ^ d.x ^ d.y ^ d.z ^ d.w;
    }
    for (; i < chunk_words; i += 32) acc ^= chunk[i].x ^ chunk[i].y ^ chunk[i].z ^ chunk[i].w;
  }
  if (acc == 0x12345678u) out[0] = acc;
}

struct DeviceFree {
  void operator()(void* p) const { cudaFree(p); }
};
struct EventDestroy {
  void operator()(CUevent_st* e) const { cudaEventDestroy(e); }
};
using DevicePtr = std::unique_ptr<void, DeviceFree>;
using EventPtr = std::unique_ptr<CUevent_st, EventDestroy>;

Status NewEvent(EventPtr* event) {
  cudaEvent_t e = nullptr;
  ATTNRT_CUDA_RETURN(cudaEventCreate(&e));
  event->reset(e);
  return Status::Ok();
}

// Bytes/s of `read(buffer, out)` reading `bytes` of a buffer of that size set to 1s: the best of
// kTimedRuns runs after one warm-up, timed with CUDA events on the default stream.
template <typename Read>
StatusOr<double> TimeRead(std::size_t bytes, const char* what, Read read) {
  void* raw = nullptr;
  ATTNRT_CUDA_RETURN(cudaMalloc(&raw, bytes));
  const DevicePtr buf(raw);
  raw = nullptr;
  ATTNRT_CUDA_RETURN(cudaMalloc(&raw, sizeof(unsigned)));
  const DevicePtr out(raw);
  ATTNRT_CUDA_RETURN(cudaMemset(buf.get(), 1, bytes));
  EventPtr start, stop;
  ATTNRT_RETURN_IF_ERROR(NewEvent(&start));
  ATTNRT_RETURN_IF_ERROR(NewEvent(&stop));
  float best_ms = 0.0f;
  for (int run = 0; run <= kTimedRuns; ++run) {
    ATTNRT_CUDA_RETURN(cudaEventRecord(start.get()));
    read(static_cast<const uint4*>(buf.get()), static_cast<unsigned*>(out.get()));
    ATTNRT_CUDA_RETURN_LAUNCH();
    ATTNRT_CUDA_RETURN(cudaEventRecord(stop.get()));
    ATTNRT_CUDA_RETURN(cudaEventSynchronize(stop.get()));
    float ms = 0.0f;
    ATTNRT_CUDA_RETURN(cudaEventElapsedTime(&ms, start.get(), stop.get()));
    if (run == 0) continue;  // the first run warms up
    best_ms = run == 1 ? ms : std::min(best_ms, ms);
  }
  if (!(best_ms > 0.0f)) {
    return InternalError(std::string(what) + ": the read of " + std::to_string(bytes) +
                         " bytes timed at " + std::to_string(best_ms) + " ms");
  }
  return static_cast<double>(bytes) / (static_cast<double>(best_ms) * 1e-3);
}

StatusOr<int> SmCount() {
  int dev = 0, sms = 0;
  ATTNRT_CUDA_RETURN(cudaGetDevice(&dev));
  ATTNRT_CUDA_RETURN(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  return sms;
}

}  // namespace

StatusOr<double> MeasureReadBandwidth(std::size_t bytes) {
  const std::size_t words = bytes / sizeof(uint4);
  if (words == 0) {
    return InvalidArgumentError("MeasureReadBandwidth: bytes = " + std::to_string(bytes) +
                                ", expected at least 16");
  }
  ATTNRT_ASSIGN_OR_RETURN(const int sms, SmCount());
  return TimeRead(words * sizeof(uint4), "MeasureReadBandwidth",
                  [&](const uint4* p, unsigned* out) {
                    ReadReduceKernel<<<sms * kCtasPerSm, kThreads>>>(p, words, out);
                  });
}

StatusOr<double> MeasurePagedReadBandwidth(std::size_t chunk_bytes, std::size_t bytes) {
  if (chunk_bytes < 16 || chunk_bytes % 16 != 0 || chunk_bytes > (std::size_t{1} << 24)) {
    return InvalidArgumentError("MeasurePagedReadBandwidth: chunk_bytes = " +
                                std::to_string(chunk_bytes) +
                                ", expected a multiple of 16 in [16, 16 MiB]");
  }
  const std::size_t chunks = bytes / chunk_bytes;
  if (chunks == 0 || chunks > static_cast<std::size_t>(INT32_MAX)) {
    return InvalidArgumentError("MeasurePagedReadBandwidth: bytes = " + std::to_string(bytes) +
                                ", expected 1 to 2^31 - 1 chunks of " +
                                std::to_string(chunk_bytes));
  }
  // The chunks' order: shuffled as DeviceDecodeBatch scatters a sequence's blocks.
  const std::vector<std::int32_t> order = ShuffledIds(static_cast<std::int32_t>(chunks), 0);
  void* raw = nullptr;
  ATTNRT_CUDA_RETURN(cudaMalloc(&raw, chunks * sizeof(int)));
  const DevicePtr d_order(raw);
  ATTNRT_CUDA_RETURN(
      cudaMemcpy(d_order.get(), order.data(), chunks * sizeof(int), cudaMemcpyHostToDevice));
  ATTNRT_ASSIGN_OR_RETURN(const int sms, SmCount());
  const int chunk_words = static_cast<int>(chunk_bytes / sizeof(uint4));
  return TimeRead(chunks * chunk_bytes, "MeasurePagedReadBandwidth",
                  [&](const uint4* p, unsigned* out) {
                    ReadChunksKernel<<<sms * kCtasPerSm, kThreads>>>(
                        p, static_cast<const int*>(d_order.get()), static_cast<int>(chunks),
                        chunk_words, out);
                  });
}

}  // namespace attnrt::kernels
