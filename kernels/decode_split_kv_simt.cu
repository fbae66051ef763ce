// Variant "split_kv_simt": flash-decoding on CUDA cores. Changed from "simple": one CTA per
// (batch row, kv head, split) serves all G q heads (each K/V byte read once per GQA group), 16-byte
// cp.async copies 3 stages deep (each thread copies exactly the chunks it later reads, so the
// main loop has no barrier), block ids fetched one tile ahead, device-side splits + merge.
// H200, 2026-11-21: MHA B=32 H=32 T=4096 990 -> 489 us; GQA 32/8 935 -> 162 us (bench/NOTES.md).
// Issue 17: the warps' merge and the output-or-partial store are attention_merge.cuh's (the PTX
// differs only in the order of independent instructions; main loop untouched); the plan (kernel,
// grid, splits from the plan's device) is made once by PlanSplitKv (split_kv_launch.cu).
// Issue 13: reads an FP8 E4M3 cache (kFp8): the same 8 elements per thread and row, as 8-byte
// code chunks (cp.async.ca) 6 stages deep (the same 48 KB; 5 tiles loading, a quarter more bytes
// in flight than FP16's 2), converted to FP16 by the hardware converter; K's scale is folded
// into q, V's into the accumulators. Not yet measured on a GPU.
#include <cstdint>
#include <string>
#include <type_traits>

#include "kernels/attention_merge.cuh"
#include "api/internal/cuda_check.h"
#include "kernels/decode_device.cuh"
#include "kernels/decode_internal.h"
#include "kernels/fp8_device.cuh"

namespace attnrt::kernels {
namespace {

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;
constexpr int kRowsPerThread = 4;  // 8-element K (and V) chunks each thread copies per tile

template <int kHeadDim>
struct TileShape {
  static constexpr int kLanesPerRow = kHeadDim / 8;               // 16-byte chunks in a row
  static constexpr int kRowsPerPass = kThreads / kLanesPerRow;    // rows one CTA-wide copy covers
  static constexpr int kTokens = kRowsPerPass * kRowsPerThread;   // 64, 32, 16 tokens
  static_assert(kLanesPerRow <= 32 && 32 % kLanesPerRow == 0, "a row must fit in one warp");
};

// Per stage: K and V chunks of 8 elements of a row (16 bytes of FP16, or 8 bytes of E4M3 codes),
// indexed so that thread i's chunks sit at consecutive addresses across a warp (conflict-free).
// FP16: 3 stages (2 loading while 1 is consumed), 3 x 2 x 4 x 128 x 16 B = 48 KB. FP8: chunks
// half the size, so twice the stages in the same 48 KB (the reduction scratch needs up to 33 KB).
// 16-byte aligned: the reduction reuses it with float4 stores.
template <bool kFp8>
struct alignas(16) StageBuffers {
  using Chunk = std::conditional_t<kFp8, uint2, uint4>;
  static constexpr int kStages = kFp8 ? 6 : 3;
  Chunk chunk[kStages][2][kRowsPerThread][kThreads];
};

// A stage chunk as 8 FP32 values: FP16 as stored; E4M3 codes through FP16 (exact).
__device__ __forceinline__ void ChunkToFloat(const uint4& halves, float (&out)[8]) {
  Half8ToFloat(halves, out);
}
__device__ __forceinline__ void ChunkToFloat(const uint2& codes, float (&out)[8]) {
  Half8ToFloat(E4M3x8ToHalf(codes), out);
}

// kFp8: the pools hold E4M3 codes under per-(layer, kv head) scales (SplitKvParams::kv_scales).
template <int kHeadDim, int kGroup, bool kFp8>
__global__ void __launch_bounds__(kThreads) SplitKvDecodeKernel(const SplitKvParams p) {
  using Tile = TileShape<kHeadDim>;
  using Stages = StageBuffers<kFp8>;
  constexpr int kLanesPerRow = Tile::kLanesPerRow;
  constexpr int kStages = Stages::kStages;
  WaitForPrerequisiteGrids();  // lengths, tables, q and the appended K/V come from earlier work
  AllowDependentLaunch();
  const int split = blockIdx.x;
  const int kv_head = blockIdx.y;
  const int batch_row = blockIdx.z;
  const int len = p.kv_lengths[batch_row];
  if (len <= 0) return;  // padding
  const RowSplit ss = SplitRow(len, p.plan);
  if (split >= ss.num_splits) return;  // this row needs fewer splits than the grid has
  const int begin = split * ss.tiles_per_split * Tile::kTokens;
  const int end = min(len, begin + ss.tiles_per_split * Tile::kTokens);
  const int num_tiles = (end - begin + Tile::kTokens - 1) / Tile::kTokens;

  const int tid = threadIdx.x;
  const int lane_in_row = tid % kLanesPerRow;
  const int row0 = tid / kLanesPerRow;
  const int bs_mask = (1 << p.log2_block_size) - 1;
  const int layer = p.layers[batch_row];
  const std::int64_t head_off =
      layer * p.layer_stride +
      static_cast<std::int64_t>(kv_head) * (bs_mask + 1) * kHeadDim + lane_in_row * 8;
  // FP16 values or E4M3 codes (one byte each: element offsets are byte offsets).
  using Element = std::conditional_t<kFp8, std::uint8_t, Half>;
  const Element* k_base = reinterpret_cast<const Element*>(p.k) + head_off;
  const Element* v_base = reinterpret_cast<const Element*>(p.v) + head_off;
  const std::int32_t* table =
      p.block_tables + static_cast<std::int64_t>(batch_row) * p.max_blocks_per_seq;

  __shared__ Stages smem;

  // Block ids of the next tile to issue, loaded one tile ahead so the page-table read is off
  // the copy's critical path.
  int next_block[kRowsPerThread];
  auto load_blocks = [&](int tile) {
#pragma unroll
    for (int i = 0; i < kRowsPerThread; ++i) {
      const int t = begin + tile * Tile::kTokens + i * Tile::kRowsPerPass + row0;
      next_block[i] = (tile < num_tiles && t < end) ? __ldg(table + (t >> p.log2_block_size)) : 0;
    }
  };
  auto issue = [&](int tile) {
    if (tile >= num_tiles) return;
    const int stage = tile % kStages;
#pragma unroll
    for (int i = 0; i < kRowsPerThread; ++i) {
      const int t = begin + tile * Tile::kTokens + i * Tile::kRowsPerPass + row0;
      const bool valid = t < end;
      const std::int64_t off = static_cast<std::int64_t>(next_block[i]) * p.block_stride +
                               static_cast<std::int64_t>(t & bs_mask) * kHeadDim;
      if constexpr (kFp8) {
        CpAsync8(&smem.chunk[stage][0][i][tid], valid ? k_base + off : k_base, valid);
        CpAsync8(&smem.chunk[stage][1][i][tid], valid ? v_base + off : v_base, valid);
      } else {
        CpAsync16(&smem.chunk[stage][0][i][tid], valid ? k_base + off : k_base, valid);
        CpAsync16(&smem.chunk[stage][1][i][tid], valid ? v_base + off : v_base, valid);
      }
    }
  };

  load_blocks(0);
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    issue(s);
    CpAsyncCommit();
    load_blocks(s + 1);
  }

  // FP8: scores over K's codes times K's scale are the scores over the dequantised K, so K's
  // scale joins q's; V's multiplies the accumulators after the loop.
  float k_scale = 1.0f, v_scale = 1.0f;
  if constexpr (kFp8) {
    const int num_kv_heads = p.num_q_heads / kGroup;
    k_scale = p.kv_scales[layer * num_kv_heads + kv_head];
    v_scale = p.kv_scales[(p.num_layers + layer) * num_kv_heads + kv_head];
  }

  // q of the group's heads, pre-scaled into log2 units.
  float q[kGroup][8];
#pragma unroll
  for (int g = 0; g < kGroup; ++g) {
    const Half* q_head = QOfBatchRow<kHeadDim>(p, batch_row) + (kv_head * kGroup + g) * kHeadDim;
    Half8ToFloat(*reinterpret_cast<const uint4*>(q_head + lane_in_row * 8), q[g]);
#pragma unroll
    for (int e = 0; e < 8; ++e) q[g][e] *= kFp8 ? p.scale_log2 * k_scale : p.scale_log2;
  }

  // Each row group (kLanesPerRow lanes sharing token rows) keeps its own online softmax.
  float m[kGroup], l[kGroup], acc[kGroup][8];
#pragma unroll
  for (int g = 0; g < kGroup; ++g) {
    m[g] = kNoScore;
    l[g] = 0.0f;
#pragma unroll
    for (int e = 0; e < 8; ++e) acc[g][e] = 0.0f;
  }

  for (int j = 0; j < num_tiles; ++j) {
    issue(j + kStages - 1);
    CpAsyncCommit();
    load_blocks(j + kStages);
    CpAsyncWait<kStages - 1>();  // this thread's copies of tile j have landed
    const int stage = j % kStages;

    float s[kRowsPerThread][kGroup];
#pragma unroll
    for (int i = 0; i < kRowsPerThread; ++i) {
      float kf[8];
      ChunkToFloat(smem.chunk[stage][0][i][tid], kf);
#pragma unroll
      for (int g = 0; g < kGroup; ++g) {
        float dot = 0.0f;
#pragma unroll
        for (int e = 0; e < 8; ++e) dot = fmaf(q[g][e], kf[e], dot);
        s[i][g] = dot;
      }
    }
    // Sum the row's partial dots across its lanes (xor butterfly: every lane gets the same sum).
#pragma unroll
    for (int i = 0; i < kRowsPerThread; ++i) {
      const int t = begin + j * Tile::kTokens + i * Tile::kRowsPerPass + row0;
#pragma unroll
      for (int g = 0; g < kGroup; ++g) {
#pragma unroll
        for (int o = kLanesPerRow / 2; o >= 1; o /= 2) {
          s[i][g] += __shfl_xor_sync(0xffffffffu, s[i][g], o);
        }
        if (t >= end) s[i][g] = -INFINITY;
      }
    }
#pragma unroll
    for (int g = 0; g < kGroup; ++g) {
      float mx = m[g];
#pragma unroll
      for (int i = 0; i < kRowsPerThread; ++i) mx = fmaxf(mx, s[i][g]);
      const float corr = exp2f(m[g] - mx);
      m[g] = mx;
      l[g] *= corr;
#pragma unroll
      for (int e = 0; e < 8; ++e) acc[g][e] *= corr;
#pragma unroll
      for (int i = 0; i < kRowsPerThread; ++i) {
        s[i][g] = exp2f(s[i][g] - mx);  // 0 for masked rows; their V chunk is zero-filled
        l[g] += s[i][g];
      }
    }
#pragma unroll
    for (int i = 0; i < kRowsPerThread; ++i) {
      float vf[8];
      ChunkToFloat(smem.chunk[stage][1][i][tid], vf);
#pragma unroll
      for (int g = 0; g < kGroup; ++g) {
#pragma unroll
        for (int e = 0; e < 8; ++e) acc[g][e] = fmaf(s[i][g], vf[e], acc[g][e]);
      }
    }
  }
  CpAsyncWait<0>();
  if constexpr (kFp8) {
    // acc summed p times V's codes: times V's scale, p times the dequantised V.
#pragma unroll
    for (int g = 0; g < kGroup; ++g) {
#pragma unroll
      for (int e = 0; e < 8; ++e) acc[g][e] *= v_scale;
    }
  }

  // Merge the row groups of a warp (lanes kLanesPerRow apart hold the same d chunk).
#pragma unroll
  for (int o = kLanesPerRow; o < 32; o *= 2) {
#pragma unroll
    for (int g = 0; g < kGroup; ++g) {
      const float m_o = __shfl_xor_sync(0xffffffffu, m[g], o);
      const float l_o = __shfl_xor_sync(0xffffffffu, l[g], o);
      const float mx = fmaxf(m[g], m_o);
      const float a = exp2f(m[g] - mx), b = exp2f(m_o - mx);
      l[g] = l[g] * a + l_o * b;
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        acc[g][e] = acc[g][e] * a + __shfl_xor_sync(0xffffffffu, acc[g][e], o) * b;
      }
      m[g] = mx;
    }
  }

  // Merge the warps through shared memory (the stage buffers, now idle).
  static_assert(sizeof(float) * kWarps * kGroup * (kHeadDim + 2) <= sizeof(Stages),
                "reduction scratch must fit in the stage buffers");
  __syncthreads();  // every warp is done reading its stage chunks
  float* red_acc = reinterpret_cast<float*>(&smem);   // [kWarps][kGroup][kHeadDim]
  float* red_ml = red_acc + kWarps * kGroup * kHeadDim;  // [kWarps][kGroup][2]
  const int warp = tid / 32;
  const int lane = tid % 32;
  if (lane < kLanesPerRow) {
#pragma unroll
    for (int g = 0; g < kGroup; ++g) {
      float* dst = red_acc + (warp * kGroup + g) * kHeadDim + lane * 8;
      reinterpret_cast<float4*>(dst)[0] = make_float4(acc[g][0], acc[g][1], acc[g][2], acc[g][3]);
      reinterpret_cast<float4*>(dst)[1] = make_float4(acc[g][4], acc[g][5], acc[g][6], acc[g][7]);
      if (lane == 0) {
        red_ml[(warp * kGroup + g) * 2] = m[g];
        red_ml[(warp * kGroup + g) * 2 + 1] = l[g];
      }
    }
  }
  __syncthreads();
  for (int idx = tid; idx < kGroup * kHeadDim; idx += kThreads) {
    const int g = idx / kHeadDim;
    const int d = idx % kHeadDim;
    const AttentionState<float> s = MergeAttentionStates<float>(
        kWarps, [&](int w) { return red_ml[(w * kGroup + g) * 2]; },
        [&](int w) { return red_ml[(w * kGroup + g) * 2 + 1]; },
        [&](int w) { return red_acc[(w * kGroup + g) * kHeadDim + d]; });
    const std::int64_t row =
        static_cast<std::int64_t>(batch_row) * p.num_q_heads + kv_head * kGroup + g;
    StoreOutputOrPartial<kHeadDim>(p, row, split, ss.num_splits, d, s);
  }
  MergeSplitsIfLast<kHeadDim>(p, batch_row, kv_head, kGroup, ss.num_splits);
}

template <int kHeadDim, bool kFp8>
const void* SimtKernelFn(int group) {
  switch (group) {
    case 1: return reinterpret_cast<const void*>(SplitKvDecodeKernel<kHeadDim, 1, kFp8>);
    case 2: return reinterpret_cast<const void*>(SplitKvDecodeKernel<kHeadDim, 2, kFp8>);
    case 4: return reinterpret_cast<const void*>(SplitKvDecodeKernel<kHeadDim, 4, kFp8>);
    case 8: return reinterpret_cast<const void*>(SplitKvDecodeKernel<kHeadDim, 8, kFp8>);
    default: return nullptr;
  }
}

template <int kHeadDim>
SplitKvKernel SimtKernelForDim(int group, bool fp8) {
  SplitKvKernel k;
  k.threads = kThreads;
  k.smem_bytes = 0;  // static
  k.tile_tokens = TileShape<kHeadDim>::kTokens;  // the same for FP16 and FP8
  k.fn = fp8 ? SimtKernelFn<kHeadDim, true>(group) : SimtKernelFn<kHeadDim, false>(group);
  return k;
}

}  // namespace

StatusOr<SplitKvKernel> SimtKernelFor(int head_dim, int group, bool fp8) {
  SplitKvKernel k;
  ATTNRT_RETURN_IF_ERROR(DispatchHeadDim(
      head_dim, [&](auto d) { k = SimtKernelForDim<decltype(d)::value>(group, fp8); }));
  if (k.fn == nullptr) {
    return UnimplementedError("split_kv_simt has no kernel for group size " +
                              std::to_string(group) + " (1, 2, 4 or 8)");
  }
  return k;
}

}  // namespace attnrt::kernels
