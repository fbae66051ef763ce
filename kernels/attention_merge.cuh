// The one attention-state merge and the one "output or partial" store of every decode path: a
// kernel's main loop leaves per-part states (m, l, acc) behind; these combine them and write the
// row's result. Device code only (CUDA translation units); everything is force-inlined, so a
// kernel compiles to the instructions it had with the code written out in place.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/decode_device.cuh"
#include "kernels/decode_internal.h"

namespace attnrt::kernels {

// The state of an attention row (at the element(s) `Acc` holds) over a subset of its keys:
//   m = max_t s_t,  l = sum_t e^(s_t - m),  acc = sum_t e^(s_t - m) v_t,
// where e is 2 for scores in log2 units (every path today: the fused kernels pre-scale q by
// softmax scale * log2(e); the GEMM path's softmax keeps its chunk max in log2 units, so its
// chunks merge here) and Euler's e for natural-log scores (kNatural). out = acc / l.
template <typename Acc>
struct AttentionState {
  float m;
  float l;
  Acc acc;
};

enum class ScoreUnits { kLog2, kNatural };

__device__ __forceinline__ void AddScaled(float& acc, float part, float w) { acc += part * w; }
__device__ __forceinline__ void AddScaled(float4& acc, const float4& part, float w) {
  acc.x += part.x * w;
  acc.y += part.y * w;
  acc.z += part.z * w;
  acc.w += part.w * w;
}

// Merges the states of `num_parts` disjoint key subsets of one row (log2 units), in part order:
//   M = max_i m_i,  l = sum_i l_i 2^(m_i - M),  acc = sum_i acc_i 2^(m_i - M).
// Two passes, the max first, so every weight is <= 1 and computed once (FP32 throughout).
// m_of(i), l_of(i), acc_of(i) read part i. A compile-time num_parts unrolls both loops; a
// runtime one (a row's split count) leaves them rolled.
template <typename Acc, typename MOf, typename LOf, typename AccOf>
__device__ __forceinline__ AttentionState<Acc> MergeAttentionStates(int num_parts, MOf m_of, LOf l_of,
                                                                    AccOf acc_of) {
  AttentionState<Acc> merged{kNoScore, 0.0f, Acc{}};
  for (int i = 0; i < num_parts; ++i) merged.m = fmaxf(merged.m, m_of(i));
  for (int i = 0; i < num_parts; ++i) {
    const float w = exp2f(m_of(i) - merged.m);
    merged.l += l_of(i) * w;
    AddScaled(merged.acc, acc_of(i), w);
  }
  return merged;
}

// How acc becomes acc / l. The two round differently, so each site keeps the one it was tested
// and measured with: kDivide (one correctly rounded division per element: the decode kernels'
// one element per thread, the GEMM finalize) or kReciprocal (acc * (1 / l): the split merge
// kernel, one division for the four elements a thread writes).
enum class Normalize { kDivide, kReciprocal };

template <Normalize kNorm>
struct Normalizer {
  float by;  // l, or 1 / l
  __device__ __forceinline__ explicit Normalizer(float l)
      : by(kNorm == Normalize::kDivide ? l : 1.0f / l) {}
  __device__ __forceinline__ float operator()(float x) const {
    return kNorm == Normalize::kDivide ? x / by : x * by;
  }
};

// Natural-log LSE of a row's merged state.
template <ScoreUnits kUnits>
__device__ __forceinline__ float NaturalLse(float m, float l) {
  if constexpr (kUnits == ScoreUnits::kLog2) {
    return (m + log2f(l)) * kLn2;
  } else {
    return m + logf(l);
  }
}

template <Normalize kNorm>
__device__ __forceinline__ void StoreHalves(__half* dst, float acc, Normalizer<kNorm> n) {
  *dst = __float2half_rn(n(acc));
}
template <Normalize kNorm>
__device__ __forceinline__ void StoreHalves(__half* dst, const float2& acc, Normalizer<kNorm> n) {
  *reinterpret_cast<__half2*>(dst) = __floats2half2_rn(n(acc.x), n(acc.y));
}
template <Normalize kNorm>
__device__ __forceinline__ void StoreHalves(__half* dst, const float4& acc, Normalizer<kNorm> n) {
  const __half2 packed[2] = {__floats2half2_rn(n(acc.x), n(acc.y)),
                             __floats2half2_rn(n(acc.z), n(acc.w))};
  *reinterpret_cast<uint2*>(dst) = *reinterpret_cast<const uint2*>(packed);
}

// A row's final result: out_row[d ...] = fp16(acc / l) for the element(s) of Acc (1, 2 or 4
// consecutive, one store), and *lse_at (natural log) by the thread holding d == 0 where lse_at
// is not null.
template <Normalize kNorm, ScoreUnits kUnits, typename Acc>
__device__ __forceinline__ void StoreOutput(__half* out_row, float* lse_at, int d,
                                            const AttentionState<Acc>& s) {
  StoreHalves(out_row + d, s.acc, Normalizer<kNorm>(s.l));
  if (d == 0 && lse_at != nullptr) *lse_at = NaturalLse<kUnits>(s.m, s.l);
}

// Where a paged-decode kernel reads batch row b's q ([H][D]) and writes q-head row r's output
// (r = b * H + h) and LSE: the batch's tensors, or the request's own memory
// (PagedDecodeParams::q_rows / out_rows / lse_rows: requests read and written in place).
template <int kHeadDim>
__device__ __forceinline__ const Half* QOfBatchRow(const PagedDecodeParams& p, int batch_row) {
  if (p.q_rows != nullptr) return reinterpret_cast<const Half*>(p.q_rows[batch_row]);
  return p.q + static_cast<std::int64_t>(batch_row) * p.num_q_heads * kHeadDim;
}

// Before griddepcontrol.wait: asks L2 for the lines a CTA of (batch_row, kv_head) reads first
// once its prerequisite grids are done (the row's length and layer, the first lines of its block
// table, its heads' q), so that after the wait they are L2 hits instead of HBM round trips one
// after another (a metadata row evicted by the previous step's K/V). A prefetch returns no value:
// an earlier grid still writing these lines is no race, as L2 keeps device memory coherent and
// the reads after the wait see its final bytes. q only when read from the batch's tensor (a
// request's own q pointer, q_rows, is itself a load).
template <int kHeadDim>
__device__ __forceinline__ void PrefetchRowStart(const PagedDecodeParams& p, int batch_row,
                                                 int kv_head) {
  constexpr int kTableLines = 8;  // a table row's first 256 entries: 4096 tokens in blocks of 16
  const int t = static_cast<int>(threadIdx.x);
  const int table_lines = min(kTableLines, (p.max_blocks_per_seq + 31) / 32);
  const int q_lines = p.q_rows == nullptr ? p.group * kHeadDim / 64 : 0;  // 128-byte lines
  const void* line = nullptr;
  if (t == 0) {
    line = p.kv_lengths + batch_row;
  } else if (t == 1) {
    line = p.layers + batch_row;
  } else if (t - 2 < table_lines) {
    line = p.block_tables + static_cast<std::int64_t>(batch_row) * p.max_blocks_per_seq +
           (t - 2) * 32;
  } else if (t - 2 - table_lines < q_lines) {
    line = p.q + (static_cast<std::int64_t>(batch_row) * p.num_q_heads + kv_head * p.group) *
                     kHeadDim +
           (t - 2 - table_lines) * 64;
  }
  if (line != nullptr) asm volatile("prefetch.global.L2 [%0];" ::"l"(line));
}

template <int kHeadDim>
__device__ __forceinline__ __half* OutOfRow(const PagedDecodeParams& p, std::int64_t row) {
  if (p.out_rows != nullptr) {
    return reinterpret_cast<__half*>(p.out_rows[row / p.num_q_heads]) +
           (row % p.num_q_heads) * kHeadDim;
  }
  return reinterpret_cast<__half*>(p.out) + row * kHeadDim;
}
__device__ __forceinline__ float* LseOfRow(const PagedDecodeParams& p, std::int64_t row) {
  if (p.lse_rows != nullptr) {
    float* lse = reinterpret_cast<float*>(p.lse_rows[row / p.num_q_heads]);
    return lse != nullptr ? lse + row % p.num_q_heads : nullptr;
  }
  return p.lse != nullptr ? p.lse + row : nullptr;
}

// One split's share of a split-KV row for the cross-split merge: the normalised FP32 output and
// the split's LSE in log2 units (the merge weighs splits by 2^(lse_s - max)).
template <int kHeadDim>
__device__ __forceinline__ void StorePartial(const SplitKvParams& p, std::int64_t row, int split,
                                             int d, const AttentionState<float>& s) {
  const std::int64_t part = row * p.plan.max_splits + split;
  p.partial_out[part * kHeadDim + d] = s.acc / s.l;
  if (d == 0) p.partial_lse[part] = s.m + log2f(s.l);
}

// Element d of a split-KV kernel's row: the final output when the row was not split (its one
// CTA saw every key), else this split's partial (MergeSplitsIfLast then merges them).
template <int kHeadDim>
__device__ __forceinline__ void StoreOutputOrPartial(const SplitKvParams& p, std::int64_t row,
                                                     int split, int num_splits, int d,
                                                     const AttentionState<float>& s) {
  if (num_splits == 1) {
    StoreOutput<Normalize::kDivide, ScoreUnits::kLog2>(OutOfRow<kHeadDim>(p, row),
                                                       LseOfRow(p, row), d, s);
  } else {
    StorePartial<kHeadDim>(p, row, split, d, s);
  }
}

// The merge of a row's split partials (normalised outputs `out[split * stride]`, LSEs
// `lse[split]` in log2 units, stored by other CTAs: read from L2 with __ldcg), kChunk splits'
// loads in flight at once: a rolled loop over the splits waited for each load in turn, two L2
// round trips a split (the merging split's tail was 2 us at 4 splits and 4.9 us at 16 on the
// H200: bench/NOTES.md, "the split merge's tail"). Within a chunk as MergeAttentionStates (max
// first, then the weighted sums in split order); chunks after the first rescale what came
// before by 2^(M_old - M_new), so up to kChunk splits the result is MergeAttentionStates's.
template <int kChunk>
__device__ __forceinline__ AttentionState<float> MergeSplitPartials(const float* lse,
                                                                    const float* out,
                                                                    int stride, int num_splits) {
  AttentionState<float> merged{kNoScore, 0.0f, 0.0f};
  for (int first = 0; first < num_splits; first += kChunk) {
    float part_lse[kChunk], part_out[kChunk];
#pragma unroll
    for (int i = 0; i < kChunk; ++i) {
      const bool live = first + i < num_splits;
      part_lse[i] = live ? __ldcg(lse + first + i) : kNoScore;
      part_out[i] = live ? __ldcg(out + static_cast<std::int64_t>(first + i) * stride) : 0.0f;
    }
    float m = merged.m;
#pragma unroll
    for (int i = 0; i < kChunk; ++i) m = fmaxf(m, part_lse[i]);
    const float rescale = exp2f(merged.m - m);  // 0 for the first chunk (merged.m = kNoScore)
    merged.l *= rescale;
    merged.acc *= rescale;
#pragma unroll
    for (int i = 0; i < kChunk; ++i) {
      const float w = exp2f(part_lse[i] - m);  // 0 past num_splits
      merged.l += w;
      merged.acc += part_out[i] * w;
    }
    merged.m = m;
  }
  return merged;
}

// The cross-split merge of both split-KV families, in the decode kernel itself (no merge
// kernel): after a CTA stored its partials (StoreOutputOrPartial), it counts itself in at its
// (batch row, kv head)'s counter; the CTA that arrives last merges the `group` q heads' partials
// of every split into the output (and LSE), and resets the counter to zero for the next run.
// Called by every thread of the CTA (it has barriers); nothing to do for an unsplit row.
//   out = sum_s 2^(lse_s - M) o_s / sum_s 2^(lse_s - M),  M = max_s lse_s.
template <int kHeadDim>
__device__ __forceinline__ void MergeSplitsIfLast(const SplitKvParams& p, int batch_row,
                                                  int kv_head, int group, int num_splits) {
  if (num_splits == 1) return;
  __threadfence();  // this thread's partials are visible device-wide ...
  __syncthreads();  // ... for every thread, before the CTA counts in
  unsigned* counter = p.split_counters + batch_row * (p.num_q_heads / p.group) + kv_head;
  bool last = false;
  if (threadIdx.x == 0) {
    last = atomicAdd(counter, 1u) == static_cast<unsigned>(num_splits - 1);
    if (last) *counter = 0;  // every split has arrived: ready for the next run
  }
  if (!__syncthreads_or(last)) return;
  __threadfence();  // the other splits' partials, read below, are the ones they stored
  const std::int64_t first_row =
      static_cast<std::int64_t>(batch_row) * p.num_q_heads + kv_head * group;
  for (int idx = threadIdx.x; idx < group * kHeadDim; idx += blockDim.x) {
    const std::int64_t row = first_row + idx / kHeadDim;
    const int d = idx % kHeadDim;
    const float* lse = p.partial_lse + row * p.plan.max_splits;
    const float* out = p.partial_out + row * p.plan.max_splits * kHeadDim + d;
    // A split's partial is already normalised (its l is 1).
    const AttentionState<float> s = MergeSplitPartials<8>(lse, out, kHeadDim, num_splits);
    StoreOutput<Normalize::kDivide, ScoreUnits::kLog2>(OutOfRow<kHeadDim>(p, row),
                                                       LseOfRow(p, row), d, s);
  }
}

}  // namespace attnrt::kernels
