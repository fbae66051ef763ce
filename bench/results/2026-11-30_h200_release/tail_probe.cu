// Probe (r10, r11): is the one-wave tail of a GQA-shaped decode step (B=32, Hkv=8, T=4096, D=128:
// 256 work items of 2 MB of K/V each, one CTA of 4 warps per item, two CTAs an SM) reducible by
// letting CTAs that finish early take tiles from items still running? No attention math: each
// warp streams its 8 KB tiles (a 16-token K block and its V block, 4 KB each, pages scattered
// over a 512 MB pool as the KV cache's are) with 16-byte loads folded into a checksum (r10: one
// tile in flight a warp; r11: two, the next tile's loads issued before the current one is used). Modes:
//   static   grid = 256 items; warp w of item i reads tiles w, w+4, ... (the kernel today)
//   dynamic  grid = 256 primaries then 256 helpers (linear block order); every warp claims its
//            next tile of its item from the item's counter (atomicAdd, one tile a claim, made
//            when the tile before is loaded); a helper whose item is done exits; the last CTA
//            of an item resets its counter
//   dynamic4 the same, claiming four tiles a time
// Per mode: the median kernel time over 50 launches (CUDA events), the bytes / that time, and
// the same bytes at the copy ceiling of one cudaMemcpy D2D of 512 MB measured in this process.
// nvcc -O3 -std=c++20 -arch=sm_90 tail_probe.cu -o tail_probe
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>
#include <vector>

#define CK(x)                                                         \
  do {                                                                \
    cudaError_t err_ = (x);                                           \
    if (err_ != cudaSuccess) {                                        \
      std::printf("%s: %s\n", #x, cudaGetErrorString(err_));         \
      std::exit(1);                                                   \
    }                                                                 \
  } while (0)

constexpr int kItems = 256, kTiles = 256, kWarps = 4, kThreads = kWarps * 32;
constexpr int kTileBytes = 8192;  // K + V of 16 tokens x 128 x 2 B
constexpr int kWordsPerTile = kTileBytes / 16;  // 512: 16 a lane
constexpr std::size_t kPoolBytes = std::size_t{kItems} * kTiles * kTileBytes;  // 512 MB
constexpr int kSmem = 100 * 1024;  // two CTAs an SM, as the real kernel's 4-warp CTAs

__device__ __forceinline__ uint4 Load(const uint4* p) {
  uint4 v;
  asm volatile("ld.global.nc.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}

// A tile's 16 words a lane, loaded (LoadTile) and later folded (Fold): each warp keeps two tiles
// in flight, the next one's loads issued before the current one is used.
struct Tile {
  uint4 w[16];
};
__device__ __forceinline__ void LoadTile(const uint4* pool, const int* pages, int item, int tile,
                                         Tile& t) {
  const uint4* base = pool + static_cast<std::size_t>(pages[item * kTiles + tile]) * kWordsPerTile;
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int i = 0; i < 16; ++i) t.w[i] = Load(base + lane + 32 * i);
}
__device__ __forceinline__ unsigned Fold(const Tile& t) {
  unsigned x = 0;
#pragma unroll
  for (int i = 0; i < 16; ++i) x ^= t.w[i].x ^ t.w[i].y ^ t.w[i].z ^ t.w[i].w;
  return x;
}

// The warp's tiles in order: `next()` gives the tile after the last one given (>= kTiles: none).
template <typename Next>
__device__ __forceinline__ unsigned StreamTiles(const uint4* pool, const int* pages, int item,
                                                Next next) {
  unsigned x = 0;
  Tile a, b;
  int cur = next(), nxt = next();
  if (cur < kTiles) LoadTile(pool, pages, item, cur, a);
  while (cur < kTiles) {
    if (nxt < kTiles) LoadTile(pool, pages, item, nxt, b);
    const int after = nxt < kTiles ? next() : kTiles;
    x ^= Fold(a);
    cur = nxt;
    if (cur >= kTiles) break;
    const int after2 = after < kTiles ? next() : kTiles;
    if (after < kTiles) LoadTile(pool, pages, item, after, a);
    x ^= Fold(b);
    cur = after;
    nxt = after2;
  }
  return x;
}

__global__ void __launch_bounds__(kThreads) Static(const uint4* pool, const int* pages, unsigned* sink) {
  extern __shared__ char smem[];
  const int item = blockIdx.x;
  int t = static_cast<int>(threadIdx.x / 32) - kWarps;
  const unsigned x = StreamTiles(pool, pages, item, [&] { return t += kWarps; });
  if (x == 0x9e3779b9u) sink[0] = x + smem[0];
}

template <int kClaim>
__global__ void __launch_bounds__(kThreads) Dynamic(const uint4* pool, const int* pages,
                                                    unsigned* counters, unsigned* arrivals,
                                                    unsigned* sink) {
  extern __shared__ char smem[];
  const int item = blockIdx.x % kItems;  // blocks 0..255 primaries, 256..511 helpers
  const int lane = threadIdx.x & 31;
  int base = 0, used = kClaim;  // the current claim's first tile and how many of it are given
  const unsigned x = StreamTiles(pool, pages, item, [&] {
    if (used == kClaim) {
      unsigned c = 0;
      if (lane == 0) c = atomicAdd(&counters[item], kClaim);
      base = static_cast<int>(__shfl_sync(0xffffffffu, c, 0));
      used = 0;
    }
    const int t = base + used++;
    return t < kTiles ? t : kTiles;
  });
  if (x == 0x9e3779b9u) sink[0] = x + smem[0];
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    if (atomicAdd(&arrivals[item], 1) == 1) {  // the item's second CTA: both are done claiming
      counters[item] = 0;
      arrivals[item] = 0;
    }
  }
}

int main() {
  uint4* pool;
  int* pages;
  unsigned *counters, *arrivals, *sink;
  CK(cudaMalloc(&pool, kPoolBytes));
  CK(cudaMemset(pool, 1, kPoolBytes));
  CK(cudaMalloc(&pages, sizeof(int) * kItems * kTiles));
  CK(cudaMalloc(&counters, sizeof(unsigned) * kItems));
  CK(cudaMalloc(&arrivals, sizeof(unsigned) * kItems));
  CK(cudaMalloc(&sink, 64));
  CK(cudaMemset(counters, 0, sizeof(unsigned) * kItems));
  CK(cudaMemset(arrivals, 0, sizeof(unsigned) * kItems));
  std::vector<int> perm(kItems * kTiles);
  std::iota(perm.begin(), perm.end(), 0);
  std::mt19937 rng(7);
  std::shuffle(perm.begin(), perm.end(), rng);
  CK(cudaMemcpy(pages, perm.data(), sizeof(int) * perm.size(), cudaMemcpyHostToDevice));
  CK(cudaFuncSetAttribute(Static, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
  CK(cudaFuncSetAttribute(Dynamic<1>, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
  CK(cudaFuncSetAttribute(Dynamic<4>, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  auto median = [](std::vector<float> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  // The copy ceiling of this process: one D2D copy of 256 MB (reads 256 MB, writes 256 MB).
  std::vector<float> copy_ms;
  for (int i = 0; i < 12; ++i) {
    CK(cudaEventRecord(a));
    CK(cudaMemcpy(reinterpret_cast<char*>(pool) + kPoolBytes / 2, pool, kPoolBytes / 2,
                  cudaMemcpyDeviceToDevice));
    CK(cudaEventRecord(b));
    CK(cudaEventSynchronize(b));
    float ms;
    CK(cudaEventElapsedTime(&ms, a, b));
    copy_ms.push_back(ms);
  }
  const double copy_tbs = 2.0 * (kPoolBytes / 2) / (median(copy_ms) * 1e-3) / 1e12;
  std::printf("copy ceiling (read + write): %.3f TB/s; the step's %.0f MB at it: %.1f us\n", copy_tbs,
              kPoolBytes / 1e6, kPoolBytes / (copy_tbs * 1e12) * 1e6);
  const char* names[3] = {"static", "dynamic", "dynamic4"};
  for (int round = 0; round < 3; ++round) {
    for (int mode = 0; mode < 3; ++mode) {
      std::vector<float> ms;
      for (int i = 0; i < 60; ++i) {
        CK(cudaEventRecord(a));
        if (mode == 0) Static<<<kItems, kThreads, kSmem>>>(pool, pages, sink);
        if (mode == 1) Dynamic<1><<<2 * kItems, kThreads, kSmem>>>(pool, pages, counters, arrivals, sink);
        if (mode == 2) Dynamic<4><<<2 * kItems, kThreads, kSmem>>>(pool, pages, counters, arrivals, sink);
        CK(cudaEventRecord(b));
        CK(cudaEventSynchronize(b));
        float t;
        CK(cudaEventElapsedTime(&t, a, b));
        if (i >= 10) ms.push_back(t);
      }
      const double us = median(ms) * 1e3;
      std::printf("round %d %-9s %7.1f us  %.3f TB/s  %.3f of the copy ceiling\n", round, names[mode],
                  us, kPoolBytes / (us * 1e-6) / 1e12, kPoolBytes / (us * 1e-6) / 1e12 / copy_tbs);
    }
  }
  unsigned left[kItems];
  CK(cudaMemcpy(left, counters, sizeof(left), cudaMemcpyDeviceToHost));
  for (int i = 0; i < kItems; ++i) {
    if (left[i] != 0) {
      std::printf("item %d: counter left at %u (not reset)\n", i, left[i]);
      return 1;
    }
  }
  return 0;
}
