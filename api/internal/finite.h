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

#include <attnrt/half.h>

namespace attnrt {

// Index of the first Inf/NaN in `x`, or -1. One branch-free pass first (SSE2 where there is
// SSE2: GCC's -O3 autovectorisation of the scalar test took ~250 ns for 4096 halves on the
// 2-core VM, -O2 ~1.9 us), the index only on the rare bad input.
inline std::ptrdiff_t FirstNonFinite(std::span<const Half> x) {
  constexpr std::uint16_t kExponent = 0x7c00;  // all ones: Inf or NaN
  std::size_t i = 0;
  unsigned bad = 0;
#if defined(__SSE2__)
  // The largest |x| bit pattern (x & 0x7fff, a positive int16) of every lane: >= 0x7c00 iff some
  // half is Inf or NaN. An and and a max a vector, four accumulators.
  const __m128i magnitude = _mm_set1_epi16(0x7fff);
  __m128i m0 = _mm_setzero_si128(), m1 = m0, m2 = m0, m3 = m0;
  const __m128i* s = reinterpret_cast<const __m128i*>(x.data());
  for (; i + 32 <= x.size(); i += 32, s += 4) {
    m0 = _mm_max_epi16(m0, _mm_and_si128(_mm_loadu_si128(s), magnitude));
    m1 = _mm_max_epi16(m1, _mm_and_si128(_mm_loadu_si128(s + 1), magnitude));
    m2 = _mm_max_epi16(m2, _mm_and_si128(_mm_loadu_si128(s + 2), magnitude));
    m3 = _mm_max_epi16(m3, _mm_and_si128(_mm_loadu_si128(s + 3), magnitude));
  }
  const __m128i m = _mm_max_epi16(_mm_max_epi16(m0, m1), _mm_max_epi16(m2, m3));
  bad = static_cast<unsigned>(
      _mm_movemask_epi8(_mm_cmpgt_epi16(m, _mm_set1_epi16(static_cast<short>(kExponent - 1)))));
#endif
  for (std::size_t j = i; j < x.size(); ++j) bad |= (x[j].bits & kExponent) == kExponent;
  if (!bad) return -1;
  for (std::size_t j = 0; j < x.size(); ++j) {
    if ((x[j].bits & kExponent) == kExponent) return static_cast<std::ptrdiff_t>(j);
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
