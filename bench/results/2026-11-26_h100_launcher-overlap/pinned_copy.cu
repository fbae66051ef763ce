// A study for run2: how fast one host thread copies a B=32 piece's q/k/v (32 x 12 KB) into
// pinned (cudaMallocHost) staging against ordinary memory, from hot and from cold sources, with
// memcpy and with non-temporal stores. Medians of 200 copies.
#include <cuda_runtime.h>
#include <immintrin.h>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

static void NtCopy(void* dst, const void* src, size_t n) {
  auto* d = static_cast<__m128i*>(dst);
  auto* s = static_cast<const __m128i*>(src);
  for (size_t i = 0; i < n / 16; i += 4) {
    __m128i a = _mm_loadu_si128(s + i), b = _mm_loadu_si128(s + i + 1);
    __m128i c = _mm_loadu_si128(s + i + 2), e = _mm_loadu_si128(s + i + 3);
    _mm_stream_si128(d + i, a); _mm_stream_si128(d + i + 1, b);
    _mm_stream_si128(d + i + 2, c); _mm_stream_si128(d + i + 3, e);
  }
  _mm_sfence();
}

int main() {
  const size_t rec = 12288, n = 32, pool = 65536, nbuf = 3;
  char* src = static_cast<char*>(aligned_alloc(64, rec * pool));
  memset(src, 1, rec * pool);
  char* pinned = nullptr;
  cudaMallocHost(&pinned, rec * n * nbuf);
  char* heap = static_cast<char*>(aligned_alloc(64, rec * n * nbuf));
  memset(pinned, 0, rec * n * nbuf);
  memset(heap, 0, rec * n * nbuf);
  for (int dst_kind = 0; dst_kind < 2; ++dst_kind) {
    for (int cold = 0; cold < 2; ++cold) {
      for (int nt = 0; nt < 2; ++nt) {
        std::vector<double> t;
        size_t next = 0;
        for (int it = 0; it < 200; ++it) {
          char* d = (dst_kind ? heap : pinned) + (it % nbuf) * rec * n;
          auto t0 = std::chrono::steady_clock::now();
          for (size_t j = 0; j < n; ++j) {
            const char* s = src + (cold ? ((next++ * 7919) % pool) * rec : j * rec);
            if (nt) NtCopy(d + j * rec, s, rec); else memcpy(d + j * rec, s, rec);
          }
          t.push_back(std::chrono::duration<double, std::micro>(
                          std::chrono::steady_clock::now() - t0).count());
        }
        std::sort(t.begin(), t.end());
        std::printf("dst %-6s src %-4s %-6s: median %6.1f us for 384 KB (%.1f GB/s)\n",
                    dst_kind ? "heap" : "pinned", cold ? "cold" : "hot", nt ? "nt" : "memcpy",
                    t[t.size() / 2], rec * n / t[t.size() / 2] / 1e3);
      }
    }
  }
  return 0;
}
