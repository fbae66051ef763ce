// Probe (r5): could the B=1 decode kernel issue its first K/V reads before the copy-in kernel
// ends, reading the row's length and block table from the pinned staging (written by the host
// before the launch) instead of from the device mirror the copy-in kernel writes? A graph like
// the executor's solo host graph: a copy-in kernel (12 CTAs x 128 threads, 24 KB + metadata of
// mapped pinned staging -> device, releasing its dependents at once) and, joined by a
// programmatic edge, a decode-shaped kernel of 128 CTAs x 256 threads. Thread 0 of each CTA
// stamps %globaltimer (ns) as it goes; per mode the medians over CTAs and replays, from the
// decode kernel's entry:
//   mode 0 (today):  griddepcontrol.wait -> length (mirror) -> table entry (mirror) -> K/V load
//   mode 1 (early):  length (pinned, ld.cv) -> table entry (pinned, ld.cv) -> K/V load, then wait
//   mode 2 (early, the row's first 64 table entries read beside the length in one round trip)
// and the whole replay (launch -> sync) on the host. The K/V load is one 16-byte read of device
// memory at the block the table names (rotating over 256 MiB, so it misses L2).
// nvcc -O2 -std=c++20 -arch=sm_90 early_meta_probe.cu -o early_meta_probe
#include <cuda_runtime.h>

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

__device__ __forceinline__ unsigned long long Now() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)::"memory");
  return t;
}

constexpr int kStagingWords = (24 * 1024 + 1024) / 16;  // metadata (1 KB) + q/k/v
constexpr int kBlocks = 64;  // table entries a row: 1024 tokens of 16
constexpr int kCtas = 128, kThreads = 256;
constexpr std::size_t kPoolBytes = std::size_t{256} << 20;
constexpr int kBlockBytes = 16 * 1024;  // one block of one head: 16 tokens x 128 x 2 x ... (rough)
constexpr int kStamps = 6;

__global__ void CopyIn(const uint4* from, uint4* to, int words) {
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < words; i += gridDim.x * blockDim.x)
    to[i] = from[i];
}

// Metadata layout (ints): [0] length, [1] layer, [16..16+kBlocks) the table.
template <int kMode>
__global__ void DecodeLike(const int* pinned_meta, const int* device_meta, const uint4* pool,
                           unsigned long long* stamps, int replay, int* sink) {
  __shared__ int table_smem[kBlocks];
  const unsigned long long t0 = Now();
  unsigned long long t_len = 0, t_table = 0, t_kv = 0, t_wait = 0;
  int len = 0, block = 0;
  const int split = blockIdx.x % 4;
  if (kMode == 0) {
    asm volatile("griddepcontrol.wait;" ::: "memory");
    t_wait = Now();
    len = device_meta[0];
    if (threadIdx.x == 0) t_len = Now();
    const int entry = (len / 4 * split) / 16;
    block = device_meta[16 + entry];
    if (threadIdx.x == 0) t_table = Now();
  } else if (kMode == 1) {
    len = __ldcv(pinned_meta);
    if (threadIdx.x == 0) t_len = Now();
    const int entry = (len / 4 * split) / 16;
    block = __ldcv(pinned_meta + 16 + entry);
    if (threadIdx.x == 0) t_table = Now();
  } else {
    if (threadIdx.x < kBlocks) table_smem[threadIdx.x] = __ldcv(pinned_meta + 16 + threadIdx.x);
    len = __ldcv(pinned_meta);
    __syncthreads();
    if (threadIdx.x == 0) t_len = Now();
    const int entry = (len / 4 * split) / 16;
    block = table_smem[entry];
    if (threadIdx.x == 0) t_table = Now();
  }
  // One K/V read at the named block (each replay elsewhere in the pool).
  const std::size_t at = (static_cast<std::size_t>(block) * kCtas + blockIdx.x + replay * 7919ull) *
                         kBlockBytes % kPoolBytes / 16 + threadIdx.x;
  const uint4 kv = pool[at];
  if (threadIdx.x == 0) t_kv = Now();
  if (kMode != 0) {
    asm volatile("griddepcontrol.wait;" ::: "memory");
    if (threadIdx.x == 0) t_wait = Now();
  }
  if (kv.x == 0x12345678u) sink[0] = len;  // keep the load
  if (threadIdx.x == 0) {
    unsigned long long* s = stamps + blockIdx.x * kStamps;
    s[0] = t0;
    s[1] = t_len - t0;
    s[2] = t_table - t0;
    s[3] = t_kv - t0;
    s[4] = t_wait - t0;
    s[5] = len;
  }
}

int main() {
  uint4 *staging, *mirror, *pool;
  unsigned long long* stamps;
  int* sink;
  CK(cudaHostAlloc(&staging, kStagingWords * 16, cudaHostAllocMapped));
  CK(cudaMalloc(&mirror, kStagingWords * 16));
  CK(cudaMalloc(&pool, kPoolBytes));
  CK(cudaMemset(pool, 1, kPoolBytes));
  CK(cudaMalloc(&stamps, kCtas * kStamps * sizeof(unsigned long long)));
  CK(cudaMalloc(&sink, 64));
  int* meta = reinterpret_cast<int*>(staging);
  std::memset(staging, 0, kStagingWords * 16);
  meta[0] = 512;
  for (int b = 0; b < kBlocks; ++b) meta[16 + b] = (b * 37) % kBlocks;
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  std::vector<unsigned long long> host(kCtas * kStamps);
  auto p50 = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0.0 : v[v.size() / 2];
  };
  for (int round = 0; round < 2; ++round) {
    for (int mode = 0; mode < 3; ++mode) {
      std::vector<double> len_us, table_us, kv_us, wait_us, all_us;
      const int iters = 1500;
      for (int i = 0; i < iters + 100; ++i) {
        meta[0] = 500 + (i % 24);  // the host's pack before the launch
        const Clock::time_point t0 = Clock::now();
        CopyIn<<<12, 128, 0, s>>>(staging, mirror, kStagingWords);
        cudaLaunchAttribute attr[1];
        attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attr[0].val.programmaticStreamSerializationAllowed = 1;
        cudaLaunchConfig_t cfg = {};
        cfg.gridDim = dim3(kCtas);
        cfg.blockDim = dim3(kThreads);
        cfg.stream = s;
        cfg.attrs = attr;
        cfg.numAttrs = 1;
        const int* pm = meta;
        const int* dm = reinterpret_cast<const int*>(mirror);
        if (mode == 0) CK(cudaLaunchKernelEx(&cfg, DecodeLike<0>, pm, dm, pool, stamps, i, sink));
        if (mode == 1) CK(cudaLaunchKernelEx(&cfg, DecodeLike<1>, pm, dm, pool, stamps, i, sink));
        if (mode == 2) CK(cudaLaunchKernelEx(&cfg, DecodeLike<2>, pm, dm, pool, stamps, i, sink));
        CK(cudaStreamSynchronize(s));
        const double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
        if (i < 100) continue;
        all_us.push_back(us);
        if (i % 10 == 0) {
          CK(cudaMemcpy(host.data(), stamps, host.size() * 8, cudaMemcpyDeviceToHost));
          for (int c = 0; c < kCtas; ++c) {
            const unsigned long long* st = host.data() + c * kStamps;
            if (static_cast<int>(st[5]) != meta[0]) {
              std::printf("mode %d replay %d cta %d: length %llu, the host wrote %d\n", mode, i, c,
                          st[5], meta[0]);
              return 1;
            }
            len_us.push_back(st[1] / 1000.0);
            table_us.push_back(st[2] / 1000.0);
            kv_us.push_back(st[3] / 1000.0);
            wait_us.push_back(st[4] / 1000.0);
          }
        }
      }
      std::printf("round %d mode %d: from entry: length %5.2f table %5.2f K/V %5.2f wait-done %5.2f us | replay p50 %6.2f us\n",
                  round, mode, p50(len_us), p50(table_us), p50(kv_us), p50(wait_us), p50(all_us));
    }
  }
  return 0;
}
