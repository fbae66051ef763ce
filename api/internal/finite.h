// FirstNonFinite: the one check_finite scan, shared by Decode's in-place route
// (scheduler/intake.cc) and Prefill (api/facade_runtime.cc); CopyCheckingFinite, the same check
// fused into Submit's copy into a request's staging. Internal: not a public header.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <attnrt/half.h>

namespace attnrt {

namespace finite_internal {

constexpr std::uint16_t kExponent = 0x7c00;  // all ones: Inf or NaN

// Whether any of x[0, n) is Inf or NaN; scalar.
inline bool AnyNonFiniteScalar(const Half* x, std::size_t n) {
  unsigned bad = 0;
  for (std::size_t j = 0; j < n; ++j) bad |= (x[j].bits & kExponent) == kExponent;
  return bad != 0;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define ATTNRT_FINITE_AVX2 1
// The same with AVX2 (32 bytes a load), for CPUs that have it (the binary targets SSE2 only):
// the largest |x| bit pattern (x & 0x7fff, a positive int16) over all lanes, >= 0x7c00 iff some
// half is Inf or NaN; an and and a max a vector, four accumulators.
__attribute__((target("avx2"))) inline bool AnyNonFiniteAvx2(const Half* x, std::size_t n) {
  const __m256i magnitude = _mm256_set1_epi16(0x7fff);
  __m256i m0 = _mm256_setzero_si256(), m1 = m0, m2 = m0, m3 = m0;
  const __m256i* s = reinterpret_cast<const __m256i*>(x);
  std::size_t i = 0;
  for (; i + 64 <= n; i += 64, s += 4) {
    m0 = _mm256_max_epi16(m0, _mm256_and_si256(_mm256_loadu_si256(s), magnitude));
    m1 = _mm256_max_epi16(m1, _mm256_and_si256(_mm256_loadu_si256(s + 1), magnitude));
    m2 = _mm256_max_epi16(m2, _mm256_and_si256(_mm256_loadu_si256(s + 2), magnitude));
    m3 = _mm256_max_epi16(m3, _mm256_and_si256(_mm256_loadu_si256(s + 3), magnitude));
  }
  for (; i + 16 <= n; i += 16, ++s) {
    m0 = _mm256_max_epi16(m0, _mm256_and_si256(_mm256_loadu_si256(s), magnitude));
  }
  const __m256i m = _mm256_max_epi16(_mm256_max_epi16(m0, m1), _mm256_max_epi16(m2, m3));
  const __m256i bad = _mm256_cmpgt_epi16(m, _mm256_set1_epi16(static_cast<short>(kExponent - 1)));
  return _mm256_movemask_epi8(bad) != 0 || AnyNonFiniteScalar(x + i, n - i);
}

inline bool HasAvx2() {
  static const bool has = __builtin_cpu_supports("avx2");
  return has;
}
#endif

// SSE2 (x86-64's baseline), as above 16 bytes a load; scalar without SSE2.
inline bool AnyNonFiniteSse2(const Half* x, std::size_t n) {
  std::size_t i = 0;
#if defined(__SSE2__)
  const __m128i magnitude = _mm_set1_epi16(0x7fff);
  __m128i m0 = _mm_setzero_si128(), m1 = m0, m2 = m0, m3 = m0;
  const __m128i* s = reinterpret_cast<const __m128i*>(x);
  for (; i + 32 <= n; i += 32, s += 4) {
    m0 = _mm_max_epi16(m0, _mm_and_si128(_mm_loadu_si128(s), magnitude));
    m1 = _mm_max_epi16(m1, _mm_and_si128(_mm_loadu_si128(s + 1), magnitude));
    m2 = _mm_max_epi16(m2, _mm_and_si128(_mm_loadu_si128(s + 2), magnitude));
    m3 = _mm_max_epi16(m3, _mm_and_si128(_mm_loadu_si128(s + 3), magnitude));
  }
  const __m128i m = _mm_max_epi16(_mm_max_epi16(m0, m1), _mm_max_epi16(m2, m3));
  if (_mm_movemask_epi8(_mm_cmpgt_epi16(m, _mm_set1_epi16(static_cast<short>(kExponent - 1))))) {
    return true;
  }
#endif
  return AnyNonFiniteScalar(x + i, n - i);
}

// Whether any of x[0, n) is Inf or NaN, by the widest of the above this CPU runs.
inline bool AnyNonFinite(const Half* x, std::size_t n) {
#if defined(ATTNRT_FINITE_AVX2)
  if (HasAvx2()) return AnyNonFiniteAvx2(x, n);
#endif
  return AnyNonFiniteSse2(x, n);
}

}  // namespace finite_internal

// Index of the first Inf/NaN in `x`, or -1. One branch-free pass first (AVX2 where the CPU has
// it, else SSE2: GCC's -O3 autovectorisation of the scalar test took ~250 ns for 4096 halves on
// the 2-core VM, -O2 ~1.9 us; SSE2 ~125 ns), the index only on the rare bad input.
inline std::ptrdiff_t FirstNonFinite(std::span<const Half> x) {
  if (!finite_internal::AnyNonFinite(x.data(), x.size())) return -1;
  for (std::size_t j = 0; j < x.size(); ++j) {
    if ((x[j].bits & finite_internal::kExponent) == finite_internal::kExponent) {
      return static_cast<std::ptrdiff_t>(j);
    }
  }
  return -1;
}

// A request's q + k + v from this many bytes up is staged with streaming stores (below).
// Measured per request: 1 KiB 0.19-0.23 -> 0.43 us (the fence waits for the stores to reach
// memory), 12 KiB 1.13-1.26 -> 0.90 us (the scheduler intake benchmark, 2-core VM), 24 KiB
// 4.05-4.92 -> 3.21-3.30 us (Submit on the H200 host, bench/NOTES.md 2026-11-29).
constexpr std::size_t kStreamingCopyMinBytes = 8192;

// Copies src into dst (src.size() halves) and, with `check`, returns the index of src's first
// Inf/NaN (-1: none; dst then holds an unspecified part of src).
// `streaming`: one pass, each 16 bytes loaded once, tested and stored with a non-temporal store
// where dst is 16-byte aligned (a request's staging, 64-byte aligned, is read next by the GPU or
// another thread, not by this one: streaming stores skip reading the destination lines into
// this core's cache); the caller then calls StreamingCopiesDone before publishing dst.
// Otherwise memcpy, then the scan (faster for small copies, which stay in cache).
inline std::ptrdiff_t CopyCheckingFinite(Half* dst, std::span<const Half> src, bool check,
                                         bool streaming) {
  const std::size_t n = src.size();
#if defined(__SSE2__)
  if (streaming && (reinterpret_cast<std::uintptr_t>(dst) & 15) == 0) {
    const std::size_t vectors = n / 8;  // 8 halves a vector
    const __m128i* s = reinterpret_cast<const __m128i*>(src.data());
    __m128i* d = reinterpret_cast<__m128i*>(dst);
    const __m128i exponent = _mm_set1_epi16(0x7c00);
    __m128i bad = _mm_setzero_si128();
    for (std::size_t i = 0; i < vectors; ++i) {
      const __m128i x = _mm_loadu_si128(s + i);
      bad = _mm_or_si128(bad, _mm_cmpeq_epi16(_mm_and_si128(x, exponent), exponent));
      _mm_stream_si128(d + i, x);
    }
    const std::size_t done = vectors * 8;
    if (done < n) std::memcpy(dst + done, src.data() + done, (n - done) * sizeof(Half));
    if (!check) return -1;
    if (_mm_movemask_epi8(bad) == 0 && FirstNonFinite(src.subspan(done)) < 0) return -1;
    return FirstNonFinite(src);
  }
#endif
  std::memcpy(dst, src.data(), n * sizeof(Half));
  return check ? FirstNonFinite(src) : -1;
}

// Orders the streaming stores of CopyCheckingFinite before this thread's later stores (the
// intake queue's release that publishes the copy).
inline void StreamingCopiesDone() {
#if defined(__SSE2__)
  _mm_sfence();
#endif
}

}  // namespace attnrt
